"""Loading training logs of llmtk and other trainers: the one reader of plot-loss and diagnose.

The format is told from the content, never from the file name alone:

- llmtk's `metrics.jsonl` (see `metrics.py`), and any JSON Lines log of numbers;
- Hugging Face Trainer's `trainer_state.json` (its `log_history`), or a run or
  checkpoint directory holding one;
- TensorBoard event files (`events.out.tfevents.*`, or a log directory), read
  with the `tensorboard` package's event reader (an optional dependency);
- CSV/TSV with a header, case-insensitive: `step,loss`, TensorBoard's export
  `Wall time,Step,Value`, W&B's panel export (`Step,"RUN - loss",...`) and
  `run.history()` tables (`_step,train/loss,...`);
- JSON documents: a list of row objects (W&B `scan_history()`), or pandas'
  column-wise `to_json()` of a W&B history;
- W&B run files (`run-ID.wandb`, or an offline run directory holding one), read
  without the `wandb` package (see `wandblog.py`);
- text printed by nanoGPT, llm.c, modded-nanogpt, Megatron-LM and torchtitan, HF
  Trainer's console output (its Python dicts, even as the first line), Keras' `model.fit`
  output, fairseq's, build-nanogpt's `STEP NAME VALUE` log.txt, and any `key: value` /
  `key=value` lines with a step (or a counter line above them) and a loss (see
  `textlogs.py`).

Field names of other trainers map onto ours (`iter`/`global_step` -> `step`,
`train/loss`/`lm loss` -> `loss`, `eval_loss` -> `val_loss`, `learning_rate`
-> `lr`, ...). Anything that is not one of these formats, or that holds no
numbers, is an error naming what was expected: a reader that skips what it
does not understand must never let a tool report "no problems".
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from dataclasses import dataclass, field

from llmtk.errors import DataError, UsageError
from llmtk.io.metrics import decode_row, decode_value

EXPECTED = ("expected llmtk metrics.jsonl, HF trainer_state.json, TensorBoard events, CSV with a "
            "header (step,loss / Wall time,Step,Value), W&B history CSV/JSON, or a nanoGPT, "
            "llm.c, Megatron-LM, torchtitan, Keras or fairseq text log, HF Trainer console output, "
            "build-nanogpt's `STEP train LOSS` lines, or `step: N, loss: X` / `step=N loss=X` "
            "lines")

ALIASES = {
    **dict.fromkeys(("iter", "iteration", "global_step", "trainer/global_step", "_step",
                     "train/global_step"), "step"),
    **dict.fromkeys(("train_loss", "train/loss", "loss/train", "training_loss", "lm_loss",
                     "train/lm_loss", "loss_metrics/global_avg_loss", "train_loss_step",
                     "trl"), "loss"),
    **dict.fromkeys(("val/loss", "eval_loss", "eval/loss", "valid_loss", "validation_loss",
                     "loss/val", "loss/validation", "valid/loss", "validation/loss",
                     "lm_loss_validation", "validation/lm_loss", "eval/lm_loss", "tel"),
                    "val_loss"),
    **dict.fromkeys(("learning_rate", "train/lr", "train/learning_rate", "lr_abs"), "lr"),
    **dict.fromkeys(("gradnorm", "train/grad_norm", "total_norm", "grad_norm/total",
                     "optim/grad_norm"), "grad_norm"),
    **dict.fromkeys(("tokens_seen", "train/tokens", "num_tokens", "consumed_tokens"), "tokens"),
    **dict.fromkeys(("_timestamp", "wall_time", "timestamp"), "time"),
}
KNOWN = frozenset(("step", "loss", "val_loss", "lr", "grad_norm", "tokens", "time"))


def canonical(name: str) -> str:
    """Our name for a logged quantity: lowercase, spaces/hyphens as `_`, aliases applied."""
    key = re.sub(r"[\s\-]+", "_", name.strip().strip('"').lower())
    return ALIASES.get(key, key)


@dataclass
class Run:
    """One training run: rows with numbers by metric name, plus event rows."""

    name: str
    path: str
    rows: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    format: str = "llmtk metrics.jsonl"
    notes: list[str] = field(default_factory=list)  # how the log was read, for the report
    renamed: dict[str, str] = field(default_factory=dict)  # a column's own name -> ours
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def series(self, metric: str, x: str = "step") -> tuple[list[float], list[float]]:
        """(x values, metric values) over rows that have both; non-finite values kept.
        Computed once per (metric, x): the detectors ask for the same series many times.
        The lists are shared: callers must not modify them."""
        key = (metric, x, len(self.rows))
        if key not in self._cache:
            xs, ys = [], []
            for row in self.rows:
                xv, yv = row.get(x), row.get(metric)
                if _is_number(xv) and _is_number(yv):
                    xs.append(float(xv))
                    ys.append(float(yv))
            self._cache[key] = (xs, ys)
        return self._cache[key]

    def has(self, metric: str) -> bool:
        key = ("has", metric, len(self.rows))
        if key not in self._cache:
            self._cache[key] = any(_is_number(row.get(metric)) for row in self.rows)
        return self._cache[key]

    def columns(self) -> list[str]:
        seen: dict[str, None] = {}
        for row in self.rows:
            seen.update(dict.fromkeys(k for k, v in row.items() if _is_number(v)))
        return list(seen)

    def metric(self, name: str) -> str:
        """Our name for a metric asked for by any of its names (`Value`, `train/loss`)."""
        key = canonical(name)
        return self.renamed.get(key, key)

    @property
    def loss_key(self) -> str:
        """The curve to diagnose: the training loss, else the validation loss."""
        return "loss" if self.has("loss") or not self.has("val_loss") else "val_loss"


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _normalise(row: dict) -> dict:
    return {canonical(k) if k != "event" else k: v for k, v in row.items()}


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


LOG_NAMES = ("metrics.jsonl", "metrics.csv", "log.txt", "trainer_state.json")
# what a label drops from a file name: formats, then compression (`a.jsonl.zst` -> `a`)
EXTENSIONS = (".zst", ".gz", ".jsonl", ".json", ".csv", ".tsv", ".txt", ".log", ".out",
              ".wandb")


def run_name(path: str, taken: set[str]) -> str:
    """A short label: the run directory for `.../NAME/metrics.jsonl` (or a TensorBoard
    event file), else the file name without its extensions (`lr0.001.jsonl` -> `lr0.001`)."""
    return _numbered(_label_and_parent(path)[0], taken)


def _label_and_parent(path: str) -> tuple[str, str]:
    """(label, the directory above what the label names)."""
    full = os.path.abspath(path)
    base = os.path.basename(full)
    if os.path.isdir(path):
        return base, os.path.dirname(full)
    if (base in LOG_NAMES or "tfevents" in base) and os.path.dirname(path):
        return os.path.basename(os.path.dirname(full)), os.path.dirname(os.path.dirname(full))
    stripped = True
    while stripped:
        stripped = False
        for ext in EXTENSIONS:
            if base.lower().endswith(ext) and len(base) > len(ext):
                base, stripped = base[:-len(ext)], True
    return base, os.path.dirname(full)


def run_labels(paths: list[str]) -> list[str]:
    """Labels for runs drawn together: `run_name`'s, and where two runs would share one,
    the directories above it until they differ (`exp1/a`, `exp2/a`); the same path given
    twice is numbered (`a`, `a#2`)."""
    pairs = [list(_label_and_parent(p)) for p in paths]
    while True:
        groups: dict[str, list[list[str]]] = {}
        for pair in pairs:
            groups.setdefault(pair[0], []).append(pair)
        grow = [g for g in groups.values() if len(g) > 1 and len({p[1] for p in g}) > 1]
        if not grow:
            break
        for group in grow:
            for pair in group:
                if os.path.basename(pair[1]):
                    pair[0] = f"{os.path.basename(pair[1])}/{pair[0]}"
                    pair[1] = os.path.dirname(pair[1])
    taken: set[str] = set()
    return [_numbered(label, taken) for label, _ in pairs]


def _numbered(name: str, taken: set[str]) -> str:
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name}#{n}", n + 1
    taken.add(candidate)
    return candidate


# -- directories ------------------------------------------------------------------------


def _tb_files(root: str) -> list[str]:
    found = []
    for dirpath, _, files in os.walk(root):
        found += [os.path.join(dirpath, f) for f in files if "tfevents" in f]
    return sorted(found)


def _resolve_dir(path: str) -> tuple[str, list[str]]:
    """The file(s) to read for a run directory."""
    for name in ("metrics.jsonl", "trainer_state.json"):
        if os.path.isfile(os.path.join(path, name)):
            return "file", [os.path.join(path, name)]
    checkpoints = [d for d in os.listdir(path) if re.fullmatch(r"checkpoint-\d+", d)
                   and os.path.isfile(os.path.join(path, d, "trainer_state.json"))]
    if checkpoints:  # HF output dir: the newest checkpoint's state holds the whole history
        newest = max(checkpoints, key=lambda d: int(d.split("-")[1]))
        return "file", [os.path.join(path, newest, "trainer_state.json")]
    if tb := _tb_files(path):
        return "tensorboard", tb
    runs = sorted(f for f in os.listdir(path) if f.endswith(".wandb"))
    if len(runs) == 1:  # a W&B run directory (wandb/offline-run-*, wandb/latest-run)
        return "file", [os.path.join(path, runs[0])]
    if len(runs) > 1:
        raise DataError(f"{path}: {len(runs)} W&B run files ({', '.join(runs)}); give one")
    raise DataError(f"{path}: no metrics.jsonl, trainer_state.json or TensorBoard event files "
                    f"in this directory ({EXPECTED})")


# -- loading ----------------------------------------------------------------------------


def load_run(path: str, name: str | None = None) -> Run:
    if not os.path.exists(path):
        raise UsageError(f"{path}: no such file")
    kind, files = _resolve_dir(path) if os.path.isdir(path) else ("file", [path])
    run = Run(name or run_name(path, set()), files[0] if kind == "file" else path)
    if kind == "tensorboard":
        rows = _tensorboard_rows(files, run)
    else:
        rows = _file_rows(files[0], run)
    for row in rows:
        (run.events if "event" in row else run.rows).append(row)
        if row.get("event") == "eval" and _is_number(row.get("value")):
            # `llmtk eval` / `train --eval-tasks` rows become the series eval/TASK/METRIC.
            run.rows.append({"step": row.get("step"),
                             f"eval/{row.get('task')}/{row.get('metric')}": row["value"]})
        if "event" not in row and any(k.startswith("expert_load/") for k in row):
            row.update(expert_extremes(row))
        if row.get("event") == "grad_stats":
            # `train --grad-stats per-layer`: the series grad_norm/LAYER (plot-loss draws them)
            run.rows.append({"step": row.get("step"), **{
                k: decode_value(v) for k, v in row.items() if k.startswith("grad_norm/")}})
    if not run.rows or not run.columns():
        raise DataError(f"{run.path}: no training rows found ({EXPECTED})")
    if not any(_is_number(r.get("step")) for r in run.rows):
        for i, row in enumerate(run.rows):  # a table without a step column: number the rows
            row["step"] = i
        run.notes.append("no step column: rows numbered 0, 1, 2, ...")
    return run


def expert_extremes(row: dict) -> dict:
    """llmtk's mixture-of-experts rows (`expert_load/N`: each expert's share of layer N's
    assignments) as numbers to draw: the busiest and the idlest expert's share x E (1:
    uniform), `expert_load_max/N` and `expert_load_min/N`."""
    out = {}
    for key, shares in row.items():
        if key.startswith("expert_load/") and isinstance(shares, list) and shares and all(
                _is_number(s) for s in shares):
            layer, n = key.split("/", 1)[1], len(shares)
            out[f"expert_load_max/{layer}"] = max(shares) * n
            out[f"expert_load_min/{layer}"] = min(shares) * n
    return out


def _file_rows(path: str, run: Run) -> list[dict]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e.strerror}") from None
    if b"brain.Event:" in data[:64] or "tfevents" in os.path.basename(path):
        return _tensorboard_rows([path], run)
    if data[:4] == b":W&B":
        from llmtk.curves.wandblog import history_rows

        run.format = "W&B run file"
        return [_normalise(r) for r in history_rows(path, data)]
    if b"\x00" in data[:4096]:
        raise DataError(f"{path}: a binary file, not a training log ({EXPECTED})")
    text = data.decode("utf-8", "replace")
    stripped = text.lstrip()
    if stripped[:1] in ("{", "["):
        doc = _whole_json(text)
        if doc is not None:
            return _json_doc_rows(path, doc, run)
        if stripped[:1] == "{" and _first_line_is_json(stripped):
            return _jsonl_rows(path, text)
    lines = [line for line in text.splitlines() if line.strip()]
    if lines and (delim := _csv_delimiter(lines)):
        return _csv_rows(path, text, delim, run)
    from llmtk.curves.textlogs import text_rows

    rows, fmt, notes = text_rows(text)
    run.format = f"{fmt} text log" if fmt else "text"
    run.notes += notes
    if not rows:
        _no_rows(path, text)
    return [_normalise(r) for r in rows]


def _first_line_is_json(text: str) -> bool:
    """JSON Lines starts with a JSON object; HF Trainer's console output starts with a Python
    dict (`{'loss': 2.3, ...}`) and is read as text."""
    try:
        decode_row(text.split("\n", 1)[0])
    except ValueError:
        return re.match(r"\{\s*'", text) is None
    return True


def _no_rows(path: str, text: str) -> None:
    """A text log in which no line was read: name the first line that speaks of a loss, which
    is most likely the one the user expected to be read."""
    for lineno, line in enumerate(text.splitlines(), 1):
        if re.search(r"loss", line, re.I) and re.search(r"\d", line):
            shown = line.strip()[:80] + ("..." if len(line.strip()) > 80 else "")
            raise DataError(f"{path}:{lineno}: no training rows found: no reader understood "
                            f"this line, which has a loss: {shown!r} ({EXPECTED})")


def _whole_json(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return None


def _json_doc_rows(path: str, doc, run: Run) -> list[dict]:
    if isinstance(doc, dict) and isinstance(doc.get("log_history"), list):
        run.format = "HF Trainer trainer_state.json"
        # the last entry of a finished run is the summary (train_runtime, and train_loss as the
        # average over the whole run): not a step's loss
        rows = [_normalise(r) for r in doc["log_history"]
                if isinstance(r, dict) and "train_runtime" not in r]
        # several eval datasets log eval_NAME_loss: the first (by name) is the validation curve
        named = sorted({k for r in rows for k in r if re.fullmatch(r"eval_.+_loss", k)})
        if named and not any("val_loss" in r for r in rows):
            for r in rows:
                if named[0] in r:
                    r["val_loss"] = r[named[0]]
            run.notes.append(f"val_loss is {named[0]} (of {', '.join(named)})")
        return rows
    if isinstance(doc, list) and doc and all(isinstance(r, dict) for r in doc):
        run.format = "JSON rows (e.g. W&B scan_history)"
        return [_normalise({k: decode_value(v) for k, v in r.items()}) for r in doc]
    if isinstance(doc, dict) and doc and all(isinstance(c, dict) for c in doc.values()):
        run.format = "JSON columns (e.g. W&B history().to_json())"
        index = sorted({k for c in doc.values() for k in c}, key=_index_key)
        return [_normalise({name: decode_value(col.get(i)) for name, col in doc.items()})
                for i in index]
    if isinstance(doc, dict) and doc and all(isinstance(c, list) for c in doc.values()):
        run.format = "JSON columns"
        n = max(len(c) for c in doc.values())
        return [_normalise({k: decode_value(c[i]) if i < len(c) else None
                            for k, c in doc.items()}) for i in range(n)]
    if isinstance(doc, dict):
        return [_normalise({k: decode_value(v) for k, v in doc.items()})]  # one JSONL row
    raise DataError(f"{path}: a JSON document llmtk cannot read as a training log ({EXPECTED})")


def _index_key(k: str):
    return (0, int(k)) if str(k).lstrip("-").isdigit() else (1, str(k))


_QUOTED_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _quoted_numbers(row: dict) -> dict:
    """Numbers written as strings become numbers: fairseq's `--log-format json` writes
    `"loss": "3.097"` (and `"clip": "100%"`, which stays text)."""
    return {k: float(v) if isinstance(v, str) and k != "event" and _QUOTED_NUMBER.fullmatch(v)
            else v for k, v in row.items()}


def _jsonl_rows(path: str, text: str) -> list[dict]:
    rows = []
    lines = text.splitlines()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(_normalise(_quoted_numbers(decode_row(line))))
        except ValueError as e:
            if lineno == len(lines) and not text.endswith("\n"):
                break  # a torn last line: the run is still writing, or crashed mid-write
            raise DataError(f"{path}:{lineno}: {e}") from None
    return rows


def _csv_delimiter(lines: list[str]) -> str | None:
    """',' or '\\t' when the first line is a header of names over rows with numbers."""
    delim = "\t" if "\t" in lines[0] else ","
    header = next(csv.reader([lines[0]], delimiter=delim))
    names = [h for h in header if h.strip()]  # pandas' to_csv() leaves the index unnamed
    if len(names) < 2 or any(_is_number(_number(h)) for h in names):
        return None
    for line in lines[1:6]:
        cells = next(csv.reader([line], delimiter=delim), [])
        if len(cells) == len(header) and any(_is_number(_number(c)) for c in cells):
            return delim
    return None


_WANDB_COLUMN = re.compile(r"^(.+?) - (.+)$")  # W&B panel export: "RUN - METRIC"


def _csv_rows(path: str, text: str, delimiter: str, run: Run) -> list[dict]:
    reader = csv.reader(io.StringIO(text), delimiter=delimiter)
    header = [h.strip() for h in next(reader)]
    names = _csv_names(path, header, run)
    rows = []
    for lineno, cells in enumerate(reader, 2):
        if not cells or not any(c.strip() for c in cells):
            continue
        if len(cells) != len(header):
            raise DataError(f"{path}:{lineno}: {len(cells)} fields, the header has "
                            f"{len(header)}")
        row = {}
        for name, cell in zip(names, cells, strict=True):
            if name is not None:
                row[name] = decode_value(_number(cell))
        rows.append(row)
    return rows


def _csv_names(path: str, header: list[str], run: Run) -> list[str | None]:
    lowered: list = [canonical(h) if h.strip() else None for h in header]
    run.format = "CSV"
    if set(lowered) >= {"step", "value"} and len(header) <= 3:
        # TensorBoard's export: one scalar per file, named by its tag in the file name
        # (run-NAME-tag-TAG.csv) or by the file's own name
        base = os.path.basename(path)
        tag = m.group(1) if (m := re.search(r"-tag-(.+)\.csv$", base)) else base.split(".")[0]
        metric = canonical(tag)
        if metric not in KNOWN:
            metric = "loss"
            run.notes.append(f"read TensorBoard's Value column as loss ({base} names no tag)")
        run.format = "TensorBoard CSV export"
        run.renamed["value"] = metric
        return [metric if n == "value" else n for n in lowered]
    prefixes = {m.group(1) for h in header if (m := _WANDB_COLUMN.match(h))}
    if prefixes:
        if len(prefixes) > 1:
            raise DataError(f"{path}:1: a W&B export of {len(prefixes)} runs "
                            f"({', '.join(sorted(prefixes))}); export one run per file")
        run.format = "W&B CSV export"
        names: list[str | None] = []
        for h in header:
            m = _WANDB_COLUMN.match(h)
            metric = m.group(2) if m else h
            names.append(None if metric.endswith(("__MIN", "__MAX")) else canonical(metric))
        return names
    if "_step" in (h.lower() for h in header):
        run.format = "W&B history CSV"
    return lowered


def _tensorboard_rows(files: list[str], run: Run) -> list[dict]:
    try:
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        from tensorboard.util import tensor_util
    except ImportError:
        raise DataError(f"{files[0]}: reading TensorBoard event files needs the tensorboard "
                        "package (pip install tensorboard), or export the scalars as CSV") from None
    run.format = "TensorBoard events"
    by_step: dict[int, dict] = {}
    for path in files:
        try:
            for event in EventFileLoader(path).Load():
                if not event.HasField("summary"):
                    continue
                for value in event.summary.value:
                    if value.tag.endswith((" vs samples", " vs tokens")):
                        continue  # Megatron logs the same curve again against other x axes
                    if value.HasField("simple_value"):
                        number = float(value.simple_value)
                    elif value.HasField("tensor") and not value.tensor.tensor_shape.dim:
                        number = float(tensor_util.make_ndarray(value.tensor))
                    else:
                        continue  # histograms, images, text
                    row = by_step.setdefault(int(event.step), {"step": int(event.step)})
                    row[canonical(value.tag)] = number
                    row.setdefault("time", event.wall_time)
        except Exception as e:  # the reader raises its own types for torn or foreign files
            raise DataError(f"{path}: not a readable TensorBoard event file ({e})") from None
    return [by_step[s] for s in sorted(by_step)]


def load_runs(paths: list[str]) -> list[Run]:
    return [load_run(p, name) for p, name in zip(paths, run_labels(paths), strict=True)]
