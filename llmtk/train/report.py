"""What `llmtk train` prints for people on stderr: the start lines and the step line.

Pure functions of numbers (no torch, no I/O), so their widths are tested directly. The
step line fits an 80-column terminal: step, loss, val and elapsed/ETA always show; lr,
tokens/s, gradient norm, MFU, memory and ms/step while the line still fits.
Every number is in metrics.jsonl as well.
"""

from __future__ import annotations

from llmtk.units import si

WIDTH = 80


def count(x: float) -> str:
    """12345 -> '12.3k', 3.4e8 -> '340M' (three significant digits, no space)."""
    return si(x).replace(" ", "")


def duration(seconds: float) -> str:
    """'0:07', '12:03', '1h02m', '3d04h': at most 6 columns, to the precision that matters
    at that length (seconds for a short run, not for a week-long one)."""
    s = max(0, int(round(seconds)))
    if s >= 86400:
        return f"{s // 86400}d{s % 86400 // 3600:02d}h"
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}:{s % 60:02d}"


def rate(lr: float) -> str:
    """3e-4 -> '3.0e-4' (two significant digits follow warmup and decay)."""
    mantissa, exp = f"{lr:.1e}".split("e")
    return f"{mantissa}e{int(exp)}"


def step_line(step: int, steps: int, loss: float, lr: float, tokens_per_s: float,
              elapsed_s: float, eta_s: float | None, *, val_loss: float | None = None,
              grad_norm: float | None = None, mfu: float | None = None,
              mem_gb: float | None = None, step_ms: float | None = None,
              width: int = WIDTH) -> str:
    """One progress row of at most `width` columns. Step, loss, val and the times always
    show (under 80 columns for any run shorter than 10^8 steps); the others join in order
    of importance while the row still fits, and stand in the order of DISPLAY. Fields are
    separated by two spaces, as torchtitan does: a " | " costs a field on a GPU row."""
    core = {"step": f"step {step}/{steps}", "loss": f"loss {loss:.4f}",
            "val": f"val {val_loss:.4f}" if val_loss is not None else None,
            "time": duration(elapsed_s) + (f" eta {duration(eta_s)}" if eta_s is not None
                                           else "")}
    optional = {"lr": f"lr {rate(lr)}", "tok/s": f"{count(tokens_per_s)} tok/s",
                "mfu": f"mfu {mfu:.1%}" if mfu is not None else None,
                "gnorm": f"gnorm {grad_norm:.3g}" if grad_norm is not None else None,
                "mem": f"{mem_gb:.1f}GB" if mem_gb is not None else None,
                "ms": f"{step_ms:.0f}ms/step" if step_ms is not None else None}
    shown = {k: v for k, v in core.items() if v is not None}

    def line(fields: dict) -> str:
        return "  ".join(fields[k] for k in DISPLAY if k in fields)

    for key, text in optional.items():  # by importance; the first that does not fit ends it
        if text is None:
            continue
        if len(line({**shown, key: text})) > width:
            break
        shown[key] = text
    return line(shown)


DISPLAY = ("step", "loss", "val", "lr", "gnorm", "tok/s", "mfu", "mem", "ms", "time")


def start_lines(*, model: str, shape: str, params: int, steps: int, batch: int, procs: int,
                grad_accum: int, seq_len: int, lr: float, schedule: str, warmup: int,
                device: str, dtype: str, compiled: bool, threads: int,
                config_path: str) -> list[str]:
    """The two lines a run starts with; the full resolved configuration is in config_path."""
    per_step = batch * procs * grad_accum * seq_len
    first = (f"llmtk train: {model} {shape}, {count(params)} params; {steps:,} steps x "
             f"{count(per_step)} tokens = {count(per_step * steps)} tokens")
    second = (f"  batch {batch}x{procs}x{grad_accum} of {seq_len}, lr {lr:g} {schedule} "
              f"(warmup {warmup}), {device} {dtype}{' compiled' if compiled else ''}, "
              f"{threads} thread{'s' if threads != 1 else ''}; config: {config_path}")
    return [first, second]
