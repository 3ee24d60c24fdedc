"""The metrics-log schema (docs/train.md "The metrics log"): `train` writes it, `plot-loss`
and `diagnose` read it.

One JSON object per line. A training row has `step`, `loss`, `lr`, `grad_norm`,
`tokens`, `tokens_per_s`, `mfu`, `mem_gb`, `data_s`, `step_s`, `time`, and
`val_loss` when evaluated. An event row has `step`, `event` (`resume`,
`checkpoint` with `seconds`, `skip`, `nan` with `bad_params`, ...) and `time`.

Strict JSON: a non-finite float is written as the string "NaN", "Infinity" or
"-Infinity". Readers also accept Python's bare NaN/Infinity tokens; `null`
means "not measured".
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator

import orjson

from llmtk.io.atomic import atomic_file

TRAIN_FIELDS = ("step", "loss", "lr", "grad_norm", "tokens", "tokens_per_s", "mfu", "mem_gb",
                "data_s", "step_s", "time")
# Events a resume keeps past its checkpoint's step: they tell what happened to the run
# (why it restarted), not work that is done again.
FAULT_EVENTS = ("hang", "oom")

_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _strict(value):
    """Floats that JSON cannot hold become their string names; recurse into containers."""
    if isinstance(value, float) and not math.isfinite(value):
        if math.isnan(value):
            return "NaN"
        return "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(v) for v in value]
    return value


def encode_row(row: dict) -> bytes:
    """One log line (with the newline), keys in the order given."""
    return orjson.dumps(_strict(row), option=orjson.OPT_APPEND_NEWLINE)


def decode_value(value):
    """The float behind "NaN"/"Infinity"/"-Infinity"; anything else unchanged."""
    if isinstance(value, str) and value in _NONFINITE:
        return _NONFINITE[value]
    return value


def decode_row(line: bytes | str) -> dict:
    """Parse one line; accepts strict rows and Python's bare NaN/Infinity tokens."""
    try:
        row = orjson.loads(line)
    except orjson.JSONDecodeError:
        row = json.loads(line)  # bare NaN / Infinity / -Infinity
    if not isinstance(row, dict):
        raise ValueError("expected a JSON object")
    return {k: (decode_value(v) if k != "event" else v) for k, v in row.items()}


def read_metrics(path: str) -> Iterator[dict]:
    """Rows of a metrics.jsonl file; a malformed line raises ValueError('PATH:LINE: ...')."""
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield decode_row(line)
            except ValueError as e:
                raise ValueError(f"{path}:{lineno}: {e}") from None


class MetricsWriter:
    """Appends rows to OUT/metrics.jsonl, one flushed line per row (a crash loses at most
    the row being written; a torn last line is dropped by `truncate_after`)."""

    def __init__(self, path: str, mirror=None):
        self.path = path
        self._f = open(path, "ab")
        self.mirror = mirror  # row -> None: `train --log-to` (TensorBoard, W&B), after the file

    def write(self, row: dict) -> None:
        self._f.write(encode_row(row))
        self._f.flush()
        if self.mirror is not None:
            self.mirror(row)

    def sync(self) -> None:
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


def truncate_after(path: str, step: int) -> int:
    """Rewrite the log keeping only rows with step <= `step` (and no torn lines), atomically.

    Used on resume: rows written after the checkpoint we restart from describe work that
    is being redone, so the log keeps one row per step. Returns the number of rows dropped.
    """
    if not os.path.exists(path):
        return 0
    kept, dropped = [], 0
    with open(path, "rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                dropped += 1  # torn by a crash
                continue
            try:
                row = decode_row(line)
            except ValueError:
                dropped += 1
                continue
            if isinstance(row.get("step"), int) and row["step"] > step \
                    and row.get("event") not in FAULT_EVENTS:
                dropped += 1
                continue
            kept.append(line)
    with atomic_file(path) as f:
        f.writelines(kept)
    return dropped
