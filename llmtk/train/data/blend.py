"""Blending token datasets at train time: `--data web=DIR:0.7 --data code=DIR:0.3`.

Megatron-LM's blended datasets, with llmtk's loader contract: the data position is
one integer (the windows the whole job has consumed), and every window is a pure
function of it and the seed, so resume is exact and a 2-process run sees the same
global batches as a 1-process run.

Which source feeds position p: the positions are cut into blocks of BLOCK windows,
and every block follows one pattern. The pattern interleaves the sources by their
weights with low discrepancy: source s's k-th slot is due at time (k + 1/2) / w_s,
and the slots are taken in order of that time (ties by source order), so in every
prefix of a block each source has its share of the windows within one window. So
position p = b * BLOCK + o belongs to source pattern[o], and is that source's window
number b * n_s + (its slots before o in the pattern), where n_s is its slots per
block. Each source walks its own windows in a seeded permutation per epoch (its
seed mixes the run's seed with an xxh32 of the source's name, so adding a source
leaves the others' orders alone).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import xxhash

from llmtk.errors import ConfigError, DataError
from llmtk.train.data.cache import Batches, window_order

BLOCK = 1 << 16  # windows per pattern block: each source's share is exact to 1/BLOCK
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class SourceSpec:
    name: str | None  # None: a bare DIR
    path: str
    weight: float = 1.0


def parse_spec(key: str, spec: str) -> SourceSpec:
    """`NAME=DIR:WEIGHT`, `NAME=DIR` (weight 1) or a bare `DIR`."""
    name, sep, rest = spec.partition("=")
    if not sep or not _NAME.fullmatch(name):
        return SourceSpec(None, spec)
    path, colon, weight = rest.rpartition(":")
    if colon:
        try:
            w = float(weight)
        except ValueError:
            path, w = rest, 1.0  # a ':' inside the path
        else:
            if not w > 0 or w == float("inf"):
                raise ConfigError(key, f"weight must be a positive number, got {weight!r}",
                                  value=spec)
    else:
        path, w = rest, 1.0
    if not path:
        raise ConfigError(key, "expected NAME=DIR:WEIGHT", value=spec)
    return SourceSpec(name, path, w)


def pattern(weights: list[float], length: int = BLOCK):
    """(length,) int16: the source of each slot of a block (see the module docstring)."""
    import numpy as np

    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    times, owners = [], []
    for s, ws in enumerate(w):
        k = np.arange(int(np.ceil(ws * length)) + 2, dtype=np.float64)
        times.append((k + 0.5) / ws)
        owners.append(np.full(len(k), s, dtype=np.int16))
    t, o = np.concatenate(times), np.concatenate(owners)
    order = np.lexsort((o, t))[:length]  # by time, then source order
    return o[order]


class BlendSampler(Batches):
    """Micro-batches for one rank from several sources' windows, by the global position.

    Same interface as llmtk.train.data.cache.Sampler (rows, batch, split, global_batch), plus
    `source_tokens(position)` for the metrics rows and `epochs(position)`."""

    def __init__(self, names: list[str], windows: list, weights: list[float], micro_batch: int,
                 world: int, rank: int, seed: int):
        import numpy as np

        for name, w in zip(names, windows, strict=True):
            if len(w) == 0:
                raise DataError(f"--data {name}: not enough tokens for one sequence of "
                                f"{w.seq_len + 1}")
        self.names, self.windows, self.B, self.world, self.rank = names, windows, micro_batch, \
            world, rank
        self.seq_len = windows[0].seq_len
        self.seed = seed
        self.pattern = pattern(weights)
        S = len(names)
        # prefix[s, o]: slots of source s before slot o of a block; per_block[s] = prefix[s, -1]
        onehot = np.zeros((S, BLOCK + 1), dtype=np.int64)
        onehot[self.pattern, np.arange(1, BLOCK + 1)] = 1
        self.prefix = np.cumsum(onehot, axis=1)
        self.per_block = self.prefix[:, -1]
        self._salt = [xxhash.xxh32_intdigest(n.encode()) for n in names]
        self._perm: dict[int, tuple[int, object]] = {}

    def counts(self, position: int):
        """(S,) windows each source has given to the positions before `position`."""
        b, o = divmod(position, BLOCK)
        return b * self.per_block + self.prefix[:, o]

    def locate(self, position: int) -> tuple[int, int]:
        """(source, window index in that source's stream) of the window at `position`."""
        b, o = divmod(position, BLOCK)
        s = int(self.pattern[o])
        c = b * int(self.per_block[s]) + int(self.prefix[s, o])
        n = len(self.windows[s])
        epoch, i = divmod(c, n)
        cached = self._perm.get(s)
        if cached is None or cached[0] != epoch:
            cached = (epoch, window_order(n, [self.seed, self._salt[s], epoch]))
            self._perm[s] = cached
        return s, int(cached[1][i])  # type: ignore[index]

    def window(self, position: int):
        s, i = self.locate(position)
        return self.windows[s].get(i)

    def windows_at(self, position: int):
        """(B, T + 1) int64 array: this rank's windows of the job-wide micro-batch that
        starts at window `position` (rank r takes its B windows after r * B)."""
        start = position + self.rank * self.B
        return self.stack([self.window(start + j) for j in range(self.B)])

    def rows(self, position: int):
        """windows_at as a tensor."""
        import torch

        return torch.from_numpy(self.windows_at(position))

    def source_tokens(self, position: int) -> dict[str, int]:
        """`tokens/NAME`: the tokens each source gave to the windows before `position`."""
        return {f"tokens/{n}": int(c) * self.seq_len
                for n, c in zip(self.names, self.counts(position), strict=True)}

    def epochs(self, position: int) -> dict[str, float]:
        """How many times each source has been read through by `position`."""
        return {n: int(c) / len(w) for n, c, w in
                zip(self.names, self.counts(position), self.windows, strict=True)}
