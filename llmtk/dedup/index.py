"""The streaming dedup index: query-then-insert over exact keys and LSH band keys.

Every document has a number: its 0-based position in the input (bad lines
count too, so every stage numbers documents alike), after a loaded index's
documents. For each document:

- exact parent: the first earlier document with the same normalised-text key;
- band parent: the earliest earlier document that shares any LSH band key;
- parent = the exact parent if there is one, else the band parent;
- root = root(parent), or the document itself when it has no parent.

A document with a parent is a duplicate of its root, the first document of its
cluster, which was written out. All documents' keys go into the tables (when
absent), so a chain of near-duplicates ends up in one cluster, as datatrove's
union-find would make it, except that two clusters already written out are
never merged afterwards: the later document joins the one whose member came
first. This definition depends only on the order of documents, so the
scale-out stages (llmtk.dedup.stages) compute the very same parents band by
band.

State per document: 8 bytes of root, ~32-64 bytes per distinct key in the
tables (1 exact + `bands` band keys), and the id of each kept document.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import orjson

from llmtk.dedup.config import DedupConfig
from llmtk.dedup.table import HashTable, first_occurrence
from llmtk.errors import UsageError
from llmtk.io.atomic import atomic_file

if TYPE_CHECKING:
    import numpy as np

    from llmtk.dedup.minhash import Batch

EXACT, MINHASH = "dedup.exact", "dedup.minhash"


class Decisions:
    """The outcome for one batch: parallel arrays over its documents."""

    __slots__ = ("numbers", "roots", "exact")

    def __init__(self, numbers: np.ndarray, roots: np.ndarray, exact: np.ndarray) -> None:
        self.numbers = numbers  # (D,) int64 document numbers
        self.roots = roots  # (D,) int64, == numbers for documents that are kept
        self.exact = exact  # (D,) bool: duplicate by exact key (else by MinHash)


def resolve_roots(parents: np.ndarray, numbers: np.ndarray, known_roots) -> np.ndarray:
    """Roots for a batch of documents.

    parents (D,) int64 (-1: none); numbers (D,) strictly increasing;
    known_roots(array) gives the roots of documents before numbers[0].
    """
    import numpy as np

    g0 = int(numbers[0]) if len(numbers) else 0
    r = np.where(parents < 0, numbers, parents)
    old = r < g0
    if old.any():
        r[old] = known_roots(r[old])
    # Pointer jumping inside the batch: a parent is always earlier, roots point at themselves.
    while True:
        inside = r >= g0
        nxt = r.copy()
        nxt[inside] = r[np.searchsorted(numbers, r[inside])]
        if np.array_equal(nxt, r):
            return r
        r = nxt


class DedupIndex:
    def __init__(self, config: DedupConfig) -> None:
        import numpy as np

        self.config = config
        self.exact = HashTable()
        self.bands = HashTable()
        self.count = 0  # one past the highest document number so far (a loaded index's too)
        self.offset = 0  # numbers of this run's documents start here (after a loaded index)
        self._roots = np.zeros(1 << 12, dtype=np.int64)
        self.ids: dict[int, Any] = {}  # document number -> id, for kept documents with one
        # --verify: the low byte of every signature value, by document number (P bytes each).
        self.low = np.zeros((1 << 12 if config.verify else 0, config.permutations), np.uint8)

    # -- the streaming step --------------------------------------------------

    def add(self, batch: Batch, positions: np.ndarray, ids: list[Any] | None = None) -> Decisions:
        """Query-then-insert a batch of documents that follow all earlier ones.

        positions: (D,) increasing 0-based input positions of the documents.
        """
        import numpy as np

        d, nb = len(batch), self.config.bands
        numbers = positions.astype(np.int64) + self.offset
        exact_first = first_occurrence(self.exact, batch.exact, numbers)  # (D,)
        exact_parent = np.where(exact_first < numbers, exact_first, -1)
        band_first = first_occurrence(
            self.bands, batch.bands.reshape(-1), np.repeat(numbers, nb)
        ).reshape(d, nb)  # (D, B)
        if self.config.verify:
            self.low = _put_rows(self.low, numbers, batch.low)
            band_first = verified(band_first, numbers, lambda n: self.low[n],
                                  self.config.verify_matches)
        band_parent = band_parent_of(band_first, numbers)
        roots = self._record(numbers, np.where(exact_parent >= 0, exact_parent, band_parent))
        if ids is not None:
            for i in np.flatnonzero(roots == numbers):
                if ids[i] is not None:
                    self.ids[int(numbers[i])] = ids[i]
        return Decisions(numbers, roots, exact_parent >= 0)

    def _record(self, numbers: np.ndarray, parents: np.ndarray) -> np.ndarray:
        import numpy as np

        if not len(numbers):
            return parents
        roots = resolve_roots(parents, numbers, lambda r: self._roots[r])
        end = int(numbers[-1]) + 1
        if end > len(self._roots):
            grown = np.zeros(max(end, 2 * len(self._roots)), dtype=np.int64)
            grown[: self.count] = self._roots[: self.count]
            self._roots = grown
        self._roots[numbers] = roots
        self.count = end
        return roots

    def ref(self, number: int) -> Any:
        """What `dup_of` says for a kept document: its id, or its number when it has none."""
        return self.ids.get(number, number)

    @property
    def nbytes(self) -> int:
        return self.exact.nbytes + self.bands.nbytes + 8 * self.count

    # -- persistence ---------------------------------------------------------

    def save(self, directory: str) -> None:
        import numpy as np

        os.makedirs(directory, exist_ok=True)
        ek, ev = self.exact.items()
        bk, bv = self.bands.items()
        with atomic_file(os.path.join(directory, "index.npz")) as f:
            np.savez(f, exact_keys=ek, exact_values=ev, band_keys=bk, band_values=bv,
                     roots=self._roots[: self.count], low=self.low[: self.count])
        ids = orjson.dumps([[k, v] for k, v in sorted(self.ids.items())])
        _write(os.path.join(directory, "ids.json"), ids)
        meta = {"kind": "llmtk.dedup.index", "version": 1, "documents": self.count,
                "config": self.config.to_dict()}
        _write(os.path.join(directory, "meta.json"),
               orjson.dumps(meta, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2))

    @classmethod
    def load(cls, directory: str, config: DedupConfig) -> DedupIndex:
        import numpy as np

        meta = read_meta(directory, "llmtk.dedup.index", "--index")
        saved = DedupConfig.from_dict(meta["config"])
        check_same_config(saved, config, directory)
        with np.load(os.path.join(directory, "index.npz")) as z:
            index = cls(config)
            index.exact = HashTable.from_items(z["exact_keys"], z["exact_values"])
            index.bands = HashTable.from_items(z["band_keys"], z["band_values"])
            roots = z["roots"]
            if config.verify:
                index.low = _put_rows(index.low, np.arange(len(roots)), z["low"])
        index._roots = np.zeros(max(len(roots), 1 << 12), dtype=np.int64)
        index._roots[: len(roots)] = roots
        index.count = index.offset = len(roots)
        with open(os.path.join(directory, "ids.json"), "rb") as f:
            index.ids = {int(k): v for k, v in orjson.loads(f.read())}
        return index


def _put_rows(store: np.ndarray, numbers: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """store[numbers] = rows, growing store (doubling) as needed; returns the store."""
    import numpy as np

    end = int(numbers[-1]) + 1 if len(numbers) else 0
    if end > len(store):
        grown = np.zeros((max(end, 2 * len(store)), store.shape[1]), dtype=store.dtype)
        grown[: len(store)] = store
        store = grown
    store[numbers] = rows
    return store


def verified(owners: np.ndarray, numbers: np.ndarray, low_of, need: int) -> np.ndarray:
    """--verify: the band owners (D, B) of documents `numbers` (D,), with -1 for each
    earlier owner whose signature agrees on fewer than `need` of its P low bytes.

    low_of(numbers) -> (n, P) uint8 low bytes of those documents' signatures.
    """
    import numpy as np

    owners = owners.copy()
    d_idx, b_idx = np.nonzero((owners >= 0) & (owners < numbers[:, None]))
    if len(d_idx):
        equal = (low_of(numbers[d_idx]) == low_of(owners[d_idx, b_idx])).sum(axis=1)
        fail = equal < need
        owners[d_idx[fail], b_idx[fail]] = -1
    return owners


def band_parent_of(band_first: np.ndarray, numbers: np.ndarray) -> np.ndarray:
    """(D, B) first owners of each band key, (D,) numbers -> (D,) earliest earlier owner or -1."""
    import numpy as np

    big = np.iinfo(np.int64).max
    earlier = np.where((band_first >= 0) & (band_first < numbers[:, None]), band_first, big)
    parent = earlier.min(axis=1) if earlier.shape[1] else np.full(len(numbers), big)
    return np.where(parent == big, -1, parent)


def read_meta(directory: str, kind: str, option: str) -> dict:
    path = os.path.join(directory, "meta.json")
    try:
        with open(path, "rb") as f:
            meta = orjson.loads(f.read())
    except FileNotFoundError:
        raise UsageError(f"{option}: {directory} is not a dedup folder (no meta.json)") from None
    except orjson.JSONDecodeError as e:
        raise UsageError(f"{option}: {path}: unreadable ({e})") from None
    if meta.get("kind") != kind:
        raise UsageError(f"{option}: {directory} holds {meta.get('kind')!r}, expected {kind!r}")
    return meta


def check_same_config(saved: DedupConfig, config: DedupConfig, directory: str) -> None:
    if saved != config:
        diff = ", ".join(
            f"{k}={v!r} (now {config.to_dict()[k]!r})"
            for k, v in saved.to_dict().items() if config.to_dict()[k] != v
        )
        raise UsageError(f"{directory} was built with other dedup settings: {diff}")


def _write(path: str, data: bytes) -> None:
    with atomic_file(path) as f:
        f.write(data)
