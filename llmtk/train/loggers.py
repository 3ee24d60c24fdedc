"""`train --log-to tensorboard,wandb`: every metrics.jsonl row mirrored where people look.

metrics.jsonl stays the source of truth (plot-loss and diagnose read it; resume
truncates it); these mirrors are written after each row and never read back.

- TensorBoard (`torch.utils.tensorboard`, needs the `tensorboard` package): event files
  in OUT/tensorboard/. Numeric fields of a training row are scalars `train/<field>`
  (`val_loss` as `val/loss`), at the row's step and wall time; an event row is text
  `events/<event>` holding the row as JSON, plus its numeric fields as scalars
  `events/<event>/<field>`; the resolved run config is text `config`.
- W&B (`wandb`): a run in OUT/wandb/, offline unless WANDB_MODE says otherwise (llmtk
  never goes online by itself; `wandb sync OUT/wandb/offline-run-*` uploads it), with
  the run config as its config, training fields as history at the row's step, events as
  `events/<event>` (the row as JSON text) and their numeric fields.

Both are optional extras (`pip install llmtk[logging]`), imported only when asked for.
"""

from __future__ import annotations

import json
import math
import os

from llmtk.errors import UsageError

BACKENDS = ("tensorboard", "wandb")
SKIP = ("step", "time", "event")  # the x axis and the wall clock are not metrics


def parse_log_to(value: str | list[str] | None) -> list[str]:
    """"tensorboard,wandb" (or a TOML list) -> ["tensorboard", "wandb"]; "" or none -> []."""
    if value is None:
        return []
    items = value if isinstance(value, list) else str(value).split(",")
    names = [s.strip().lower() for s in items if s.strip() and s.strip().lower() != "none"]
    for name in names:
        if name not in BACKENDS:
            raise UsageError(f"--log-to: {name!r} is not one of {', '.join(BACKENDS)}")
    return list(dict.fromkeys(names))


def _numbers(row: dict) -> dict[str, float]:
    """The numeric fields of a row (bools are not metrics; NaN/Inf are kept: they matter)."""
    out = {}
    for k, v in row.items():
        if k in SKIP or isinstance(v, bool):
            continue
        if isinstance(v, int | float):
            out[k] = float(v)
        elif v in ("NaN", "Infinity", "-Infinity"):
            out[k] = float(v.lower().replace("infinity", "inf"))
    return out


def _as_text(row: dict) -> str:
    def default(v):
        return str(v)

    clean = {k: (v if not (isinstance(v, float) and not math.isfinite(v)) else str(v))
             for k, v in row.items()}
    return json.dumps(clean, default=default, sort_keys=False)


class TensorBoard:
    def __init__(self, out: str, config: dict):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise UsageError("--log-to tensorboard needs the tensorboard package "
                             "(pip install 'llmtk[logging]')") from None
        self.writer = SummaryWriter(log_dir=os.path.join(out, "tensorboard"))
        self.writer.add_text("config", "```\n" + json.dumps(config, indent=1, sort_keys=True,
                                                            default=str) + "\n```", 0)

    def log(self, row: dict) -> None:
        step, wall = int(row.get("step", 0)), row.get("time")
        event = row.get("event")
        for k, v in _numbers(row).items():
            if event:
                tag = f"events/{event}/{k}"
            else:
                tag = "val/loss" if k == "val_loss" else f"train/{k}"
            self.writer.add_scalar(tag, v, step, walltime=wall)
        if event:
            self.writer.add_text(f"events/{event}", _as_text(row), step, walltime=wall)

    def flush(self) -> None:
        self.writer.flush()

    def close(self, ok: bool = True) -> None:
        self.writer.close()


class WandB:
    def __init__(self, out: str, config: dict):
        try:
            import wandb
        except ImportError:
            raise UsageError("--log-to wandb needs the wandb package "
                             "(pip install 'llmtk[logging]')") from None
        self.wandb = wandb
        mode = os.environ.get("WANDB_MODE") or "offline"
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "llmtk"),
            name=os.path.basename(os.path.abspath(out)), dir=out, mode=mode,
            config=config, settings=wandb.Settings(console="off", silent=True))
        self.last_step = -1

    def log(self, row: dict) -> None:
        step = int(row.get("step", 0))
        event = row.get("event")
        if event:
            data = {f"events/{event}/{k}": v for k, v in _numbers(row).items()}
            data[f"events/{event}"] = _as_text(row)
        else:
            data = {k: v for k, v in _numbers(row).items()}
        # W&B's step must not go back (a resume or rollback redoes steps): then the rows
        # are logged without a step and keep `step` as a field.
        if step >= self.last_step:
            self.run.log(data, step=step)
            self.last_step = step
        else:
            self.run.log({**data, "step": step})

    def flush(self) -> None:
        pass

    def close(self, ok: bool = True) -> None:
        self.run.finish(exit_code=0 if ok else 1)


class Mirrors:
    """The chosen backends behind one `log(row)`; `close()` flushes and finishes them."""

    def __init__(self, names: list[str], out: str, config: dict):
        self.backends = []
        try:
            for name in names:
                self.backends.append(TensorBoard(out, config) if name == "tensorboard"
                                     else WandB(out, config))
        except BaseException:
            self.close(ok=False)
            raise

    def log(self, row: dict) -> None:
        for b in self.backends:
            b.log(row)

    def close(self, ok: bool = True) -> None:
        for b in self.backends:
            b.close(ok)
        self.backends = []


def open_mirrors(value, out: str, config: dict) -> Mirrors | None:
    names = parse_log_to(value)
    return Mirrors(names, out, config) if names else None
