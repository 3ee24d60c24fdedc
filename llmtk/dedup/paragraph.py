"""--level paragraph: remove lines repeated across the corpus, keep the rest of each document.

A paragraph here is a line (text split on "\\n"), because web boilerplate
(navigation, cookie notices, footers) comes as lines. Each non-blank line's key
is the xxh3-64 of its normalised text; the first `max_repeats` occurrences in
stream order are kept and later ones removed, so the decision is streaming and
deterministic. Blank lines are never counted or removed. A document left with
no non-blank line is dropped as `dedup.paragraph`.

Occurrence counts live in a numpy HashTable (16-32 bytes per distinct line).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmtk.dedup.normalise import Normaliser, text_key
from llmtk.dedup.table import HashTable
from llmtk.io import StreamRun, ordered_map

if TYPE_CHECKING:
    import numpy as np

PARAGRAPH = "dedup.paragraph"
BATCH = 512


class LineKeys:
    """Picklable `fn(texts) -> [keys per text]`; a key is 0 for a blank line."""

    def __init__(self, steps: tuple[str, ...]) -> None:
        self.steps = steps

    def __call__(self, texts: list[str]) -> list[np.ndarray]:
        import numpy as np

        norm = Normaliser(self.steps)
        out = []
        for text in texts:
            lines = text.split("\n")
            out.append(np.fromiter(
                ((text_key(n) if (n := norm(line).strip()) else 0) for line in lines),
                dtype=np.uint64, count=len(lines),
            ))
        return out


def occurrences(table: HashTable, keys: np.ndarray) -> np.ndarray:
    """(N,) 1-based occurrence number of each key counting earlier batches, and count them."""
    import numpy as np

    slots = table.find(keys)
    prior = np.where(slots >= 0, table.values[slots], 0)
    order = np.argsort(keys, kind="stable")  # equal keys keep stream order
    sk = keys[order]
    starts = np.r_[True, sk[1:] != sk[:-1]] if len(sk) else np.zeros(0, dtype=bool)
    start_pos = np.flatnonzero(starts)
    group = np.cumsum(starts) - 1
    rank = np.empty(len(keys), dtype=np.int64)
    rank[order] = np.arange(len(sk)) - start_pos[group]
    # Add this batch's counts to the table.
    uniq, counts = sk[starts], np.diff(np.r_[start_pos, len(sk)])
    uslots = slots[order][starts]
    known = uslots >= 0
    table.values[uslots[known]] += counts[known]
    table.insert_new(uniq[~known], counts[~known])
    return prior + rank + 1


def dedup_paragraphs(
    run: StreamRun, steps: tuple[str, ...], max_repeats: int, annotate: bool, workers: int
) -> None:
    from collections import deque

    import numpy as np

    table = HashTable()
    pending = deque()

    def texts():
        for doc in run.docs():
            pending.append(doc)
            yield doc.text

    for per_doc in _batches(ordered_map(LineKeys(steps), texts(), workers, BATCH), BATCH):
        docs = [pending.popleft() for _ in range(len(per_doc))]
        flat = np.concatenate(per_doc) if per_doc else np.zeros(0, dtype=np.uint64)
        occ = np.zeros(len(flat), dtype=np.int64)
        real = flat != 0
        occ[real] = occurrences(table, flat[real])
        start = 0
        for doc, keys in zip(docs, per_doc, strict=True):
            o = occ[start : start + len(keys)]
            start += len(keys)
            repeated = o > max_repeats  # (lines,)
            n_rep = int(repeated.sum())
            if not n_rep:
                run.write(doc)
                continue
            doc.count("dedup.paragraphs_removed", n_rep)
            if annotate:
                doc.annotate(repeated_paragraphs=n_rep)
                run.write(doc)
                continue
            lines = doc.text.split("\n")
            kept = [line for line, rep in zip(lines, repeated.tolist(), strict=True) if not rep]
            if not any(line.strip() for line in kept):
                run.drop(doc, PARAGRAPH)
                continue
            doc.set_text("\n".join(kept))
            run.write(doc)


def _batches(items, size):
    """Regroup ordered_map's flat per-document results into lists of `size`."""
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
