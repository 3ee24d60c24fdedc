"""Rows from the plain-text logs that trainers print: a few named trainers' patterns, then
lines read by their structure (a counter, named numbers, validation or not).

A line that nothing reads is skipped (trainers print banners, configs and code around
their metrics). Colour codes (torchtitan colours its lines) are removed first.

- nanoGPT:      `iter 100: loss 2.3456, time 12.34ms, mfu 30.12%`
                `step 250: train loss 2.1, val loss 2.3`
- llm.c main.log (also modded-nanogpt's early records):
                `s:100 trl:3.21 lr:0.0006 norm:0.85`, `s:250 tel:3.30`
- llm.c stdout: `step   10/18865 | loss 7.52 (+nanz)| norm 1.34 (+nanz)| lr 8.6e-06 | ...`
- modded-nanogpt: `step:100/1750 train_loss:4.1 train_time:12ms`, `... val_loss:3.28 ...`
- Megatron-LM:  ` iteration      100/  500000 | ... | learning rate: 1.5E-04 | ...
                lm loss: 7.2E+00 | ... | grad norm: 1.2 | number of nan iterations: 0 |`
                `validation loss at iteration 1000 | lm loss value: 5.4E+00 | ...`
- torchtitan:   `[titan] ... step:  1  loss: 12.25  grad_norm: 3.7  memory: 31.6GiB(33%)
                tps: 1,092  tflops: 50.6  mfu: 16.2%`
- HF Trainer stdout: the dicts it prints, `{'loss': 2.3, 'grad_norm': 1.2, 'learning_rate':
                5e-05, 'epoch': 0.1}` (also glued to a tqdm bar); they carry no step, so a
                training dict counts as the next logged step and an eval dict belongs to the
                step before it.
- Keras:        `Epoch 3/15`, then `1875/1875 [====] - 5s 3ms/step - loss: 0.19 - val_loss: 0.20`
                (the counter on the line above: one row per epoch)
- fairseq:      `| epoch 001  1000 / 331737 loss=9.57 (10.94), ...`, `| epoch 001:  100 / 1975
                loss=..., num_updates=100`, `| epoch 001 | valid on 'valid' subset | loss 9.1 |`
- build-nanogpt: `0 val 10.9531`, `0 train 10.955020` (STEP NAME VALUE)
- key: value:   any other line with a step-like and a loss-like key, `:` or `=` between key
                and number (`ep: 0, batch: 10, lr: 1e-4, loss: 3.21`, `step=5 train_loss=2.3`,
                `Epoch 1, Step 0, Loss: 0.97`); notes say which keys were taken, and a step
                key that restarts (a batch counter within each epoch) numbers the rows.
- generic:      any other line with `step N` / `iter N` and `loss X`.
"""

from __future__ import annotations

import ast
import math
import re

NUM = r"[-+]?(?:\d[\d,]*\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|-?inf)"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _num(text: str) -> float:
    t = text.replace(",", "").lower()
    if t == "nan":
        return math.nan
    if t in ("inf", "+inf"):
        return math.inf
    if t == "-inf":
        return -math.inf
    return float(t)


def _fields(line: str, names: dict[str, str]) -> dict:
    """{our name: number} for every `label<sep>NUMBER` of `names` found in the line."""
    out = {}
    for ours, label in names.items():
        if m := re.search(label + r"\s*(" + NUM + r")", line, re.IGNORECASE):
            out[ours] = _num(m.group(1))
    return out


