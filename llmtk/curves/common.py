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
    steps: list[float] = field(default_factory=list)  # each event's step, when several
    # llmtk runs: `llmtk train batch` for the steps' data (curves.detect.trace)
    commands: list[str] = field(default_factory=list)

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
    """4 significant digits, or the value as logged when it has at most 6: a log that
    prints 8.0002 and 8.0003 is not shown as 8 and 8."""
    six = f"{v:.6g}"
    return six if float(six) == v else f"{v:.4g}"




MAX_DECIMALS = 8  # finer than this, a value is taken as logged at full precision


def resolution(ys: list[float]) -> float:
    """The step between the values the log could hold: 1e-4 for a loss printed with 4
    decimals (HF Trainer rounds its loss so), 0.0 for full-precision floats.

    Each value's resolution is the coarsest 10^-d it is a multiple of (0.0043 -> 1e-4; 0.0040
    reads as 1e-3, a trailing zero being invisible); the log's is the median over its values,
    so a few such values, or significant-figure formats that change with the magnitude, do
    not decide it."""
    import numpy as np

    arr = np.abs(np.asarray([y for y in ys if math.isfinite(y)], dtype=np.float64))
    if arr.size == 0:
        return 0.0
    quanta = np.zeros(arr.size)
    open_ = np.ones(arr.size, dtype=bool)  # no decimal count found yet
    for d in range(MAX_DECIMALS + 1):
        scaled = arr * 10.0 ** d
        # Within 1e-12 of the scaled value (at most 1e-3): 1e4 times the error of parsing a
        # decimal (float64 holds it to 1.1e-16 relative), below the digits a value shows
        # (8.0002 is 2.5e-5 relative from 8, so it is not a whole number), and a full-
        # precision float lands that close to a multiple of 1e-8 about once in 2,000 values.
        margin = np.minimum(1e-3, 1e-12 * np.maximum(scaled, 1.0))
        hit = open_ & (np.abs(scaled - np.round(scaled)) < margin)
        quanta[hit] = 10.0 ** -d
        open_ &= ~hit
    return float(np.median(quanta))
