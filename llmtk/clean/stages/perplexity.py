"""Stage: perplexity under a reference model trained by `llmtk train` (CCNet's signal).

The threshold is `max_ppl`, or fitted: `quantile` reads the input once first (`fit`) and
drops the documents above that quantile of its perplexities.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial

from llmtk.clean.stages.base import Flag, ModelStage, Work
from llmtk.errors import ConfigError
from llmtk.io import Doc, ordered_map


@dataclass(frozen=True)
class Perplexity:
    model: str = ""  # an llmtk train checkpoint (run dir or step dir); empty: stage off
    max_ppl: float | None = None  # drop documents above this perplexity
    quantile: float | None = None  # or: drop those above this quantile of the input's
    max_tokens: int = 4096  # score at most this many tokens of a document


class PerplexityStage(ModelStage):
    name = "perplexity"
    config = Perplexity
    help = "score with a small llmtk train model and drop the most surprising documents"
    reasons = ("perplexity.too_high",)
    flags = (
        Flag("model", ("--ppl-model",), "The model to score perplexity with: an llmtk train "
             "run, checkpoint (full or sharded) or export, or hf:PATH."),
        Flag("max_ppl", ("--max-ppl",), "With --ppl-model: drop documents above this "
             "perplexity."),
        Flag("quantile", ("--ppl-quantile",), "With --ppl-model: drop documents above this "
             "quantile of the input's perplexities (e.g. 0.9; reads the input twice)."),
    )

    def __init__(self, cfg: Perplexity, whole) -> None:
        super().__init__(cfg, whole)
        from llmtk.clean.perplexity import PerplexityModel

        self.model = PerplexityModel(cfg.model, cfg.max_tokens)
        self.max_ppl = cfg.max_ppl  # or set by fit()
        self.normalize = whole.normalize  # the first pass scores the text as `check` sees it

    @classmethod
    def validate(cls, cfg: Perplexity) -> None:
        def fail(key: str, message: str, *also: str) -> None:
            raise ConfigError(f"perplexity.{key}", message,
                              also=tuple(f"perplexity.{k}" for k in also))

        if cfg.quantile is not None and not 0.0 < cfg.quantile < 1.0:
            fail("quantile", "expected a number between 0 and 1")
        if cfg.max_ppl is not None and cfg.quantile is not None:
            fail("max_ppl", "give this or {0}, not both", "quantile")
        if cfg.model and cfg.max_ppl is None and cfg.quantile is None:
            fail("model", "needs {0} or {1}", "max_ppl", "quantile")
        if cfg.max_ppl is not None and not cfg.model:
            fail("max_ppl", "needs {0}", "model")
        if cfg.quantile is not None and not cfg.model:
            fail("quantile", "needs {0}", "model")

    def fits(self) -> str | None:
        return "perplexity.quantile" if self.cfg.quantile is not None else None

    def fit(self, docs: Iterable[Doc], workers: int, before=None) -> str:
        """The quantile of the (normalised) documents' perplexities becomes max_ppl. (It
        normalises each text itself; `before`, the stages before it, is not used.)"""
        from llmtk.clean.perplexity import quantile

        values = list(ordered_map(partial(_scores, self.model, self.normalize), docs, workers))
        self.max_ppl = quantile(values, self.cfg.quantile)
        return f"perplexity threshold (quantile {self.cfg.quantile}): {self.max_ppl:.3f}"

    def check(self, work: Work) -> str | None:
        ppl = self.model.score(work.text)
        work.note("perplexity", round(ppl, 4) if ppl != float("inf") else None)
        if self.max_ppl is not None and ppl > self.max_ppl:
            return "perplexity.too_high"
        return None


def _scores(model, norm, chunk: list[Doc]) -> list[float]:
    return [model.score(norm(d.text) if norm.enabled else d.text) for d in chunk]