# (format name, step pattern, {our metric: label pattern before its number})
PATTERNS: list[tuple[str, re.Pattern, dict[str, str]]] = [
    ("Megatron-LM", re.compile(r"validation loss at iteration\s+(\d+)", re.I),
     {"val_loss": r"lm loss value:"}),
    ("Megatron-LM", re.compile(r"\biteration\s+(\d+)\s*/\s*\d+\s*\|", re.I),
     {"loss": r"\blm loss:", "lr": r"learning rate:", "grad_norm": r"grad norm:",
      "step_ms": r"elapsed time per iteration \(ms\):", "nan_iterations":
      r"number of nan iterations:", "skipped_iterations": r"number of skipped iterations:"}),
    ("modded-nanogpt", re.compile(r"\bstep:(\d+)/\d+\s+(?:train_loss|val_loss):", re.I),
     {"loss": r"\btrain_loss:", "val_loss": r"\bval_loss:", "train_time_ms": r"train_time:"}),
    ("llm.c", re.compile(r"^\s*s:(\d+)\s+(?:trl|tel):"),
     {"loss": r"\btrl:", "val_loss": r"\btel:", "lr": r"\blr:", "grad_norm": r"\bnorm:"}),
    ("llm.c", re.compile(r"^\s*step\s+(\d+)/\d+\s*\|\s*(?:train )?loss\s", re.I),
     {"loss": r"\|\s*(?:train )?loss\s", "grad_norm": r"\|\s*norm\s", "lr": r"\|\s*lr\s"}),
    ("torchtitan", re.compile(r"\bstep:\s*(\d+)\s+loss:", re.I),
     {"loss": r"\bloss:", "grad_norm": r"\bgrad_norm:", "mem_gb": r"\bmemory:",
      "tokens_per_s": r"\btps:", "mfu": r"\bmfu:"}),
    ("nanoGPT", re.compile(r"\bstep\s+(\d+):\s*train loss\b", re.I),
     {"loss": r"train loss", "val_loss": r"val loss"}),
    ("nanoGPT", re.compile(r"\biter\s+(\d+):\s*loss\b", re.I),
     {"loss": r"\bloss", "step_ms": r"\btime", "mfu": r"\bmfu"}),
    ("text", re.compile(r"\b(?:iter(?:ation)?|step)\s*[:=]?\s*(\d+)\b.*?\bloss\b", re.I),
     {"loss": r"\bloss\s*[:=]?", "lr": r"\b(?:lr|learning rate)\s*[:=]?",
      "grad_norm": r"\bgrad[_ ]?norm\s*[:=]?"}),
]
# The last pattern is the generic one: a line no named trainer's format matches is tried
# as `key: value` pairs first (they name their keys), then as free text.
NAMED, (GENERIC,) = PATTERNS[:-1], PATTERNS[-1:]


# the dict HF Trainer prints at each logging step; newer versions quote the numbers
_HF_DICT = re.compile(r"\{'[^{}]*\}")
_HF_KEYS = ("loss", "eval_loss", "train_loss", "learning_rate", "grad_norm")


def _hf_dict(line: str) -> dict | None:
    m = _HF_DICT.search(line)
    if not m or not any(f"'{k}'" in m.group(0) for k in _HF_KEYS):
        return None
    # literal_eval knows no nan/inf: mark them, then put the floats back
    marked = re.sub(r"(:\s*)(-?)(nan|inf)\b", lambda g: f"{g[1]}'{g[2]}{g[3]}'", m.group(0))
    try:
        value = ast.literal_eval(marked)
    except (ValueError, SyntaxError):
        return None
    if not isinstance(value, dict):
        return None
    out = {}
    for k, v in value.items():
        if isinstance(v, str):
            try:
                v = float(v)
            except ValueError:
                pass
        out[k] = v
    return out


# -- lines read by their structure ----------------------------------------------------------
#
# Most trainers print a step (or epoch) counter and named numbers, in one of a few shapes:
# `key: value` / `key=value` pairs, `| key value |` cells (fairseq), ` - key: value` after a
# progress bar (Keras), or bare `STEP NAME VALUE` columns (build-nanogpt's log.txt). A line is
# split into its counter, its numbers and whether it reports validation; a counter may sit on
# an earlier line of its own (`Epoch 3/15`, then the epoch's numbers).

_NUMBER = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|[-+]?inf)"
_KV = re.compile(r"(?<![\w./-])([A-Za-z][\w./-]*)\s*[:=]\s*" + _NUMBER + r"(?![\w.])", re.I)
# which key counts as the step, best first; an epoch is the step only when nothing finer is
STEP_KEYS = ("global_step", "step", "steps", "iteration", "iter", "it", "num_updates", "updates",
             "update", "batch", "batch_idx", "epoch", "ep")
EPOCH_KEYS = ("epoch", "ep")
_VAL = re.compile(r"(^|[_/.\-])(val|valid|validation|eval|test|dev)([_/.\-]|$)|^(val|eval|test)",
                  re.I)
# a loss named in two words: `Train Loss: 3.2, Val Loss: 3.4`, `val loss_ce: 0.16`
_SPLIT_LOSS = re.compile(r"(?<![\w./-])((?:train(?:ing)?|val(?:id(?:ation)?)?|eval|test)\s+loss\w*)"
                         r"\s*[:=]\s*" + _NUMBER + r"(?![\w.])", re.I)
