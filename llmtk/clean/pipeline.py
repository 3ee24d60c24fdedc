"""`Cleaner`: the per-document function behind `llmtk clean`.

    cleaner = Cleaner(CleanConfig())
    reason = cleaner(doc)        # None: keep (doc may be modified); else the drop reason

The stages are `llmtk.clean.stages.PIPELINE`, in its order: URL filter -> code routing ->
main-content extraction (HTML records) -> normalise -> host lines (off unless asked) ->
language ID (+ --lang filter) -> Gopher quality -> Gopher repetition -> C4 -> FineWeb ->
classifier -> perplexity -> secrets -> PII. A `Cleaner` holds the stages that are on, runs
each document through them until one gives a reason, and writes the result back to the
record. It is picklable and its stages load their models lazily in each worker process, so
`StreamRun.apply(cleaner)` works with any --workers.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from llmtk.clean.config import CleanConfig
from llmtk.clean.stages import PIPELINE, Stage
from llmtk.clean.stages.base import Work
from llmtk.io import Doc
from llmtk.io.record import repeats_key


class Cleaner:
    def __init__(self, config: CleanConfig, annotate: bool = False, dry_run: bool = False) -> None:
        self.cfg = config
        self.annotate = annotate
        self.dry_run = dry_run
        self.stages: list[Stage] = [
            stage(getattr(config, stage.name), config) for stage in PIPELINE
            if stage.on(getattr(config, stage.name), config)]
        # language -> (enabled filters by name, stop words), built on first sight of each
        self._plans: dict[str | None, tuple[dict, list[str] | None]] = {}

    def plan(self, lang: str | None) -> tuple[dict, list[str] | None]:
        """The enabled heuristic filters, with the thresholds for `lang`, and its stop words."""
        if lang not in self._plans:
            stages, words = self.cfg.for_lang(lang)
            filters = {name: cfg for name, cfg in stages.items() if cfg.enabled}
            self._plans[lang] = (filters, words)
        return self._plans[lang]

    def load(self) -> None:
        """Load the models now (to fail early on a bad path, before reading any input)."""
        for stage in self.stages:
            stage.load()

    def fitting(self) -> list[tuple[Stage, str]]:
        """The stages that need a first pass over the input, with the key that asked."""
        return [(stage, key) for stage in self.stages if (key := stage.fits())]

    def before(self, stage: Stage) -> Callable[[Doc], Work | None]:
        """For a first pass: a picklable function that runs the stages before `stage` on a
        record (its Work, or None if one of them dropped it)."""
        return partial(self._upto, self.stages.index(stage))

    def _upto(self, end: int, doc: Doc) -> Work | None:
        work = Work(doc, None, False, self.plan)
        for stage in self.stages[:end]:
            if work.road in stage.roads and stage.check(work) is not None:
                return None
        return work

    def __call__(self, doc: Doc) -> str | None:
        notes: dict | None = {} if self.annotate else None
        reason = self._run(doc, notes)
        if self.dry_run and reason is not None:
            doc.count(f"would_drop.{reason}")
            if notes is not None:
                notes["reason"] = reason
            reason = None
        if notes:
            doc.annotate(**notes)  # on a dropped record too: --rejects then shows the values
        return reason

    def _run(self, doc: Doc, notes: dict | None) -> str | None:
        work = Work(doc, notes, self.dry_run, self.plan)
        for stage in self.stages:
            if work.road in stage.roads:
                reason = stage.check(work)
                if reason is not None:
                    return reason
        if not self.dry_run:
            self._write(work)
        return None

    @staticmethod
    def _write(work: Work) -> None:
        """The kept record gets the stages' text."""
        doc = work.doc
        if work.scrubbed and doc.raw is not None and repeats_key(doc.raw, doc.field):
            # A line with two text keys parses to the last one; the other, unscrubbed,
            # must not pass through in the original bytes: write the parsed record.
            doc.raw = None
        if work.text != work.original:
            doc.set_text(work.text)
        if work.html and "content_type" in work.data:
            work.data["content_type"] = "text/plain"  # extracted: a second clean leaves it be
