"""Merging the --report files of sharded contam-check tasks into the single run's report.

Every item of a report carries `seen`: the runs [start, end) of its n-grams
(by position in the item) that occur in the task's training documents. The
union of the tasks' runs is what one process over all the data would have
seen, so coverage and class are recomputed from it exactly, not bounded.
A sharded task's report says which task it is (`task`: [K, N]); the merge
needs all N, orders them by K (the file order of the single run, so the first
matching documents of each item come out the same) and drops the field.
"""

from __future__ import annotations

from collections import Counter

from llmtk.contam.check import classify
from llmtk.errors import UsageError

MAX_DOCS = 5  # matching training documents named per item (as EvalIndex.record keeps)
CLASSES = ("dirty", "partial", "clean", "too_short")


def seen_runs(seen) -> list[list[int]]:
    """bool array -> [[start, end), ...] of its True runs."""
    import numpy as np

    s = np.concatenate(([False], np.asarray(seen, dtype=bool), [False]))
    edges = np.flatnonzero(s[1:] != s[:-1])
    return edges.reshape(-1, 2).tolist()


def covered_words(runs: list[list[int]], n_words: int, n: int) -> int:
    """Words inside at least one seen n-gram: n-gram i covers words i .. i + n - 1."""
    covered, end = 0, 0
    for a, b in runs:  # sorted, disjoint
        lo, hi = max(a, end), min(b - 1 + n, n_words)
        if hi > lo:
            covered += hi - lo
        end = max(end, hi)
    return covered


def summarise(items: list[dict], n: int, dirty: float, clean: float, docs: int,
              contaminated: int) -> dict:
    """The report around its items: classes and per-source counts."""
    classes: Counter = Counter()
    per_source: dict[str, Counter] = {}
    for it in items:
        classes[it["class"]] += 1
        src = per_source.setdefault(it["source"], Counter())
        src[it["class"]] += 1
        src["items"] += 1
    return {
        "n": n, "dirty_threshold": dirty, "clean_threshold": clean,
        "docs": docs, "contaminated_docs": contaminated,
        "classes": {k: classes.get(k, 0) for k in CLASSES},
        "sources": {s: dict(sorted(c.items())) for s, c in sorted(per_source.items())},
        "items": items,
    }


def item_row(item_id, source: str, n_words: int, ngrams: int, runs: list[list[int]],
             docs: list, n: int, dirty: float, clean: float) -> dict:
    seen = sum(b - a for a, b in runs)
    cov = covered_words(runs, n_words, n) / n_words if n_words and ngrams else 0.0
    return {"id": item_id, "source": source, "words": n_words, "ngrams": ngrams,
            "seen_ngrams": seen, "seen": runs, "coverage": round(cov, 4),
            "class": classify(cov, ngrams > 0, dirty, clean), "docs": docs}


def merge_reports(reports: list[dict], names: list[str]) -> dict:
    """The sharded tasks' reports as the single run's."""
    first = reports[0]
    for key in ("n", "dirty_threshold", "clean_threshold"):
        for r, name in zip(reports, names, strict=True):
            if r.get(key) != first.get(key):
                raise UsageError(f"{name}: {key} is {r.get(key)!r}, {names[0]} says "
                                 f"{first.get(key)!r}")
    tasks = [r.get("task") for r in reports]
    if any(t is not None for t in tasks):
        if any(t is None for t in tasks):
            raise UsageError("contam-check reports: some come from a sharded run, some not")
        n_tasks = tasks[0][1]
        got = sorted(t[0] for t in tasks)
        if any(t[1] != n_tasks for t in tasks) or got != list(range(n_tasks)):
            missing = sorted(set(range(n_tasks)) - set(got))
            raise UsageError(f"contam-check reports: need tasks 0..{n_tasks - 1} once each"
                             + (f"; missing {missing}" if missing else ""))
        order = sorted(range(len(reports)), key=lambda i: tasks[i][0])
        reports = [reports[i] for i in order]
    n, dirty, clean = first["n"], first["dirty_threshold"], first["clean_threshold"]
    items = []
    for j, it in enumerate(first["items"]):
        runs: list[list[int]] = []
        docs: list = []
        for r, name in zip(reports, names, strict=True):
            other = r["items"][j] if j < len(r["items"]) else None
            if other is None or other["id"] != it["id"] or len(r["items"]) != len(first["items"]):
                raise UsageError(f"{name}: its evaluation items differ from {names[0]}'s")
            if "seen" not in other:
                raise UsageError(f"{name}: no per-item 'seen' runs (written by an older llmtk)")
            runs.extend(other["seen"])
            docs.extend(d for d in other["docs"] if d not in docs)
        items.append(item_row(it["id"], it["source"], it["words"], it["ngrams"],
                              _union(runs), docs[:MAX_DOCS], n, dirty, clean))
    merged = summarise(items, n, dirty, clean, sum(r["docs"] for r in reports),
                       sum(r["contaminated_docs"] for r in reports))
    if "eval_sets" in first:  # per eval file: layout and fields as read, counts recomputed
        from llmtk.contam.evalsets import EvalSet, summary

        sets = [EvalSet(path, e["layout"], e["fields"]) for path, e in first["eval_sets"].items()]
        merged["eval_sets"] = summary(sets, merged["sources"])
    return merged


def _union(runs: list[list[int]]) -> list[list[int]]:
    out: list[list[int]] = []
    for a, b in sorted(runs):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out
