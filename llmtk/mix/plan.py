"""The mixing plan: how many tokens each source contributes, and which documents.

Tokens are counted as the trainer sees them: the document's tokens plus one
end-of-document token (`llmtk/text/tokenizer.py`, byte-level by default).

A source whose share of the budget is larger than the source repeats whole
epochs (every document once per epoch), then a seeded random subset for the
remainder; a source larger than its share contributes a seeded random subset.
A subset is the shortest prefix of a seeded permutation of the documents whose
tokens reach the target, so a source overshoots its target by less than one
document. Documents keep their order within a source; sources are interleaved
so that each one's share of the tokens emitted so far stays as even as possible.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field
from functools import cached_property

import xxhash

from llmtk.errors import ConfigError


@dataclass
class Source:
    name: str
    spec: str  # the paths as given
    weight: float
    paths: list[str] = field(default_factory=list)
    # tokens of each document by record index (0 = bad line); 4 bytes per document
    doc_tokens: array = field(default_factory=lambda: array("I"))
    file_offsets: list[int] = field(default_factory=list)  # first document number of each file
    # filled in by plan():
    target: float = 0.0
    full_epochs: int = 0
    subset: bytearray | None = None  # 1 = chosen for the last, partial pass

    # Read only after counting has finished (plan() and the report), so computed once.
    @cached_property
    def tokens(self) -> int:
        return sum(self.doc_tokens)

    @cached_property
    def docs(self) -> int:
        return len(self.doc_tokens) - self.doc_tokens.count(0)

    @property
    def epochs(self) -> float:
        return self.target / self.tokens if self.tokens else 0.0

    def passes(self) -> int:
        return self.full_epochs + (1 if self.subset is not None else 0)


def parse_source(spec: str) -> Source:
    """NAME=PATH[:WEIGHT]; PATH may be a file, directory or glob."""
    name, sep, rest = spec.partition("=")
    if not sep or not name or not rest:
        raise ConfigError("source", f"expected NAME=PATH[:WEIGHT], got {spec!r}")
    path, weight = rest, 1.0
    head, colon, tail = rest.rpartition(":")
    if colon and head:
        try:
            weight = float(tail)
            path = head
        except ValueError:
            pass  # a ':' inside the path itself
    if not (weight > 0 and math.isfinite(weight)):
        raise ConfigError("source", f"the weight must be > 0, got {tail}", value=name)
    if path == "-":
        raise ConfigError("source", "mix reads each source twice, so it must be a file, "
                          "directory or glob, not stdin", value=name)
    return Source(name, path, weight)


def natural_budget(sources: list[Source]) -> float:
    """The largest budget that needs no source more than once: the scarcest source, used fully."""
    total_weight = sum(s.weight for s in sources)
    return min(s.tokens / (s.weight / total_weight) for s in sources)


def _subset(source: Source, target: float, seed: int) -> bytearray:
    import numpy as np

    key = xxhash.xxh64_intdigest(f"{seed}:{source.name}".encode())
    order = np.random.default_rng(key).permutation(len(source.doc_tokens))
    counts = np.asarray(source.doc_tokens, dtype=np.int64)[order]
    reach = int(np.searchsorted(np.cumsum(counts), target, side="left")) + 1
    chosen = bytearray(len(source.doc_tokens))
    for i in order[:reach].tolist():
        chosen[i] = 1
    return chosen


def plan(sources: list[Source], budget: float | None, max_epochs: float, seed: int) -> float:
    """Fill in each source's target, full epochs and subset; returns the budget used."""
    for s in sources:
        if s.tokens == 0:
            raise ConfigError("source", f"no documents in {s.spec}", value=s.name)
    if budget is None:
        budget = natural_budget(sources)
    total_weight = sum(s.weight for s in sources)
    for s in sources:
        s.target = budget * s.weight / total_weight
        if s.epochs > max_epochs:
            raise ConfigError(
                "source", f"its share ({s.target:,.0f} tokens) needs {s.epochs:.2f} epochs of "
                f"its {s.tokens:,} tokens, more than {{0}} {max_epochs:g}; lower its weight or "
                "the budget, or raise {0}", also=("max_epochs",), value=s.name)
        s.full_epochs = int(s.target // s.tokens)
        remainder = s.target - s.full_epochs * s.tokens
        s.subset = _subset(s, remainder, seed) if remainder > 0 else None
    return budget
