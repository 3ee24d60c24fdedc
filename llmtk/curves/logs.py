"""Loading training logs of llmtk and other trainers into per-metric series.

Formats, told apart by content:
- llmtk's `metrics.jsonl` (see `metrics.py`), and any JSON Lines log with
  numeric fields;
- CSV/TSV with a header row (`step,loss`, W&B/TensorBoard exports, ...);
- plain-text trainer output with `iter N: loss X` (nanoGPT) or
  `step N ... loss X` lines.

Field names of other trainers map onto ours (`iter`/`global_step` -> `step`,
`train_loss`/`train/loss` -> `loss`, `learning_rate` -> `lr`, ...).
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
from dataclasses import dataclass, field

from llmtk.curves.metrics import decode_row, decode_value
from llmtk.errors import DataError, UsageError

ALIASES = {
    "iter": "step", "iteration": "step", "global_step": "step", "trainer/global_step": "step",
    "_step": "step", "train_loss": "loss", "train/loss": "loss", "loss/train": "loss",
    "training_loss": "loss", "val/loss": "val_loss", "eval_loss": "val_loss",
    "valid_loss": "val_loss", "validation_loss": "val_loss", "loss/val": "val_loss",
    "learning_rate": "lr", "train/lr": "lr", "grad-norm": "grad_norm", "gradnorm": "grad_norm",
    "train/grad_norm": "grad_norm", "total_norm": "grad_norm", "tokens_seen": "tokens",
}

# nanoGPT: "iter 100: loss 2.3456, time 12.34ms, mfu 30.12%"; generic "step 100 | loss 2.34"
_TEXT_ROW = re.compile(
    r"\b(?:iter|step)\s*[:=]?\s*(\d+)\b.*?\bloss\s*[:=]?\s*([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf))",
    re.IGNORECASE,
)
_TEXT_VAL = re.compile(
    r"\bstep\s*(\d+)\s*:\s*train loss\s*([\d.eE+-]+|nan),\s*val loss\s*([\d.eE+-]+|nan)",
    re.IGNORECASE,
)


@dataclass
class Run:
    """One training run: rows with numbers by metric name, plus event rows."""

    name: str
    path: str
    rows: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)

    def series(self, metric: str, x: str = "step") -> tuple[list[float], list[float]]:
        """(x values, metric values) over rows that have both; non-finite values kept."""
        xs, ys = [], []
        for row in self.rows:
            xv, yv = row.get(x), row.get(metric)
            if _is_number(xv) and _is_number(yv):
                xs.append(float(xv))
                ys.append(float(yv))
        return xs, ys

    def has(self, metric: str) -> bool:
        return any(_is_number(row.get(metric)) for row in self.rows)


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _normalise(row: dict) -> dict:
    out = {}
    for key, value in row.items():
        key = ALIASES.get(key.strip().lower(), key.strip())
        out[key] = value
    return out


def _number(text: str):
    text = text.strip()
    if text == "" or text.lower() in ("null", "none"):
        return None
    lowered = text.lower()
    if lowered in ("nan", "-nan"):
        return math.nan
    if lowered in ("inf", "infinity", "+inf"):
        return math.inf
    if lowered in ("-inf", "-infinity"):
        return -math.inf
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() and re.fullmatch(r"[-+]?\d+", text) else value


def run_name(path: str, taken: set[str]) -> str:
    """A short label: the run directory for `.../NAME/metrics.jsonl`, else the file name."""
    base = os.path.basename(path)
    if base in ("metrics.jsonl", "metrics.csv", "log.txt") and os.path.dirname(path):
        name = os.path.basename(os.path.dirname(os.path.abspath(path)))
    else:
        name = base
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name}#{n}", n + 1
    taken.add(candidate)
    return candidate


def load_run(path: str, name: str | None = None) -> Run:
    if os.path.isdir(path) and os.path.exists(os.path.join(path, "metrics.jsonl")):
        path = os.path.join(path, "metrics.jsonl")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e.strerror}") from None
    text = data.decode("utf-8", "replace")
    run = Run(name or os.path.basename(path), path)
    first = next((line for line in text.splitlines() if line.strip()), "")
    if first.lstrip().startswith("{"):
        rows = _jsonl_rows(path, text)
    elif _is_csv_header(first):
        rows = _csv_rows(path, text, "\t" if "\t" in first else ",")
    else:
        rows = _text_rows(text)
    for row in rows:
        (run.events if "event" in row else run.rows).append(row)
        if row.get("event") == "eval" and _is_number(row.get("value")):
            # `llmtk eval` / `train --eval-tasks` rows become the series eval/TASK/METRIC.
            run.rows.append({"step": row.get("step"),
                             f"eval/{row.get('task')}/{row.get('metric')}": row["value"]})
    if not run.rows:
        raise DataError(f"{path}: no training rows found (expected metrics.jsonl, CSV with a "
                        "header such as step,loss, or 'iter N: loss X' lines)")
    return run


def _is_csv_header(line: str) -> bool:
    """A header row: several delimited names, one of which we know (step, loss, ...)."""
    names = [n.strip().lower() for n in re.split(r"[,\t]", line)]
    if len(names) < 2 or not all(re.fullmatch(r"[a-z_][\w/.\- ]*", n) for n in names):
        return False
    return any(ALIASES.get(n, n) in ("step", "loss", "val_loss", "lr", "tokens") for n in names)


def _jsonl_rows(path: str, text: str) -> list[dict]:
    rows = []
    lines = text.splitlines()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(_normalise(decode_row(line)))
        except ValueError as e:
            if lineno == len(lines) and not text.endswith("\n"):
                break  # a torn last line: the run is still writing, or crashed mid-write
            raise DataError(f"{path}:{lineno}: {e}") from None
    return rows


def _csv_rows(path: str, text: str, delimiter: str) -> list[dict]:
    reader = csv.DictReader(io.StringIO(text), delimiter=delimiter)
    if not reader.fieldnames:
        raise DataError(f"{path}:1: CSV without a header")
    rows = []
    for row in reader:
        parsed = {k: decode_value(_number(v or "")) for k, v in row.items() if k is not None}
        rows.append(_normalise(parsed))
    return rows


def _text_rows(text: str) -> list[dict]:
    rows = []
    for line in text.splitlines():
        if m := _TEXT_VAL.search(line):
            rows.append({"step": int(m.group(1)), "loss": _number(m.group(2)),
                         "val_loss": _number(m.group(3))})
        elif m := _TEXT_ROW.search(line):
            rows.append({"step": int(m.group(1)), "loss": _number(m.group(2))})
    return rows


def load_runs(paths: list[str]) -> list[Run]:
    taken: set[str] = set()
    return [load_run(p, run_name(p, taken)) for p in paths]