# a counter is often printed without a separator: `Epoch 1, Step 0, Loss: 0.97`
_COUNTER = re.compile(r"(?<![\w./-])(" + "|".join(STEP_KEYS) + r")\s+(\d+)(?![\w.])", re.I)
# fairseq's cells: `| loss 6.326 | num_updates 21896 | clip 0% |`
_CELL = re.compile(r"^\s*([A-Za-z][\w./-]*(?: [A-Za-z][\w./-]*)?)\s+" + _NUMBER + r"%?\s*$", re.I)
# a position in a pass over the data: Keras' `1875/1875 [====]`, fairseq's `1000 / 331737`
_FRACTION = re.compile(r"(?<![\w./:])(\d+)\s*/\s*(\d+)(?![\w./:])")
_EPOCH_FRACTION = re.compile(r"\b(?:epoch|ep)\s*[:=]?\s*\d+\s*:?\s+(\d+)\s*/\s*(\d+)(?![\w./:])",
                             re.I)
# the line reports validation: fairseq's `valid on 'valid' subset`, a `| valid |` cell
_VALID_LINE = re.compile(r"\bvalid on ['\"]|\|\s*(valid|validation|eval|test)\s*\|", re.I)
# a line that is only a counter, read for the lines below it: `Epoch 3/15`, `Step 200`
_COUNTER_LINE = re.compile(r"^\W*(" + "|".join(STEP_KEYS) + r")\s*[:=]?\s*(\d+)"
                           r"(?:\s*/\s*\d+)?\s*(?:[|,]\s*[A-Za-z][^:]*:\s*\S.*)?$", re.I)
# build-nanogpt's log.txt: `0 val 10.9531`, `0 train 10.955020`, `0 hella 0.2500`
_COLUMNS = re.compile(r"^\s*(\d+)\s+([A-Za-z][\w/.-]*)\s+" + _NUMBER + r"\s*$", re.I)
# a column name that means the training or the validation loss by itself
_TRAIN_NAMES = ("train", "training", "trn")
_VAL_NAMES = ("val", "valid", "validation", "eval", "dev", "test")


def _loss_role(key: str) -> str | None:
    """'loss' or 'val_loss' for a key that names a loss, else None."""
    low = key.lower()
    if "loss" not in low or "scale" in low or low.startswith("best"):
        return None  # fp16 `loss_scale` is not a loss, fairseq's `best_loss` not this step's
    return "val_loss" if _VAL.search(low) else "loss"


def _pairs(line: str) -> dict:
    """{key: number} for every named number of the line, the first of each key."""
    pairs: dict = {}
    for m in _KV.finditer(line):
        pairs.setdefault(m.group(1), _num(m.group(2)))
    for m in _COUNTER.finditer(line):
        pairs.setdefault(m.group(1), int(m.group(2)))
    if "|" in line:
        for cell in line.split("|"):
            if m := _CELL.match(cell):
                pairs.setdefault(m.group(1), _num(m.group(2)))
    for m in _SPLIT_LOSS.finditer(line):
        pairs.pop(m.group(1).split()[-1], None)  # `Loss` alone was the end of this name
        pairs.setdefault(m.group(1), _num(m.group(2)))
    return pairs


def _losses(pairs: dict, validation: bool) -> dict[str, str]:
    """{'loss' / 'val_loss': the key read for it}. On a validation line every loss is the
    validation loss; the plain names win over others (`loss` over `nll_loss`)."""
    losses: dict[str, str] = {}
    for k in pairs:
        role = _loss_role(k)
        if role and validation:
            role = "val_loss"
        plain = re.sub(r"\s+", "_", k.lower()) in ("loss", "val_loss", "train_loss")
        if role and (role not in losses or plain):
            losses[role] = k
    return losses


def _step_key(pairs: dict) -> str | None:
    lowered = {k.lower(): k for k in pairs}
    return next((lowered[k] for k in STEP_KEYS if k in lowered), None)


