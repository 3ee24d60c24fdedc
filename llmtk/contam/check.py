"""Finding evaluation items inside training documents.

Two views, both from exact n-gram matches:

- per training document (GPT-3's rule): a document that shares at least one
  n-gram (default 13 words) with any evaluation item is contaminated; it can be
  dropped (`contam.ngram`) or annotated with the ids of the items it matches;
- per evaluation item (Llama 2's token-overlap classes): the share of the
  item's words covered by n-grams that occur in the training data. An item is
  `dirty` at >= 80% coverage, `clean` under 20%, otherwise `partial`. PaLM's
  rule (70% of an item's 8-grams seen) is available as `--n 8 --dirty 0.7`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from llmtk.contam.ngrams import ngram_hashes, word_hashes

DIRTY = 0.8  # Llama 2: "dirty" above 80% token overlap
CLEAN = 0.2  # Llama 2: "clean" below 20%


@dataclass
class EvalItem:
    id: str
    source: str  # file the item came from
    n_words: int
    ngrams: object  # uint64 array of this item's n-gram hashes, in word order
    seen: object = None  # bool array: which of the n-grams occur in training data
    docs: list = field(default_factory=list)  # ids of (up to a few) training docs matching


class EvalIndex:
    """All n-grams of all evaluation items, for fast membership tests."""

    def __init__(self, items: list[EvalItem], n: int):
        import numpy as np

        self.items = items
        self.n = n
        if items:
            all_hashes = np.concatenate([it.ngrams for it in items])
            owners = np.concatenate([np.full(len(it.ngrams), i, dtype=np.int64)
                                     for i, it in enumerate(items)])
        else:
            all_hashes = np.empty(0, dtype=np.uint64)
            owners = np.empty(0, dtype=np.int64)
        order = np.argsort(all_hashes, kind="stable")
        self.hashes = all_hashes[order]  # sorted, for searchsorted
        self.owners = owners[order]
        for it in items:
            it.seen = np.zeros(len(it.ngrams), dtype=bool)

    def match(self, text: str):
        """The distinct n-gram hashes of `text` that occur in some evaluation item."""
        import numpy as np

        grams = ngram_hashes(word_hashes(text), self.n)
        if not len(grams) or not len(self.hashes):
            return np.empty(0, dtype=np.uint64)
        pos = np.searchsorted(self.hashes, grams)
        pos[pos == len(self.hashes)] = 0
        return np.unique(grams[self.hashes[pos] == grams])

    def items_of(self, matched) -> list[int]:
        """Indices of the evaluation items that own any of these n-gram hashes."""
        import numpy as np

        lo = np.searchsorted(self.hashes, matched, side="left")
        hi = np.searchsorted(self.hashes, matched, side="right")
        owners = set()
        for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
            owners.update(self.owners[a:b].tolist())
        return sorted(owners)

    def record(self, matched, doc_id, max_docs: int = 5) -> list[int]:
        """Mark the matched n-grams as seen in training; return the items involved."""
        import numpy as np

        hit_items = self.items_of(matched)
        for i in hit_items:
            item = self.items[i]
            item.seen |= np.isin(item.ngrams, matched)
            if len(item.docs) < max_docs and doc_id not in item.docs:
                item.docs.append(doc_id)
        return hit_items


def build_items(records: Iterable[tuple[str, str, str]], n: int) -> list[EvalItem]:
    """EvalItems from (id, source, text); items shorter than n words cannot be checked."""
    items = []
    for item_id, source, text in records:
        hashes = word_hashes(text)
        items.append(EvalItem(item_id, source, len(hashes), ngram_hashes(hashes, n)))
    return items


def coverage(item: EvalItem, n: int) -> float:
    """Share of the item's words inside at least one n-gram seen in training."""
    if item.n_words == 0 or not len(item.ngrams):
        return 0.0
    covered = [False] * item.n_words
    for i, seen in enumerate(item.seen.tolist()):
        if seen:
            for k in range(i, i + n):
                covered[k] = True
    return sum(covered) / item.n_words


def classify(cov: float, checkable: bool, dirty: float = DIRTY, clean: float = CLEAN) -> str:
    if not checkable:
        return "too_short"
    if cov >= dirty:
        return "dirty"
    if cov < clean:
        return "clean"
    return "partial"
