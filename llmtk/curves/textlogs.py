"""Rows from the plain-text logs that trainers print, one pattern per trainer.

Each pattern finds the step and the numbers of one kind of line; a line that no
pattern knows is skipped (trainers print banners, configs and code around
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


# -- generic `key: value` / `key=value` lines ------------------------------------------------

_KV = re.compile(r"(?<![\w./-])([A-Za-z][\w./-]*)\s*[:=]\s*"
                 r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|[-+]?inf)(?![\w.])", re.I)
# which key counts as the step, best first; an epoch is the step only when nothing finer is
STEP_KEYS = ("global_step", "step", "steps", "iteration", "iter", "it", "num_updates", "updates",
             "update", "batch", "batch_idx", "epoch", "ep")
_VAL = re.compile(r"(^|[_/.\-])(val|valid|validation|eval|test|dev)([_/.\-]|$)|^(val|eval|test)",
                  re.I)


def _loss_role(key: str) -> str | None:
    """'loss' or 'val_loss' for a key that names a loss, else None."""
    low = key.lower()
    if "loss" not in low or "scale" in low:  # fp16 `loss_scale` is not a loss
        return None
    return "val_loss" if _VAL.search(low) else "loss"


# a loss named in two words: `Train Loss: 3.2, Val Loss: 3.4`
_SPLIT_LOSS = re.compile(r"(?<![\w./-])((?:train(?:ing)?|val(?:id(?:ation)?)?|eval|test)\s+loss)"
                         r"\s*[:=]\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|[-+]?inf)"
                         r"(?![\w.])", re.I)
# a counter is often printed without a separator: `Epoch 1, Step 0, Loss: 0.97`
_COUNTER = re.compile(r"(?<![\w./-])(" + "|".join(STEP_KEYS) + r")\s+(\d+)(?![\w.])", re.I)


def _kv_row(line: str) -> tuple[dict, str, dict[str, str]] | None:
    """(row, the key read as step, {our name: key read for it}) for a line with a step-like and
    a loss-like key, else None."""
    pairs = {}
    for m in _KV.finditer(line):
        pairs.setdefault(m.group(1), _num(m.group(2)))
    for m in _COUNTER.finditer(line):
        pairs.setdefault(m.group(1), int(m.group(2)))
    for m in _SPLIT_LOSS.finditer(line):
        pairs.pop(m.group(1).split()[-1], None)  # `Loss` alone was the end of this name
        pairs.setdefault(m.group(1), _num(m.group(2)))
    lowered = {k.lower(): k for k in pairs}
    step_key = next((lowered[k] for k in STEP_KEYS if k in lowered), None)
    losses: dict[str, str] = {}
    for k in pairs:
        role = _loss_role(k)
        if role and (role not in losses or k.lower() in ("loss", "val_loss", "train_loss")):
            losses[role] = k
    if step_key is None or not losses:
        return None
    if float(pairs[step_key]).is_integer():
        pairs[step_key] = int(pairs[step_key])
    taken = {**{k: r for r, k in losses.items()}, step_key: "step"}
    # the keys read as step and loss go last: a name that the reader maps onto the same
    # metric (train_loss beside loss) must not overwrite them
    row = {k: v for k, v in pairs.items() if k not in taken}
    row.update((ours, pairs[k]) for k, ours in taken.items())
    return row, step_key, losses


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
    kv_keys: dict[tuple[str, tuple], int] = {}
    kv_rows: list[dict] = []
    for raw in text.splitlines():
        line = _ANSI.sub("", raw)
        if (d := _hf_dict(line)) is not None:
            if "train_runtime" in d:
                continue  # the end-of-run summary: train_loss is the run's average
            if "loss" in d:
                hf_step += 1
            rows.append({"step": hf_step, **d})
            counts["HF Trainer stdout"] = counts.get("HF Trainer stdout", 0) + 1
            continue
        hit = _first_match(line, NAMED)
        if hit is None and (kv := _kv_row(line)) is not None:
            row, step_key, losses = kv
            rows.append(row)
            kv_rows.append(row)
            sig = (step_key, tuple(sorted(losses.items())))
            kv_keys[sig] = kv_keys.get(sig, 0) + 1
            counts["key: value"] = counts.get("key: value", 0) + 1
            continue
        hit = hit or _first_match(line, [GENERIC])
        if hit is not None:
            fmt, m, names = hit
            row = {"step": int(m.group(1)), **_fields(line, names)}
            if len(row) > 1:
                rows.append(row)
                counts[fmt] = counts.get(fmt, 0) + 1
    fmt = max(counts, key=counts.__getitem__) if counts else None
    notes = _kv_notes(kv_rows, kv_keys) if kv_rows else []
    return rows, fmt, notes


def _kv_notes(rows: list[dict], keys: dict[tuple[str, tuple], int]) -> list[str]:
    """Say which keys were read as step and loss; number the rows when the step key restarts
    (a batch counter within each epoch)."""
    (step_key, losses), _ = max(keys.items(), key=lambda kv: kv[1])
    taken = ", ".join(f"{ours} from '{key}'" for ours, key in losses)
    notes = [f"key: value lines: step from '{step_key}', {taken}"]
    steps = [r["step"] for r in rows]
    if any(b < a for a, b in zip(steps, steps[1:], strict=False)):
        for i, row in enumerate(rows):
            row["step"] = i
        notes.append(f"'{step_key}' restarts (a counter within each epoch): rows numbered "
                     "0, 1, 2, ... in the order logged")
    return notes
