"""What every chart of `plot-loss` shares: colours, smoothing and tick labels.

Colours: runs take the colour-blind-safe palette of Okabe & Ito ("Color Universal
Design", 2008) *without* its two warm colours, which are kept for findings
(vermillion = error, NaN/skipped step; orange = warning) and grey for info and
resumes, so a marker never looks like a run. Five colours are few: runs 6-10
repeat them with a dash-dot line, 11-15 dotted, and so on.
"""

from __future__ import annotations

import math
import statistics

RUN_COLOURS = ("#0072B2", "#009E73", "#CC79A7", "#56B4E9", "#000000")  # blue, bluish green,
# reddish purple, sky blue, black (Okabe-Ito)
FINDING_COLOURS = {"error": "#D55E00", "warning": "#E69F00", "info": "#888888"}
RESUME_COLOUR = FINDING_COLOURS["info"]
RAW_ALPHA = 0.25  # the unsmoothed line under a smoothed one, as TensorBoard and W&B draw it

# (train line, val line) per pass through the palette
_DASHES = (("-", "--"), ("-.", ":"), (":", "-."))

# plotext's 16 terminal colours follow the user's terminal theme, so they read on dark and
# light backgrounds alike; red and orange are left out as in files.
TERMINAL_COLOURS = ("blue+", "green+", "magenta+", "cyan+", "blue", "green", "magenta", "cyan")


def run_style(i: int) -> tuple[str, str, str]:
    """(colour, train line style, validation line style) of the i-th run."""
    train, val = _DASHES[(i // len(RUN_COLOURS)) % len(_DASHES)]
    return RUN_COLOURS[i % len(RUN_COLOURS)], train, val


def spacing(xs: list[float]) -> float | None:
    """The usual distance between logged points (median of the positive gaps)."""
    gaps = [b - a for a, b in zip(xs, xs[1:], strict=False) if b > a]
    return statistics.median(gaps) if gaps else None


def smooth(xs: list[float], ys: list[float], weight: float,
           every: float | None = None) -> list[float]:
    """TensorBoard's smoothing: an EMA, `last = w * last + (1 - w) * y`, divided by
    `1 - w ** n` so the start is not pulled towards 0.

    With `every` (the x distance one `weight` stands for), a point `d` further on decays by
    `weight ** (d / every)`: the same smoothing in x units whatever the logging interval,
    so a val_loss logged 125x less often than the training loss is not dragged 125x as far
    (W&B's "time weighted" EMA). The normaliser follows the same recursion.
    """
    if weight <= 0 or not ys:
        return list(ys)
    out: list[float] = []
    last = norm = 0.0
    prev = None
    for x, y in zip(xs, ys, strict=True):
        w = weight
        if every and prev is not None and x > prev:
            w = weight ** ((x - prev) / every)
        last = w * last + (1 - w) * y
        norm = w * norm + (1 - w)
        out.append(last / norm)
        prev = x
    return out


_SUFFIXES = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k"))


def human(v: float, digits: int = 3) -> str:
    """250000 -> 250k, 1.2e6 -> 1.2M, 3e9 -> 3B, 1500 -> 1.5k; below 1000 as is."""
    if not math.isfinite(v):
        return str(v)
    for div, suffix in _SUFFIXES:
        q = float(f"{v / div:.{digits}g}")
        if abs(q) >= 1:
            return f"{q:.{digits}g}{suffix}"
    return f"{float(f'{v:.{digits}g}'):g}"


def human_ticks(values: list[float]) -> list[str]:
    """Tick labels in `human` form, with more digits where 3 would make two ticks alike."""
    for digits in range(3, 10):
        labels = [human(v, digits) for v in values]
        if len(set(labels)) == len(labels):
            return labels
    return [f"{v:g}" for v in values]


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About `n` round ticks (1, 2, 2.5 or 5 times a power of ten) covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = (hi - lo) / max(1, n - 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    return [first + k * step for k in range(int((hi - first) / step + 1e-9) + 1)]


def human_formatter():
    """A matplotlib tick formatter writing `human_ticks` labels (no 1e6 offset text)."""
    from matplotlib.ticker import Formatter

    class HumanFormatter(Formatter):
        def __call__(self, x, pos=None):
            return human(x)

        def format_ticks(self, values):
            return human_ticks(list(values))

    return HumanFormatter()
