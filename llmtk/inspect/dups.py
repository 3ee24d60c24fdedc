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
KNOWN_TEXTS = 1 << 14  # signatures kept for reuse: ~200 bytes each + the key dict, ~5 MiB


class Signer:
    """dedup's signature pass (`MinHasher.batch`: the same exact keys, band keys, shingle
    counts, --verify bytes and first values), computed once per distinct normalised text.

    Documents with the same exact key have the same normalised text. Without a CJK
    character (the normaliser counts them) their unit is words whatever the raw text, so
    they have the same shingles and signature: an exact duplicate of a recent such text
    (one of the last `limit` distinct ones) copies that text's signature instead of
    shingling and hashing it again. A text with CJK characters is always signed: its
    unit (word or character) depends on its raw length, which normalisation changes
    ("・・abc" and "abc" share a key, not a signature). The normaliser and the exact key
    run for every document."""

    def __init__(self, config: DedupConfig, limit: int = KNOWN_TEXTS) -> None:
        from llmtk.dedup.stream import hasher_for

        self.hasher = hasher_for(config)
        self.verify = bool(config.verify)
        self.limit = limit
        self.slot_of: dict[int, int] = {}  # exact key -> its slot in the arrays below
        self.keys: list[int] = []  # slot -> exact key, to evict the oldest (round robin)
        self.next = 0  # the next slot to fill
        p = config.permutations if self.verify else 0
        self.known = _rows(0, config.bands, p)  # bands, shingles, low, first per slot

    def batch(self, texts: list[str]) -> Batch:
        import numpy as np

        from llmtk.dedup.normalise import text_key

        normalised, cjk = self.hasher.normalise.batch(texts)
        exact = np.fromiter(map(text_key, normalised), np.uint64, len(texts))
        src, sign, reusable = self._plan(exact.tolist(), cjk.tolist())
        sign = np.array(sign, np.int64)
        fresh = self._sign(texts, normalised, cjk, exact, sign)
        if len(sign) == len(texts):  # every text signed, in order: the batch as dedup's
            self._remember(fresh, reusable)
            return fresh
        src = np.array(src, np.int64)
        out = _rows(len(texts), fresh.bands.shape[1], fresh.low.shape[1] if self.verify else 0)
        new = np.flatnonzero(src < 0)
        _copy(out, new, fresh, -1 - src[new])
        old = np.flatnonzero(src >= 0)
        _copy(out, old, self.known, src[old])
        self._remember(fresh, reusable)  # after the copies: it may evict the slots just read
        out.exact = exact
        if not self.verify:
            out.low = None
        return out

    def _plan(self, keys: list[int], cjk: list[int]) -> tuple[list[int], list[int], list[bool]]:
        """Where each document's signature comes from: a known slot (>= 0) or row r of the
        texts to sign (-1 - r); the documents to sign; whether each of those is reusable."""
        get = self.slot_of.get
        new: dict[int, int] = {}  # exact key -> its row among the texts to sign
        src, sign, reusable = [], [], []
        for i, (key, c) in enumerate(zip(keys, cjk, strict=True)):
            if c == 0:
                slot = get(key)
                if slot is not None:
                    src.append(slot)
                    continue
                row = new.get(key)
                if row is None:
                    row = new[key] = len(sign)
                    sign.append(i)
                    reusable.append(True)
            else:
                row = len(sign)
                sign.append(i)
                reusable.append(False)
            src.append(-1 - row)
        return src, sign, reusable

    def _sign(self, texts, normalised, cjk, exact, rows) -> Batch:
        """MinHasher.batch's signature part for texts[rows], from their normalised forms."""
        import numpy as np

        from llmtk.dedup.minhash import Batch

        h = self.hasher
        pick = rows.tolist()
        x, counts = h.batch_shingles([texts[i] for i in pick], [normalised[i] for i in pick],
                                     cjk[rows])
        sig = h.signatures_flat(x, counts)  # (D, P)
        bands = h.band_keys(sig)
        bands[counts == 0] = 0  # no shingles, no band keys
        low = (sig & np.uint64(0xFF)).astype(np.uint8) if self.verify else None
        return Batch(exact[rows], bands, counts, low, sig[:, 0].copy())

    def _remember(self, fresh: Batch, reusable: list[bool]) -> None:
        """Keep the reusable new texts' signatures in the next slots, evicting the oldest."""
        import numpy as np

        rows = np.flatnonzero(np.array(reusable, bool))[-self.limit :]
        keys = fresh.exact[rows].tolist()
        slots = (self.next + np.arange(len(keys))) % self.limit
        self.next = (self.next + len(keys)) % self.limit
        if len(keys) and int(slots.max()) >= len(self.known):
            self._grow(int(slots.max()) + 1)
        for slot, key in zip(slots.tolist(), keys, strict=True):
            if slot < len(self.keys):
                del self.slot_of[self.keys[slot]]
                self.keys[slot] = key
            else:
                self.keys.append(key)
            self.slot_of[key] = slot
        _copy(self.known, slots, fresh, rows)

    def _grow(self, need: int) -> None:
        size = min(self.limit, max(need, 2 * len(self.known)))
        bigger = _rows(size, self.known.bands.shape[1], self.known.low.shape[1])
        _copy(bigger, slice(0, len(self.known)), self.known, slice(None))
        self.known = bigger


def _rows(n: int, bands: int, low: int) -> Batch:
    """An empty Batch of n rows to fill (exact keys all 0)."""
    import numpy as np

    from llmtk.dedup.minhash import Batch

    return Batch(np.zeros(n, np.uint64), np.zeros((n, bands), np.uint64),
                 np.zeros(n, np.int64), np.zeros((n, low), np.uint8), np.zeros(n, np.uint64))


def _copy(dst: Batch, at, src: Batch, rows) -> None:
    """dst's rows `at` = src's rows `rows` (all but the exact keys)."""
    dst.bands[at] = src.bands[rows]
    dst.shingles[at] = src.shingles[rows]
    dst.first[at] = src.first[rows]
    if src.low is not None and dst.low is not None:
        dst.low[at] = src.low[rows]


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
