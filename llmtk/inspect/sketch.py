"""Mergeable summaries: each one merges across shards into exactly what one pass holds.

- `Distinct`: the k smallest distinct 64-bit hashes (a KMV sketch). Exact while a corpus has
  at most k distinct values; past that, an estimate with relative standard error about
  1/sqrt(k - 2) (Bar-Yossef et al. 2002; Beyer et al. 2007). The merge keeps the k smallest
  of the union, which is what one pass over all the input keeps.
- `Histogram`: counts per log-spaced bin (4 per power of two), added bin by bin.
- `Examples`: per reason, a count and the first document (lowest identity) with it.
- `Capped`: value -> [documents, characters, tokens], exact up to `limit` values; later
  values go to "(other)".

Arrays travel in part files as base64 of their little-endian bytes (JSON stays the one
format of every llmtk report).
"""

from __future__ import annotations

import base64
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

KMV_K = 1 << 20  # distinct exact-text keys kept: 8 MiB, exact up to a million distinct texts


def pack(a: np.ndarray) -> str:
    return base64.b64encode(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()).decode()


def unpack(s: str, dtype: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
    import numpy as np

    a = np.frombuffer(base64.b64decode(s), dtype=np.dtype(dtype).newbyteorder("<"))
    a = a.astype(dtype)
    return a.reshape(shape) if shape is not None else a


class Distinct:
    """How many distinct 64-bit keys went in (exact up to k of them)."""

    def __init__(self, k: int = KMV_K) -> None:
        import numpy as np

        self.k = k
        self.kept = np.zeros(0, np.uint64)  # sorted, distinct, at most k
        self._pending: list[np.ndarray] = []
        self._pending_n = 0

    def add(self, keys: np.ndarray) -> None:
        if len(self.kept) == self.k:  # full: only keys below the k-th smallest can enter
            keys = keys[keys < self.kept[-1]]
        if len(keys):
            self._pending.append(keys)
            self._pending_n += len(keys)
            if self._pending_n > self.k:
                self._compact()

    def _compact(self) -> None:
        import numpy as np

        if self._pending:
            both = np.unique(np.concatenate([self.kept, *self._pending]))
            self.kept = both[: self.k]
            self._pending, self._pending_n = [], 0

    def merge(self, other: Distinct) -> None:
        other._compact()
        self.add(other.kept)

    @property
    def exact(self) -> bool:
        self._compact()
        return len(self.kept) < self.k

    def count(self) -> float:
        """The number of distinct keys: exact below k, else (k - 1) / (k-th smallest / 2^64)."""
        self._compact()
        if len(self.kept) < self.k:
            return float(len(self.kept))
        return (self.k - 1) / (float(self.kept[-1]) / 2.0**64)

    def to_dict(self) -> dict:
        self._compact()
        return {"k": self.k, "kept": pack(self.kept)}

    @classmethod
    def from_dict(cls, d: dict) -> Distinct:
        s = cls(int(d["k"]))
        s.kept = unpack(d["kept"], "uint64")
        return s


BINS_PER_OCTAVE = 4
N_BINS = 64 * BINS_PER_OCTAVE + 1


def bin_of(values: np.ndarray) -> np.ndarray:
    """Bin 0 holds 0; bin b >= 1 holds values in [2^((b-1)/4), 2^(b/4))."""
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    out = np.zeros(len(v), dtype=np.int64)
    pos = v > 0
    out[pos] = np.floor(np.log2(v[pos]) * BINS_PER_OCTAVE).astype(np.int64) + 1
    return np.clip(out, 0, N_BINS - 1)


def bin_edges(b: int) -> tuple[float, float]:
    if b == 0:
        return 0.0, 1.0
    return 2.0 ** ((b - 1) / BINS_PER_OCTAVE), 2.0 ** (b / BINS_PER_OCTAVE)


class Histogram:
    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.total = 0
        self.n = 0

    def add(self, values: np.ndarray) -> None:
        import numpy as np

        if not len(values):
            return
        bins, counts = np.unique(bin_of(values), return_counts=True)
        for b, c in zip(bins.tolist(), counts.tolist(), strict=True):
            self.counts[b] = self.counts.get(b, 0) + c
        self.total += int(np.asarray(values, dtype=np.int64).sum())
        self.n += len(values)

    def merge(self, other: Histogram) -> None:
        for b, c in other.counts.items():
            self.counts[b] = self.counts.get(b, 0) + c
        self.total += other.total
        self.n += other.n

    def quantile(self, q: float) -> float:
        """The q-quantile, interpolated linearly inside its bin (bins are 19% wide)."""
        if not self.n:
            return 0.0
        need, seen = q * self.n, 0
        for b in sorted(self.counts):
            c = self.counts[b]
            if seen + c >= need:
                lo, hi = bin_edges(b)
                return round(lo + (hi - lo) * (need - seen) / c, 1) if b else 0.0
            seen += c
        return 0.0

    def rows(self) -> list[dict]:
        """[{lo, hi, documents}] of the non-empty bins, in order (lo inclusive, hi not)."""
        return [{"lo": math.ceil(bin_edges(b)[0]) if b else 0,
                 "hi": math.ceil(bin_edges(b)[1]), "documents": c}
                for b, c in sorted(self.counts.items())]

    def to_dict(self) -> dict:
        return {"bins": {str(b): c for b, c in sorted(self.counts.items())},
                "total": self.total, "n": self.n}

    @classmethod
    def from_dict(cls, d: dict) -> Histogram:
        h = cls()
        h.counts = {int(b): int(c) for b, c in d["bins"].items()}
        h.total, h.n = int(d["total"]), int(d["n"])
        return h


class Examples:
    """reason -> [count, identity of the first document, its id]."""

    def __init__(self) -> None:
        self.items: dict[str, list] = {}

    def add(self, reason: str, identity: int, doc_id) -> None:
        item = self.items.get(reason)
        if item is None:
            self.items[reason] = [1, identity, doc_id]
            return
        item[0] += 1
        if identity < item[1]:
            item[1], item[2] = identity, doc_id

    def merge(self, other: Examples) -> None:
        for reason, (n, identity, doc_id) in other.items.items():
            item = self.items.get(reason)
            if item is None:
                self.items[reason] = [n, identity, doc_id]
            else:
                item[0] += n
                if identity < item[1]:
                    item[1], item[2] = identity, doc_id

    def count(self, reason: str) -> int:
        return self.items.get(reason, [0])[0]

    def to_dict(self) -> dict:
        return {r: list(v) for r, v in sorted(self.items.items())}

    @classmethod
    def from_dict(cls, d: dict) -> Examples:
        e = cls()
        e.items = {r: [int(v[0]), int(v[1]), v[2]] for r, v in d.items()}
        return e


OTHER = "(other)"


class Capped:
    """value -> [documents, characters, tokens], at most `limit` values (then "(other)")."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.values: dict[str, list[int]] = {}

    def add(self, value: str, chars: int, tokens: int) -> None:
        row = self.values.get(value)
        if row is None:
            if len(self.values) >= self.limit:
                value = OTHER
                row = self.values.get(value)
            if row is None:
                row = self.values[value] = [0, 0, 0]
        row[0] += 1
        row[1] += chars
        row[2] += tokens

    def merge(self, other: Capped) -> None:
        for value, (d, c, t) in other.values.items():
            row = self.values.get(value)
            if row is None:
                if len(self.values) >= self.limit and value != OTHER:
                    value = OTHER
                row = self.values.setdefault(value, [0, 0, 0])
            row[0] += d
            row[1] += c
            row[2] += t

    def to_dict(self) -> dict:
        return {v: list(r) for v, r in sorted(self.values.items())}

    @classmethod
    def from_dict(cls, d: dict, limit: int) -> Capped:
        c = cls(limit)
        c.values = {v: [int(x) for x in r] for v, r in d.items()}
        return c