def _kv_row(line: str, carried: tuple[str, int] | None) -> dict | None:
    """A row for a line with a loss-like key: {'row', 'key' and 'value' of its counter,
    'fraction' (its position k/N in an epoch, or None), 'carried' (the counter is from a line
    above), 'losses'}; its step is set later (`_place`), once the log's epoch lengths are known.
    The step comes from the line's own counter, else from `carried` (a counter line above it),
    else from a progress fraction alone (`3/110 [====]`)."""
    pairs = _pairs(line)
    validation = bool(_VALID_LINE.search(line))
    losses = _losses(pairs, validation)
    if not losses:
        return None
    step_key = _step_key(pairs)
    from_above = step_key is None and carried is not None
    # the position within an epoch: right after the line's own epoch (fairseq's `epoch 001:
    # 450 / 1891`), or anywhere on a line under an epoch printed above it (Keras' bar); a
    # validation pass counts its own batches, and a bar elsewhere on the line may count epochs
    m = (_EPOCH_FRACTION.search(line) if step_key and step_key.lower() in EPOCH_KEYS
         else _FRACTION.search(line) if step_key is None else None)
    fraction = None
    if m and int(m.group(1)) <= int(m.group(2)) and not validation:
        fraction = (int(m.group(1)), int(m.group(2)))
    if step_key is None and carried is None and fraction is None:
        return None
    taken = dict.fromkeys((k for k in (step_key,) if k), "step")
    taken.update({k: ours for ours, k in losses.items()})
    # the keys read as step and loss go last: a name that the reader maps onto the same
    # metric (train_loss beside loss) must not overwrite them
    row = {k: v for k, v in pairs.items() if k not in taken}
    row.update((ours, pairs[k]) for k, ours in taken.items() if ours != "step")
    key, value = (step_key, pairs[step_key]) if step_key else carried if from_above else (
        "progress", 0)
    return {"row": row, "key": key, "value": value, "fraction": fraction,
            "carried": from_above, "losses": losses}


def _counter_line(line: str) -> tuple[str, int] | None:
    """(key, value) of a line that holds only a counter (`Epoch 3/15`, `Epoch: 01 | Time: 0m
    14s`): the numbers on the lines below it belong to it. Not `Epoch 00008: early stopping`,
    a message about an epoch."""
    m = _COUNTER_LINE.match(line)
    if m is None or _losses(_pairs(line), False):
        return None
    return m.group(1), int(m.group(2))


def _column_row(line: str) -> tuple[dict, str] | None:
    """({step, name: value}, name) for a `STEP NAME VALUE` line (build-nanogpt's log.txt);
    a name that means the training or the validation loss becomes it."""
    m = _COLUMNS.match(line)
    if m is None:
        return None
    name = m.group(2)
    low = name.lower()
    ours = ("loss" if low in _TRAIN_NAMES else "val_loss" if low in _VAL_NAMES
            else _loss_role(name) or name)
    return {"step": int(m.group(1)), ours: _num(m.group(3))}, name


def _place(found: list[dict]) -> list[dict]:
    """Give each row its step. An epoch with a fraction is (epoch - 1) * length + position:
    the batches of earlier epochs come first. An epoch without one (fairseq's end-of-epoch
    summary and validation) is the end of that epoch when the log's epochs have a length,
    else the epoch number. Rows of one counter printed on a line above them are merged (Keras
    prints a running mean of the epoch on each progress line: its last line is the epoch's),
    and so are rows placed at the same step."""
    length = next((f["fraction"][1] for f in found if f["fraction"] and f["key"].lower()
                   in EPOCH_KEYS), None)
    rows: list[dict] = []
    for f in _same_pass(found, length):
        value, epoch = f["value"], f["key"].lower() in EPOCH_KEYS
        if epoch and f["fraction"]:
            step = (value - 1) * f["fraction"][1] + f["fraction"][0]
        elif epoch and length:
            step = value * length
        elif f["key"] == "progress":
            step = f["fraction"][0]
        else:
            step = value
        row = {**f["row"], "step": int(step) if float(step).is_integer() else step}
        if rows and (rows[-1]["step"] == row["step"] or f["carried"] and rows[-1].get(
                "_counter") == (f["key"], value)):
            rows[-1].update(row)
        else:
            rows.append(row)
        if f["carried"]:
            rows[-1]["_counter"] = (f["key"], value)
    for row in rows:
        row.pop("_counter", None)
    return rows


def _same_pass(found: list[dict], length: int | None) -> list[dict]:
    """Leave out progress lines under an epoch printed above them whose bar has another
    length than the epochs' (Keras' `model.evaluate` after the last epoch: `313/313` after
    `704/704`): they report another pass over other data, not the epoch's training."""
    if length is None:
        return found
    return [f for f in found if not (f["carried"] and f["fraction"]
                                     and f["fraction"][1] != length)]


def _first_match(line: str, patterns) -> tuple[str, re.Match, dict[str, str]] | None:
    """(format, step match, field patterns) of the first pattern whose step regex matches."""
    for fmt, step_re, names in patterns:
        if m := step_re.search(line):
            return fmt, m, names
    return None


