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


_HF_DICT = re.compile(r"\{'(?:loss|eval_loss|train_loss|learning_rate)'[^{}]*\}")


def _hf_dict(line: str) -> dict | None:
    m = _HF_DICT.search(line)
    if not m:
        return None
    # literal_eval knows no nan/inf: mark them, then put the floats back
    marked = re.sub(r"(:\s*)(-?)(nan|inf)\b", lambda g: f"{g[1]}'{g[2]}{g[3]}'", m.group(0))
    try:
        value = ast.literal_eval(marked)
    except (ValueError, SyntaxError):
        return None
    if not isinstance(value, dict):
        return None
    return {k: float(v) if v in ("nan", "inf", "-inf") else v for k, v in value.items()}


def text_rows(text: str) -> tuple[list[dict], str | None]:
    """(rows, name of the format that matched most lines) from a text log."""
    rows: list[dict] = []
    counts: dict[str, int] = {}
    hf_step = 0
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
        for fmt, step_re, names in PATTERNS:
            if m := step_re.search(line):
                row = {"step": int(m.group(1)), **_fields(line, names)}
                if len(row) > 1:
                    rows.append(row)
                    counts[fmt] = counts.get(fmt, 0) + 1
                break
    fmt = max(counts, key=counts.__getitem__) if counts else None
    return rows, fmt
