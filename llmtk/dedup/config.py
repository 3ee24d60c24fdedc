"""Dedup parameters, shared by the single-command run, the stages and saved indexes.

Defaults: 5-grams (of words, or of characters for CJK text), 16 bands x 7 rows
(112 permutations, as many as datatrove's 14 x 8) and a band match verified on
the whole signature (estimated Jaccard >= 0.5), 64-bit hashes, a fixed seed.
Why not datatrove's 14 x 8: it finds 0.92 of the pairs at Jaccard 0.8, and a user
who sets no option is promised >= 0.95 at and above 0.8; 16 x 7 gives 0.977 at
0.8. Its steeper start (0.12 at J = 0.5) lets more pairs below 0.5 through,
which the verification removes (see docs/dedup.md, "Default banding", for the
curve and benchmarks/dedup_quality.py for the measurements on real text).
A saved index or a signatures folder records the parameters it was built with,
and a later stage refuses different ones. Like every llmtk config, a DedupConfig is
frozen and checked once by `validate()`, which names a parameter by its key (ConfigError);
the command words the key as its flag.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from llmtk.errors import ConfigError

NORMALISE_STEPS = ("lowercase", "whitespace", "punctuation", "digits")
UNITS = ("word", "char", "auto", "code")
MAX_PERMUTATIONS = 1024


@dataclass(frozen=True)
class DedupConfig:
    ngram: int = 5
    unit: str = "auto"
    bands: int = 16
    rows: int = 7
    seed: int = 1
    normalise: tuple[str, ...] = field(default=NORMALISE_STEPS)
    # > 0: a band match counts only if the signatures agree this much (estimated Jaccard)
    verify: float = 0.5

    def validate(self) -> None:
        """Raise ConfigError for the first parameter that cannot run (the command calls it)."""
        if self.ngram < 1:
            raise ConfigError("ngram", f"must be >= 1, got {self.ngram}")
        if self.unit not in UNITS:
            raise ConfigError("unit", f"expected word, char, auto or code, got {self.unit!r}")
        if self.bands < 1 or self.rows < 1 or self.bands * self.rows > MAX_PERMUTATIONS:
            raise ConfigError(
                "bands", f"must be >= 1, as must {{0}}, with at most {MAX_PERMUTATIONS} "
                f"permutations (bands x rows); got {self.bands}x{self.rows}", also=("rows",)
            )
        if not 0.0 <= self.verify < 1.0:
            raise ConfigError("verify", f"must be between 0 and 1, got {self.verify}")
        bad = [s for s in self.normalise if s not in NORMALISE_STEPS]
        if bad:
            raise ConfigError("normalise", f"unknown step {bad[0]!r} (choose from "
                              f"{', '.join(NORMALISE_STEPS)} or none)")

    @property
    def permutations(self) -> int:
        return self.bands * self.rows

    def to_dict(self) -> dict:
        d = asdict(self)
        d["normalise"] = list(self.normalise)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> DedupConfig:
        return cls(
            ngram=int(d["ngram"]), unit=str(d["unit"]), bands=int(d["bands"]),
            rows=int(d["rows"]), seed=int(d["seed"]), normalise=tuple(d["normalise"]),
            verify=float(d.get("verify", 0.0)),
        )

    @property
    def verify_matches(self) -> int:
        """Equal 8-bit signature values (of `permutations`) needed to pass --verify.

        Two documents with Jaccard J agree on a minimum with probability J, and
        on its low 8 bits with probability J + (1 - J)/256 (chance collisions).
        """
        import math

        v = self.verify
        return math.ceil((v + (1.0 - v) / 256.0) * self.permutations - 1e-9)


DEFAULT_THRESHOLD = 0.8  # the similarity the default banding is chosen for
VERIFY_MARGIN = 0.3  # automatic --verify: this far below the target similarity


def auto_verify(threshold: float | None) -> float:
    """--verify when not given: 0.5 for the default banding (made for J = 0.8), else
    --threshold minus the same margin (0 when that is below 0: no check)."""
    t = DEFAULT_THRESHOLD if threshold is None else threshold
    return round(max(0.0, t - VERIFY_MARGIN), 6)


def parse_normalise(value: str) -> tuple[str, ...]:
    """'lowercase,digits' -> ('lowercase', 'digits'); 'none' -> ()."""
    value = value.strip()
    if value in ("", "none"):
        return ()
    steps = tuple(s.strip() for s in value.split(",") if s.strip())
    return tuple(s for s in NORMALISE_STEPS if s in steps) + tuple(
        s for s in steps if s not in NORMALISE_STEPS
    )


def candidate_probability(jaccard, bands: int, rows: int):
    """P(two documents with this Jaccard similarity share at least one band)."""
    return 1.0 - (1.0 - jaccard**rows) ** bands


def bands_rows_for(threshold: float, permutations: int = 112) -> tuple[int, int]:
    """The bands x rows (<= permutations) whose S-curve best separates at `threshold`.

    Minimises the area of false positives (below the threshold) plus false
    negatives (above it) under the candidate-probability curve, with equal
    weights, as datasketch's MinHashLSH does; ties go to fewer permutations.
    """
    import numpy as np

    if not 0.0 < threshold < 1.0:
        raise ConfigError("threshold", f"must be between 0 and 1, got {threshold}")
    below = np.linspace(0.0, threshold, 201)
    above = np.linspace(threshold, 1.0, 201)
    best: tuple[float, int, int] | None = None
    for bands in range(1, permutations + 1):
        for rows in range(1, permutations // bands + 1):
            fp = _area(candidate_probability(below, bands, rows), below)
            fn = _area(1.0 - candidate_probability(above, bands, rows), above)
            key = (round(float(fp + fn), 12), bands * rows, bands)
            if best is None or key < best:
                best = key
    assert best is not None
    return best[2], best[1] // best[2]


def _area(y, x) -> float:
    """Trapezoid rule (np.trapezoid needs NumPy 2)."""
    return float(((y[1:] + y[:-1]) * 0.5 * (x[1:] - x[:-1])).sum())
