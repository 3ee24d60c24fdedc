"""Mixture weights: points of the simplex inside per-source bounds, and how to draw them.

A mixture is a vector w with sum(w) = 1 and lo <= w <= hi per source (the user's
--min-weight/--max-weight, and the repetition limit: a source may not be read more than
--max-epochs times within the proxy's token budget). `project` maps any vector to the
nearest such point; `sample` draws K spread-out mixtures around the natural token shares.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmtk.errors import UsageError

if TYPE_CHECKING:
    import numpy as np


def check_bounds(names: list[str], lo, hi) -> None:
    """Refuse bounds that no mixture can meet, naming the sources that bind."""
    if float(sum(lo)) > 1 + 1e-9:
        raise UsageError("--min-weight: the lower bounds add up to "
                         f"{float(sum(lo)):.3g} > 1 ({_listed(names, lo)})")
    if float(sum(hi)) < 1 - 1e-9:
        raise UsageError(f"no mixture fits: the upper bounds add up to {float(sum(hi)):.3g} "
                         f"< 1 ({_listed(names, hi)}); raise --max-weight or --max-epochs, "
                         "lower the proxy's steps, or add data")
    for name, a, b in zip(names, lo, hi, strict=True):
        if a > b + 1e-12:
            raise UsageError(f"{name}: the lower bound {a:.3g} exceeds the upper bound {b:.3g}"
                             " (--min-weight against --max-weight or --max-epochs)")


def _listed(names, values) -> str:
    return ", ".join(f"{n} {float(v):.3g}" for n, v in zip(names, values, strict=True))


def project(v: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The nearest point (Euclidean) of {sum w = 1, lo <= w <= hi} to each row of v.

    That point is clip(v - tau, lo, hi) for the tau that makes it sum to 1 (the sum falls
    as tau grows), found by bisection for all rows at once."""
    import numpy as np

    v = np.atleast_2d(np.asarray(v, dtype=np.float64))
    low = (v - hi).min(axis=1) - 1.0   # every weight at hi: the sum >= 1
    high = (v - lo).max(axis=1) + 1.0  # every weight at lo: the sum <= 1
    for _ in range(100):
        mid = (low + high) / 2
        total = np.clip(v - mid[:, None], lo, hi).sum(axis=1)
        low = np.where(total > 1, mid, low)
        high = np.where(total > 1, high, mid)
    return np.clip(v - ((low + high) / 2)[:, None], lo, hi)


def draws(natural: np.ndarray, lo: np.ndarray, hi: np.ndarray, m: int,
          rng: np.random.Generator) -> np.ndarray:
    """m mixtures drawn around the natural shares, within the bounds.

    The draws' concentration varies (log-uniform over 0.5 to 20 times the number of
    sources), as RegMix's do, so that both mixtures near the natural one and ones far
    from it (a source almost alone, one almost absent) are among them."""
    import numpy as np

    n = len(natural)
    concentration = np.exp(rng.uniform(np.log(0.5 * n), np.log(20.0 * n), m))
    shape = np.maximum(concentration[:, None] * natural[None, :], 1e-3)
    points = rng.gamma(shape)
    points /= points.sum(axis=1, keepdims=True)
    return project(points, lo, hi)


def sample(natural: np.ndarray, lo: np.ndarray, hi: np.ndarray, k: int,
           seed: int) -> np.ndarray:
    """K mixtures: the natural shares, equal weights, then points chosen farthest from
    those already chosen among `draws` around the natural shares, so that the K spread
    over the feasible part of the simplex."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n = len(natural)
    candidates = draws(natural, lo, hi, max(64 * k, 512), rng)
    chosen = [project(natural, lo, hi)[0]]
    equal = project(np.full(n, 1 / n), lo, hi)[0]
    if k > 1 and np.linalg.norm(equal - chosen[0]) > 1e-3:
        chosen.append(equal)
    nearest = np.min([np.linalg.norm(candidates - c, axis=1) for c in chosen], axis=0)
    while len(chosen) < k:
        i = int(np.argmax(nearest))
        chosen.append(candidates[i])
        nearest = np.minimum(nearest, np.linalg.norm(candidates - candidates[i], axis=1))
    return np.array(chosen)
