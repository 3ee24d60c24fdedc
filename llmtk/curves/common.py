"""What every detector shares: the `Finding` it returns and a few robust statistics
(EMA trend, rolling median and MAD) that a user can check by eye on the plot."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field


@dataclass
class Finding:
    kind: str
    severity: str  # "error" | "warning" | "info"
    step: float
    summary: str
    causes: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)
    end_step: float | None = None
    details: list[str] = field(default_factory=list)  # one line per event, for --verbose

    def as_dict(self) -> dict:
        return asdict(self)


# -- small numeric helpers --------------------------------------------------------------


def finite(xs: list[float], ys: list[float]) -> tuple[list[float], list[float]]:
    pairs = [(x, y) for x, y in zip(xs, ys, strict=True) if math.isfinite(y)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def ema(ys: list[float], span: int) -> list[float]:
    """Exponential moving average, debiased at the start (like TensorBoard's smoothing)."""
    alpha = 2.0 / (span + 1.0)
    out, avg, weight = [], 0.0, 0.0
    for y in ys:
        avg = (1 - alpha) * avg + alpha * y
        weight = (1 - alpha) * weight + alpha
        out.append(avg / weight)
    return out


def rolling_stats(ys: list[float], w: int) -> tuple[list[float], list[float]]:
    """(median, robust sigma = 1.4826 MAD) of each window ys[i-w:i], for i = w .. n-1.

    numpy over sliding windows, a block of rows at a time (memory stays ~w x 4096 floats):
    a 100k-step log with 1000-step windows takes about a second, not minutes.
    """
    import numpy as np

    arr = np.asarray(ys, dtype=np.float64)
    views = np.lib.stride_tricks.sliding_window_view(arr, w)[:-1]  # (n - w, w)
    centres, sigmas = [], []
    for lo in range(0, len(views), 4096):
        block = views[lo:lo + 4096]
        c = np.median(block, axis=1)
        centres.append(c)
        sigmas.append(1.4826 * np.median(np.abs(block - c[:, None]), axis=1))
    if not centres:
        return [], []
    return np.concatenate(centres).tolist(), np.concatenate(sigmas).tolist()


def window(n: int) -> int:
    return max(5, min(50, n // 10))


def fmt(v: float) -> str:
    return f"{v:.4g}"


