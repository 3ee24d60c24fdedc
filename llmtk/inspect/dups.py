"""Duplicate shares with `dedup`'s own keys and decisions, in bounded memory.

Exact duplicates: the share `llmtk dedup` drops as `dedup.exact` is 1 - D/N, where D is the
number of distinct normalised-text keys (the very `text_key` of dedup's normaliser). D comes
from a `Distinct` sketch: exact up to 2^20 distinct texts, then within about 0.1% (one
standard error).

Near duplicates: the share `llmtk dedup` drops in all (`dedup.exact` + `dedup.minhash`).
Every document's dedup signature (exact key, LSH band keys, verification bytes) is kept
while the sample holds at most `SAMPLE_DOCS` documents; the share is then computed by
dedup's own `DedupIndex` over the sample in input order, so it is exactly the share that
`llmtk dedup` drops. Past that bound the sample keeps the documents whose first MinHash
value hashes below a threshold, halved each time the sample outgrows the bound. Exact
duplicates share that value, so they are sampled together; two near-duplicates with
Jaccard similarity J share it with probability J, so a sampled document's near-duplicate
is in the sample with probability at least J. The sampled share is then an estimate,
biased low on the near-only part by at most (1 - J) for pairs at similarity J (about 0.1
at dedup's typical matches, J >= 0.9), with a standard error of sqrt(q (1 - q) / m) for a
share q over m sampled documents. The threshold only ever halves and the sample is a pure
function of the documents, so merged shards keep exactly the sample of one pass.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llmtk.dedup.config import DedupConfig
from llmtk.inspect.sketch import pack, unpack

if TYPE_CHECKING:
    import numpy as np

    from llmtk.dedup.minhash import Batch

SAMPLE_DOCS = 1 << 16  # ~260 bytes each: 17 MiB of signatures; dedup's index over them ~70 MiB
_SALT = 0x2545F4914F6CDD1D
TOP_CLUSTERS = 10


def sample_hash(first: np.ndarray) -> np.ndarray:
    """(D,) uint64 first MinHash values -> uniform 64-bit hashes (a minimum is not uniform)."""
    import numpy as np

    from llmtk.dedup.minhash import fmix64

    return fmix64(first ^ np.uint64(_SALT))


class NearSample:
    """The dedup signatures of a bounded, similarity-coordinated sample of documents."""

    def __init__(self, config: DedupConfig, limit: int = SAMPLE_DOCS) -> None:
        import numpy as np

        self.config = config
        self.limit = limit
        self.shift = 0  # sampled: hash >> (64 - shift) == 0, i.e. hash < 2^(64 - shift)
        p, b = config.permutations, config.bands
        self.identity = np.zeros(0, np.uint64)
        self.hash = np.zeros(0, np.uint64)
        self.exact = np.zeros(0, np.uint64)
        self.bands = np.zeros((0, b), np.uint64)
        self.low = np.zeros((0, p if config.verify else 0), np.uint8)
        self.shingles = np.zeros(0, np.int64)
        self.ids: list[Any] = []
        self._parts: list[tuple] = []
        self._n = 0

    @property
    def rate(self) -> float:
        return 2.0 ** -self.shift

    def _keep(self, h: np.ndarray) -> np.ndarray:
        import numpy as np

        if self.shift == 0:
            return np.ones(len(h), dtype=bool)
        return (h >> np.uint64(64 - self.shift)) == 0

    def add(self, batch: Batch, identity: np.ndarray, ids: list[Any]) -> None:
        import numpy as np

        h = sample_hash(batch.first)
        keep = self._keep(h)
        if not keep.any():
            return
        idx = np.flatnonzero(keep)
        low = batch.low[idx] if batch.low is not None else np.zeros((len(idx), 0), np.uint8)
        self._parts.append((identity[idx], h[idx], batch.exact[idx], batch.bands[idx], low,
                            batch.shingles[idx], [ids[i] for i in idx.tolist()]))
        self._n += len(idx)
        if len(self.identity) + self._n > self.limit:
            self._flush()
            while len(self.identity) > self.limit:
                self.shift += 1
                self._select(self._keep(self.hash))

    def _flush(self) -> None:
        import numpy as np

        if not self._parts:
            return
        cols = list(zip(*self._parts, strict=True))
        self.identity = np.concatenate([self.identity, *cols[0]])
        self.hash = np.concatenate([self.hash, *cols[1]])
        self.exact = np.concatenate([self.exact, *cols[2]])
        self.bands = np.concatenate([self.bands, *cols[3]])
        self.low = np.concatenate([self.low, *cols[4]])
        self.shingles = np.concatenate([self.shingles, *cols[5]])
        for part in cols[6]:
            self.ids.extend(part)
        self._parts, self._n = [], 0

    def _select(self, mask: np.ndarray) -> None:
        import numpy as np

        self.identity, self.hash, self.exact = (self.identity[mask], self.hash[mask],
                                                self.exact[mask])
        self.bands, self.low, self.shingles = self.bands[mask], self.low[mask], self.shingles[mask]
        self.ids = [self.ids[i] for i in np.flatnonzero(mask).tolist()]

    def merge(self, other: NearSample) -> None:
        import numpy as np

        self._flush()
        other._flush()
        self.shift = max(self.shift, other.shift)
        self.identity = np.concatenate([self.identity, other.identity])
        self.hash = np.concatenate([self.hash, other.hash])
        self.exact = np.concatenate([self.exact, other.exact])
        self.bands = np.concatenate([self.bands, other.bands])
        self.low = np.concatenate([self.low, other.low])
        self.shingles = np.concatenate([self.shingles, other.shingles])
        self.ids = self.ids + other.ids
        self._select(self._keep(self.hash))
        while len(self.identity) > self.limit:
            self.shift += 1
            self._select(self._keep(self.hash))

    # -- the answer ----------------------------------------------------------

    def decide(self) -> dict:
        """dedup's decisions over the sample, in input order: shares and largest clusters."""
        import numpy as np

        from llmtk.dedup.index import DedupIndex
        from llmtk.dedup.minhash import Batch

        self._flush()
        m = len(self.identity)
        if m == 0:
            return {"sampled": 0, "rate": self.rate, "removed": 0, "exact_removed": 0,
                    "near_only_weighted": 0.0, "clusters": []}
        order = np.argsort(self.identity, kind="stable")
        index = DedupIndex(self.config)
        roots, exact = [], []
        step = 4096
        for s in range(0, m, step):
            rows = order[s : s + step]
            low = self.low[rows] if self.config.verify else None
            dec = index.add(Batch(self.exact[rows], self.bands[rows], self.shingles[rows], low),
                            np.arange(s, s + len(rows), dtype=np.int64))
            roots.append(dec.roots)
            exact.append(dec.exact)
        root = np.concatenate(roots)  # (m,) by position in identity order
        is_dup = root != np.arange(m)
        is_exact = np.concatenate(exact) & is_dup
        near_only = np.flatnonzero(is_dup & ~is_exact)
        weights = self._weights(order[near_only], order[root[near_only]])
        return {"sampled": m, "rate": self.rate, "removed": int(is_dup.sum()),
                "exact_removed": int(is_exact.sum()),
                "near_only_weighted": float(weights.sum()),
                "clusters": self._largest(root, order)}

    def _weights(self, rows, root_rows) -> np.ndarray:
        """Horvitz-Thompson weights of the sample's near-only duplicates: a document and its
        cluster's first member, at Jaccard J, are sampled together with probability
        J + (1 - J) * rate (they share the sampled MinHash value with probability J, else
        each is sampled alone). J is estimated from the signatures' --verify bytes (equal
        with probability J + (1 - J) / 256). Every weight is 1 when nothing was left out."""
        import numpy as np

        if self.rate == 1.0 or not len(rows) or self.low.shape[1] == 0:
            return np.ones(len(rows))
        equal = (self.low[rows] == self.low[root_rows]).mean(axis=1)
        j = np.clip((equal - 1 / 256) / (1 - 1 / 256), 0.0, 1.0)
        return 1.0 / (j + (1.0 - j) * self.rate)

    def _largest(self, root: np.ndarray, order: np.ndarray) -> list[dict]:
        """The largest clusters of the sample: size (scaled to the corpus when sampled) and
        the document dedup would keep."""
        import numpy as np

        sizes = np.bincount(root, minlength=len(root))
        heads = np.flatnonzero(sizes > 1)
        heads = heads[np.lexsort((heads, -sizes[heads]))][:TOP_CLUSTERS]
        return [{"documents": int(round(int(sizes[h]) / self.rate)),
                 "sampled": int(sizes[h]),
                 "identity": int(self.identity[order[h]]),
                 "id": self.ids[int(order[h])]} for h in heads.tolist()]

    # -- part files ----------------------------------------------------------

    def to_dict(self) -> dict:
        self._flush()
        return {"limit": self.limit, "shift": self.shift, "identity": pack(self.identity),
                "hash": pack(self.hash), "exact": pack(self.exact), "bands": pack(self.bands),
                "low": pack(self.low), "shingles": pack(self.shingles), "ids": self.ids}

    @classmethod
    def from_dict(cls, d: dict, config: DedupConfig) -> NearSample:
        s = cls(config, int(d["limit"]))
        s.shift = int(d["shift"])
        s.identity = unpack(d["identity"], "uint64")
        s.hash = unpack(d["hash"], "uint64")
        s.exact = unpack(d["exact"], "uint64")
        s.bands = unpack(d["bands"], "uint64", (-1, config.bands))
        s.low = unpack(d["low"], "uint8", (len(s.identity),
                                           config.permutations if config.verify else 0))
        s.shingles = unpack(d["shingles"], "int64")
        s.ids = list(d["ids"])
        return s