def text_rows(text: str) -> tuple[list[dict], str | None, list[str]]:
    """(rows, name of the format that matched most lines, notes on how it was read)."""
    rows: list[dict] = []
    counts: dict[str, int] = {}
    hf_step = 0
    found: list[dict] = []  # structural rows, placed at the end
    columns: dict[str, str] = {}  # build-nanogpt column name -> our name
    carried: tuple[str, int] | None = None
    for raw in text.splitlines():
        line = _ANSI.sub("", raw).replace("\b", "")  # Keras redraws its bar with backspaces
        if (d := _hf_dict(line)) is not None:
            if "train_runtime" in d:
                continue  # the end-of-run summary: train_loss is the run's average
            if "loss" in d:
                hf_step += 1
            rows.append({"step": hf_step, **d})
            counts["HF Trainer stdout"] = counts.get("HF Trainer stdout", 0) + 1
            continue
        hit = _first_match(line, NAMED)
        if hit is None and (kv := _kv_row(line, carried)) is not None:
            found.append(kv)
            counts["key: value"] = counts.get("key: value", 0) + 1
            continue
        if hit is None and (col := _column_row(line)) is not None:
            rows.append(col[0])
            columns[col[1]] = next(k for k in col[0] if k != "step")
            counts["STEP NAME VALUE"] = counts.get("STEP NAME VALUE", 0) + 1
            continue
        if hit is None and (counter := _counter_line(line)) is not None:
            carried = counter
            continue
        hit = hit or _first_match(line, [GENERIC])
        if hit is not None:
            fmt, m, names = hit
            row = {"step": int(m.group(1)), **_fields(line, names)}
            if len(row) > 1:
                rows.append(row)
                counts[fmt] = counts.get(fmt, 0) + 1
    fmt = max(counts, key=counts.__getitem__) if counts else None
    notes = []
    if found:
        kv_rows = _place(found)
        notes += _kv_notes(kv_rows, found)
        rows += kv_rows
    if columns and any(v in ("loss", "val_loss") for v in columns.values()):
        taken = ", ".join(f"{ours} from '{name}'" for name, ours in columns.items()
                          if ours in ("loss", "val_loss"))
        notes.append(f"STEP NAME VALUE lines: step from the first column, {taken}")
    return rows, fmt, notes


def _kv_notes(rows: list[dict], found: list[dict]) -> list[str]:
    """Say which keys were read as step and loss; number the rows when the step restarts (a
    batch counter within each epoch, or runs printed one after another)."""
    sigs: dict[tuple, int] = {}
    for f in found:
        sig = (f["key"], f["carried"], tuple(sorted(f["losses"].items())))
        sigs[sig] = sigs.get(sig, 0) + 1
    (step_key, carried, _), _ = max(sigs.items(), key=lambda kv: kv[1])
    losses = {ours: key for f in found for ours, key in f["losses"].items()}
    taken = ", ".join(f"{ours} from '{key}'" for ours, key in sorted(losses.items()))
    where = ("the progress position (`N/M`)" if step_key == "progress" else
             f"'{step_key}' on the line above" if carried else f"'{step_key}'")
    notes = [f"key: value lines: step from {where}, {taken}"]
    if any(f["fraction"] and f["key"].lower() in EPOCH_KEYS for f in found):
        notes.append("epochs counted in the units of their progress bar (batches; samples in "
                     "old Keras): (epoch - 1) x its length + the position within it")
    other = [f for f in found if f not in _same_pass(found, next(
        (f["fraction"][1] for f in found if f["fraction"] and f["key"].lower() in EPOCH_KEYS),
        None))]
    if other:
        notes.append(f"{len(other)} progress line(s) with another length than the epochs' "
                     f"(first {other[0]['fraction'][0]}/{other[0]['fraction'][1]}: an "
                     "evaluation pass) left out")
    if any(f["carried"] for f in found):
        notes.append(f"one row per '{step_key}': the last line under each (progress lines "
                     "are running means of the epoch)")
    steps = [r["step"] for r in rows]
    if any(b < a for a, b in zip(steps, steps[1:], strict=False)):
        for i, row in enumerate(rows):
            row["step"] = i
        notes.append(f"'{step_key}' restarts (a counter within each epoch, or runs one after "
                     "another): rows numbered 0, 1, 2, ... in the order logged")
    return notes
