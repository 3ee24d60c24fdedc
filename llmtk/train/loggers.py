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

from llmtk.errors import ConfigError
from llmtk.io.atomic import write_file_atomically

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
            raise ConfigError("log_to", f"{name!r} is not one of {', '.join(BACKENDS)}")
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
    def __init__(self, out: str, config: dict, start_step: int = 0):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ConfigError("log_to", "tensorboard needs the tensorboard package "
                              "(pip install 'llmtk[logging]')") from None
        # On resume, purge_step hides the earlier process's events after the checkpoint
        # (they describe steps being redone), as resume truncates metrics.jsonl.
        self.writer = SummaryWriter(log_dir=os.path.join(out, "tensorboard"),
                                    purge_step=start_step + 1 if start_step else None)
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
    def __init__(self, out: str, config: dict, start_step: int = 0):
        try:
            import wandb
        except ImportError:
            raise ConfigError("log_to", "wandb needs the wandb package "
                              "(pip install 'llmtk[logging]')") from None
        mode = os.environ.get("WANDB_MODE") or "offline"
        # One W&B run per run directory: a resumed or requeued process continues it.
        id_file = os.path.join(out, "wandb", "llmtk-run-id")
        os.makedirs(os.path.dirname(id_file), exist_ok=True)
        run_id = None
        if os.path.exists(id_file):
            with open(id_file) as f:
                run_id = f.read().strip() or None
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "llmtk"), id=run_id, resume="allow",
            name=os.path.basename(os.path.abspath(out)), dir=out, mode=mode,
            config=config, settings=wandb.Settings(console="off", silent=True))
        if run_id is None:
            write_file_atomically(id_file, (self.run.id + "\n").encode())
        self.last_step = start_step

    def log(self, row: dict) -> None:
        step = int(row.get("step", 0))
        event = row.get("event")
        if event:
            data = {f"events/{event}/{k}": v for k, v in _numbers(row).items()}
            data[f"events/{event}"] = _as_text(row)
        else:
            data = {k: v for k, v in _numbers(row).items()}
        # W&B's step must not go back (a rollback redoes steps): such rows are logged
        # without a step and keep `step` as a field.
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

    def __init__(self, names: list[str], out: str, config: dict, start_step: int = 0):
        self.backends = []
        try:
            for name in names:
                backend = TensorBoard if name == "tensorboard" else WandB
                self.backends.append(backend(out, config, start_step))
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


def open_mirrors(value, out: str, config: dict, start_step: int = 0) -> Mirrors | None:
    """The --log-to backends for a run directory; start_step > 0 when resuming."""
    names = parse_log_to(value)
    return Mirrors(names, out, config, start_step) if names else None
