"""Stage: language ID (fastText lid.176 + a script census, llmtk.text.langid) and --lang."""

from __future__ import annotations

from dataclasses import dataclass, field

from llmtk.clean.stages.base import Flag, Stage, Work, share, split_list
from llmtk.errors import ConfigError


@dataclass(frozen=True)
class LangId:
    enabled: bool = True
    keep: list[str] = field(default_factory=list)  # empty: keep every language
    min_score: float = 0.65  # datatrove's LanguageFilter default; applies when `keep` is set
    # Apply the built-in per-language thresholds (llmtk/clean/thresholds.toml, FineWeb-2's
    # figures) to documents identified as one of its languages.
    lang_thresholds: bool = True


class LangIdStage(Stage):
    name = "langid"
    config = LangId
    help = "name each document's language; with --lang keep only those languages"
    reasons = ("lang.unwanted", "lang.low_score")
    flags = (
        Flag("keep", ("--lang",), "Keep only these languages (ISO codes, comma-separated).",
             kind=str, value=split_list),
        Flag("min_score", ("--min-lang-score",), "With --lang: drop documents whose language "
             "score is below this."),
        Flag("enabled", ("--no-langid",), "Skip language ID (filters then pick CJK rules from "
             "the script alone).", off=True),
        Flag("lang_thresholds", ("--no-lang-thresholds",), "Use the global thresholds for every "
             "language, not the built-in per-language ones (FineWeb-2's).", off=True),
    )

    def __init__(self, cfg: LangId, whole) -> None:
        super().__init__(cfg, whole)
        from llmtk.text.langid import LanguageId

        self.model = LanguageId()
        self.keep = frozenset(cfg.keep)

    @classmethod
    def validate(cls, cfg: LangId) -> None:
        if cfg.keep and not cfg.enabled:
            raise ConfigError("langid.keep", "needs language ID, which {0} switches off",
                              also=("langid.enabled",))
        share("langid.min_score", cfg.min_score)

    @classmethod
    def on(cls, cfg: LangId, whole) -> bool:
        # --profile code never asks for a natural language: no model to load
        return cfg.enabled and whole.code.profile != "code"

    def load(self) -> None:
        self.model.load()  # before --workers forks, so the workers share it
        # A code the model never answers would drop every document as lang.unwanted.
        unknown = self.model.check_codes(sorted(self.keep))
        if unknown:
            raise ConfigError("langid.keep", f"unknown language code(s) {', '.join(unknown)}"
                              "; the language ID model's codes (ISO 639, e.g. en,de,zh) "
                              "are listed in docs/clean.md")

    def check(self, work: Work) -> str | None:
        lang, score = self.model.predict(work.text)
        work.lang = lang
        work.doc.count(f"lang.{lang}")
        work.note("lang", lang)
        work.note("lang_score", score)
        if not self.keep:
            return None
        reason = None
        if lang not in self.keep:
            reason = "lang.unwanted"
        elif score < self.cfg.min_score:
            reason = "lang.low_score"
        if reason is not None and work.notes is None and not work.dry_run:
            # the reject says what was found, with or without --annotate
            work.doc.annotate(lang=lang, lang_score=score)
        return reason
