"""Stage: a fastText quality classifier's score (llmtk.clean.quality loads and trains them)."""

from __future__ import annotations

from dataclasses import dataclass

from llmtk.clean.stages.base import Flag, ModelStage, Work, share


@dataclass(frozen=True)
class Quality:
    model: str = ""  # a fastText classifier (.bin/.ftz); empty: stage off
    min_score: float = 0.5
    label: str = "hq"  # the positive label (DCLM's classifier: hq vs cc)


class QualityStage(ModelStage):
    name = "quality"
    config = Quality
    help = "score with a fastText classifier (e.g. DCLM's) and drop low scores"
    reasons = ("quality.low_score",)
    flags = (
        Flag("model", ("--quality-model",), "fastText classifier to score documents with."),
        Flag("min_score", ("--min-quality",), "Drop documents whose classifier score is below "
             "this."),
        Flag("label", ("--quality-label",), "The classifier's positive label."),
    )

    def __init__(self, cfg: Quality, whole) -> None:
        super().__init__(cfg, whole)
        from llmtk.clean.quality import QualityModel

        self.model = QualityModel(cfg.model, cfg.label)

    @classmethod
    def validate(cls, cfg: Quality) -> None:
        share("quality.min_score", cfg.min_score)

    def check(self, work: Work) -> str | None:
        score = self.model.score(work.text)
        work.note("quality", score)
        return "quality.low_score" if score < self.cfg.min_score else None
