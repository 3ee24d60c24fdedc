"""`contam-check` as a whole: load eval sets, stream training docs, build the report."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from llmtk.contam.check import EvalIndex, EvalItem, build_items
from llmtk.contam.ngrams import mask_ngrams
from llmtk.contam.report import item_row, seen_runs, summarise
from llmtk.errors import ConfigError
from llmtk.io import Doc, StreamRun, ordered_map


def load_eval_items(paths: list[str], fields: list[str] | None, id_field: str, n: int,
                    sets: list | None = None) -> list[EvalItem]:
    """Every record of the eval files (see `evalsets`); the checked text joins the fields
    of the file's benchmark layout, or `fields` when given. `sets` collects one
    `EvalSet` per file (layout and fields used)."""
    from llmtk.contam.evalsets import eval_records

    if any(p == "-" for p in paths):
        raise ConfigError("eval", "evaluation sets must be files or directories, not stdin")
    return build_items(eval_records(paths, fields, id_field, [] if sets is None else sets), n)


# The index of the run in progress. Worker processes are forked from this one and
# inherit it, so it is never pickled (it can be hundreds of MB); only texts go to
# the workers and only the matched hashes come back.
_INDEX: EvalIndex | None = None


def _match_texts(texts: list[str]) -> list:
    return [_INDEX.match(text) for text in texts]  # type: ignore[union-attr]


def check_stream(run: StreamRun, index: EvalIndex, drop: bool, annotate: bool,
                 write: bool = True, mask: str | None = None) -> int:
    """Pass the training docs through; returns the number of contaminated docs.

    mask: replace the matched word runs with this token instead of dropping the
    document (a document whose words cannot be located is dropped).
    """
    global _INDEX
    _INDEX = index
    contaminated = 0
    pending: deque[Doc] = deque()

    def texts() -> Iterator[str]:
        for doc in run.docs():
            pending.append(doc)
            yield doc.text

    for matched in ordered_map(_match_texts, texts(), run.opts.workers, 64):
        doc = pending.popleft()
        if len(matched):
            contaminated += 1
            items = index.record(matched, doc.id if doc.id is not None else doc.where())
            drop_this = drop
            if mask is not None:
                masked, runs = mask_ngrams(doc.text, index.n, matched, mask)
                if runs:
                    doc.set_text(masked)
                    doc.count("contam.masked_runs", runs)
                else:
                    drop_this = True  # its words could not be located: drop, never leak
            if drop_this:
                run.drop(doc, "contam.ngram",
                         eval_ids=[index.items[i].id for i in items][:20])
                continue
            if annotate:
                doc.annotate(contaminated=True, eval_ids=[index.items[i].id for i in items][:20],
                             matched_ngrams=int(len(matched)))
        elif annotate:
            doc.annotate(contaminated=False)
        if write:
            run.write(doc)
        else:
            run.count("contam.report_only_not_written")
    return contaminated


def build_report(index: EvalIndex, dirty: float, clean: float, contaminated_docs: int,
                 docs: int, task: tuple[int, int] | None = None) -> dict:
    """The per-item report; a sharded task's (task = (K, N)) merges with the others'
    through `llmtk stats merge` into the single run's (llmtk.contam.report)."""
    n = index.n
    items = [item_row(it.id, it.source, it.n_words, int(len(it.ngrams)), seen_runs(it.seen),
                      list(it.docs), n, dirty, clean) for it in index.items]
    report = summarise(items, n, dirty, clean, docs, contaminated_docs)
    if task is not None:
        report["task"] = list(task)
    return report
