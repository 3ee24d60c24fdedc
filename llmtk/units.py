"""Reading counts such as 7e9, 7B or 1.4T, and writing numbers for people."""

from __future__ import annotations

import math

from llmtk.errors import UsageError

_SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12, "p": 1e15}


def parse_number(option: str, text: str | None, *, integer: bool = False,
                 minimum: float | None = None, allow_zero: bool = False) -> float | None:
    """'7e9', '7B', '1.4T', '8k', '1_000' -> float (or int); UsageError naming `option`."""
    if text is None:
        return None
    s = str(text).strip().replace("_", "").replace(",", "")
    mult = 1.0
    if s and s[-1].lower() in _SUFFIX:
        mult, s = _SUFFIX[s[-1].lower()], s[:-1]
    try:
        value = float(s) * mult
    except ValueError:
        raise UsageError(f"{option}: expected a number such as 7e9 or 7B, got {text!r}") from None
    if not math.isfinite(value):
        raise UsageError(f"{option}: expected a finite number, got {text!r}")
    if integer:
        if value != int(value):
            raise UsageError(f"{option}: expected a whole number, got {text!r}")
        value = int(value)
    lo = minimum if minimum is not None else (0 if allow_zero else None)
    if lo is not None and value < lo:
        raise UsageError(f"{option}: must be >= {lo:g}, got {text}")
    if lo is None and value <= 0:
        raise UsageError(f"{option}: must be > 0, got {text}")
    return value


def si(x: float, unit: str = "", digits: int = 3) -> str:
    """1.234e12 -> '1.23 T' + unit."""
    if x == 0:
        return f"0 {unit}".strip()
    for p, name in ((1e15, "P"), (1e12, "T"), (1e9, "B" if not unit else "G"), (1e6, "M"),
                    (1e3, "k")):
        if abs(x) >= p:
            return f"{x / p:.{digits}g} {name}{unit}".strip()
    return f"{x:.{digits}g} {unit}".strip()


def gb(x: float) -> str:
    """Bytes as GB (10^9 bytes, the unit of the ZeRO paper and of datasheets' "GB")."""
    if x >= 1e12:
        return f"{x / 1e12:,.2f} TB"
    if x >= 1e9 or x == 0:
        return f"{x / 1e9:,.1f} GB"
    return f"{x / 1e6:,.1f} MB"


def sci(x: float) -> str:
    return f"{x:.3g}" if 1e-3 <= abs(x) < 1e4 else f"{x:.2e}"


def duration(seconds: float) -> str:
    if seconds < 3600:
        return f"{seconds / 60:.1f} minutes"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} hours"
    if seconds < 2 * 365 * 86400:
        return f"{seconds / 86400:,.1f} days"
    return f"{seconds / (365.25 * 86400):,.1f} years"
