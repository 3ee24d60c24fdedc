"""Stage: lines repeated at the top or bottom of a host's pages (llmtk.clean.hostlines).

Off unless `--host-lines SHARE` is given. It needs the whole task's pages before it can
judge one, so `fit` reads the input once first, running the stages before this one on each
record (extraction, normalisation) and counting its lines per host; `check` then removes
the common ones from each page.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial

from llmtk.clean.hostlines import HostCounts, HostLines, host, line_keys, strip
from llmtk.clean.stages.base import WEB, Flag, Stage, Work
from llmtk.errors import ConfigError
from llmtk.io import Doc, ordered_map


class HostLinesStage(Stage):
    name = "host_lines"
    config = HostLines
    help = ("remove the lines repeated at the top or bottom of a host's pages "
            "(a first pass over the task's input counts them)")
    reasons = ("host_lines.empty",)
    flags = (
        Flag("share", ("--host-lines",), "Remove the lines found at the top or bottom of at "
             "least this share of a host's pages in the input (e.g. 0.3; on 3 pages or more; "
             "reads the input twice).", show_default=False),
    )

    def __init__(self, cfg: HostLines, whole) -> None:
        super().__init__(cfg, whole)
        self.common: frozenset[int] | None = None  # set by fit()

    @classmethod
    def validate(cls, cfg: HostLines) -> None:
        if cfg.share is not None and not 0.0 < cfg.share <= 1.0:
            raise ConfigError("host_lines.share", "expected a number above 0, at most 1")
        if cfg.min_pages < 2:
            raise ConfigError("host_lines.min_pages", "expected 2 or more (a line on one "
                              "page repeats nothing)")

    @classmethod
    def on(cls, cfg: HostLines, whole) -> bool:
        return cfg.share is not None

    def fits(self) -> str | None:
        return "host_lines.share"

    def fit(self, docs: Iterable[Doc], workers: int,
            before: Callable[[Doc], Work | None]) -> str:
        """Count each host's lines over the input, as `check` will see the pages."""
        counts = HostCounts()
        for found in ordered_map(partial(_page_keys, before, self.cfg.field), docs, workers):
            if found is not None:
                counts.add(*found)
        self.common = counts.common(self.cfg.share, self.cfg.min_pages)
        hosts = sum(n >= self.cfg.min_pages for n in counts.pages.values())
        return (f"host lines (share {self.cfg.share}): {len(self.common):,} lines common on "
                f"{hosts:,} of {len(counts.pages):,} hosts "
                f"({sum(counts.pages.values()):,} pages, {counts.nbytes() / 1e6:.1f} MB counted)")

    def check(self, work: Work) -> str | None:
        if self.common is None:
            raise RuntimeError("host_lines: fit() must read the input first")
        name = host(work.data.get(self.cfg.field))
        if name is None:
            return None
        text, top, bottom = strip(name, work.text, self.common)
        if top or bottom:
            work.text = text
            if top:
                work.doc.count("host_lines.top", top)
            if bottom:
                work.doc.count("host_lines.bottom", bottom)
            if not text.strip():
                return "host_lines.empty"
        return None


def _page_keys(before: Callable[[Doc], Work | None], field: str,
               chunk: list[Doc]) -> list[tuple[str, list[int]] | None]:
    """(host, its line keys) per page, or None for a record the stage leaves alone."""
    out: list[tuple[str, list[int]] | None] = []
    for doc in chunk:
        work = before(doc)
        name = host(work.data.get(field)) if work is not None and work.road == WEB else None
        out.append(None if name is None else (name, line_keys(name, work.text)))
    return out
