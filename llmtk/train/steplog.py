"""What a run tells: rank 0's metrics log (OUT/metrics.jsonl, mirrored to --log-to
backends), its event rows, the step line on stderr and the messages, with the throughput
of the training work since the last row (evaluation, sampling and checkpoints excluded).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import sys
import time
from dataclasses import dataclass, field

from llmtk.compute.flops import mfu as model_mfu
from llmtk.train.steptime import Phases, gather_row


@dataclass(frozen=True)
class LogSpec:
    """The configuration's logging section as the start lines and the --log-to backends
    read it (config.section(LogSpec, cfg))."""

    model: str
    init_from: str | None
    steps: int
    batch_size: int
    grad_accum: int
    lr: float
    schedule: str
    warmup: int
    log_to: str


@dataclass
class Meter:
    """Throughput of the training work since the last row (evaluation, sampling and
    checkpoints are excluded)."""

    t: float = field(default_factory=time.perf_counter)
    tokens: int = 0
    steps: int = 0
    excluded: float = 0.0

    @contextlib.contextmanager
    def exclude(self):
        t0 = time.perf_counter()
        yield
        self.excluded += time.perf_counter() - t0

    def elapsed(self) -> float:
        return max(time.perf_counter() - self.t - self.excluded, 1e-9)


def _mem_gb(device: str) -> float:
    """Peak memory of this process: CUDA allocator peak on GPU, peak RSS on CPU."""
    import torch

    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 1e9
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # Linux: KiB


class StepLog:
    """Rank 0 writes (`metrics` and `mirrors` are None elsewhere); every rank measures
    (a row's memory is the largest over ranks). `steps`: the run's; `quiet`: -q."""

    def __init__(self, out: str, dist, steps: int, quiet: bool, mcfg, bf16: bool):
        import torch

        from llmtk.compute.flops import flops_per_token_for_config
        from llmtk.compute.hardware import device_peak_flops

        self.out, self.dist, self.steps, self.quiet, self.bf16 = out, dist, steps, quiet, bf16
        self.metrics = None                   # rank 0's MetricsWriter, opened by open()
        self.mirrors = None                   # --log-to backends (rank 0)
        self.meter = Meter()
        self.phases = Phases()                # every rank's phase and time (steptime.py)
        self.load_s = 0.0                     # seconds the resumed checkpoint took to load
        self.t_start = time.perf_counter()    # the step line's elapsed time (this process)
        self.row_parts: list = []             # () -> dict, more row entries (MoE: optim.py)
        # MFU: `llmtk estimate`'s formula (causal attention, model FLOPs only) and the peak
        # of the dtype the matmuls run in.
        self.flops_per_token = flops_per_token_for_config(mcfg, causal=True)
        self.peak = (device_peak_flops(torch.cuda.get_device_name(dist.local_rank),
                                       "bf16-mixed" if bf16 else "fp32")
                     if dist.cuda else None)

    def say(self, msg: str) -> None:
        if self.dist.rank == 0 and not self.quiet:
            print(msg, file=sys.stderr, flush=True)

    def event(self, name: str, step: int, **fields) -> None:
        if self.metrics is not None:
            self.metrics.write({"step": step, "event": name, **fields, "time": time.time()})

    def open_run(self, step: int, resumed: str | None, cfg, plan, facts: dict,
                 validates: bool, busy: str | None) -> None:
        """Rank 0: `start` with the run's resolved configuration (the config, the run plan
        and `facts`: params, world_size, device, threads, tokenizer, data, cache), the start
        lines and warnings. validates: there is validation data; busy: a note on threads.
        The whole `cfg` is what config.json records."""
        from llmtk.train.config import section
        from llmtk.train.optim import OptimSpec, warmup_warning

        resolved = {"train": cfg.to_dict(), "model": plan.mcfg.to_dict(),
                    "params": facts["params"], "world_size": facts["world_size"],
                    "parallel": plan.parallel, "layout": plan.layout.to_dict(),
                    "compiled": plan.compiled, "checkpoint_format": plan.ckpt_format,
                    **{k: facts[k] for k in ("device", "threads", "tokenizer", "data",
                                             "cache")}}
        warnings = [warmup_warning(section(OptimSpec, cfg))] if cfg.warmup >= cfg.steps else []
        if cfg.eval_every and not validates and not cfg.eval_tasks:
            warnings.append(f"warning: --eval-every {cfg.eval_every} evaluates nothing: there "
                            f"is no validation data (give --val-data, or hold some of --data "
                            f"out with --val-fraction) and no --eval-tasks")
        self.start(step, resumed, resolved, section(LogSpec, cfg), facts["threads"],
                   [*warnings, busy])

    def start(self, step: int, resumed: str | None, resolved: dict, spec: LogSpec,
              threads: int, notes: list[str | None]) -> None:
        """Rank 0, as the run starts at `step` (resumed from checkpoint `resumed`, or
        None): open OUT/metrics.jsonl (cut after the checkpoint's step on a resume, else
        with an older log set aside), write config.json (`resolved`), say the start lines
        and the `notes` (None: nothing to say), open the --log-to backends."""
        from llmtk.io.atomic import set_aside
        from llmtk.io.metrics import MetricsWriter, truncate_after
        from llmtk.train.loggers import open_mirrors

        path = os.path.join(self.out, "metrics.jsonl")
        if resumed is not None:
            truncate_after(path, step)
        elif os.path.exists(path):
            set_aside(path, "old", numbered=False)
        self.metrics = MetricsWriter(path)
        self._write_config(resolved, spec, threads)
        for note in notes:
            if note:
                self.say(note)
        self.mirrors = open_mirrors(spec.log_to, self.out, resolved, step)
        self.metrics.mirror = self.mirrors.log if self.mirrors else None
        if resumed is not None:
            self.event("resume", step=step, path=os.path.relpath(resumed, self.out),
                       seconds=round(self.load_s, 3))
            self.say(f"resumed from {resumed} at step {step}")

    def _write_config(self, resolved: dict, spec: LogSpec, threads: int) -> None:
        """OUT/config.json (the `resolved` configuration) and the start lines."""
        from llmtk.io.atomic import atomic_file
        from llmtk.train.report import start_lines

        path = os.path.join(self.out, "config.json")
        with atomic_file(path) as f:
            f.write((json.dumps(resolved, indent=1, sort_keys=True) + "\n").encode())
        m = resolved["model"]
        for line in start_lines(
                model=spec.model if not spec.init_from else spec.init_from,
                shape=f"{m['n_layer']}x{m['d_model']}", params=resolved["params"],
                steps=spec.steps, batch=spec.batch_size, procs=self.dist.world,
                grad_accum=spec.grad_accum, seq_len=m["seq_len"], lr=spec.lr,
                schedule=spec.schedule, warmup=spec.warmup, device=self.dist.device,
                dtype="bf16" if self.bf16 else "fp32", compiled=resolved["compiled"],
                threads=threads, config_path=path):
            self.say(line)

    def cut_after(self, step: int) -> None:
        """Drop the rows after `step` (a rollback redoes those steps)."""
        from llmtk.io.metrics import MetricsWriter, truncate_after

        if self.metrics is not None:
            self.metrics.close()
            truncate_after(self.metrics.path, step)
            self.metrics = MetricsWriter(self.metrics.path, mirror=self.metrics.mirror)
        self.meter = Meter()
        self.phases.reset()

    def restart_clock(self) -> None:
        self.meter = Meter()
        self.phases.reset()
        self.t_start = time.perf_counter()

    def count(self, tokens: int) -> None:
        self.meter.tokens += tokens
        self.meter.steps += 1

    def row(self, st, last_row, val_loss: float | None, extra: dict, train_data) -> None:
        """The step's row (`last_row`: the settled (step, [loss, norm, not_finite], lr)),
        and the step line; every rank measures, rank 0 writes."""
        step, (loss, grad_norm, not_finite), lr = last_row
        elapsed = self.meter.elapsed()
        ranks = gather_row(self.dist, self.phases, _mem_gb(self.dist.device))  # collective
        mem, data_s = max(ranks["mem_gb"]), ranks["data_s"][self.dist.rank]
        tps = self.meter.tokens / elapsed
        # tps: the global batch's tokens (each once, whatever tp/pp split them), per second
        mfu = model_mfu(self.flops_per_token, tps, self.dist.world, self.peak) \
            if self.peak else None
        meter, self.meter = self.meter, Meter()
        if self.metrics is None or not_finite or step != st.step:
            return  # a skipped step has its `nan` event instead of a row
        row = {"step": step, "loss": loss, "lr": lr, "grad_norm": grad_norm,
               "tokens": st.tokens, "tokens_per_s": round(tps, 1),
               "mfu": None if mfu is None else round(mfu, 4), "mem_gb": round(mem, 3),
               "data_s": round(data_s * meter.steps, 4),
               "step_s": round(elapsed / max(1, meter.steps), 4), "time": time.time()}
        if val_loss is not None:
            row["val_loss"] = val_loss
        row.update(extra)
        for part in self.row_parts:  # the experts' load (llmtk.train.model.moe.Balancer.row)
            row.update(part())
        if hasattr(train_data, "source_tokens"):  # a blend: tokens/NAME
            row.update(train_data.source_tokens(st.position))
        if hasattr(train_data, "trained_tokens"):  # SFT: the loss-carrying tokens
            row["trained_tokens"] = train_data.trained_tokens(st.position)
        row["ranks"] = {k: [_round(v) for v in vs] for k, vs in ranks.items()}
        self.metrics.write(row)
        if not self.quiet:
            from llmtk.io.console import stderr_console
            from llmtk.train.report import step_line

            wall_per_step = (time.perf_counter() - meter.t) / max(1, meter.steps)  # all of it
            stderr_console().print(step_line(
                step, self.steps, loss, lr, tps, time.perf_counter() - self.t_start,
                (self.steps - step) * wall_per_step, val_loss=val_loss,
                grad_norm=grad_norm, mfu=mfu, mem_gb=row["mem_gb"],
                step_ms=row["step_s"] * 1000), markup=False, soft_wrap=True)

    def val_row(self, step: int, val: float, per_source: dict) -> None:
        """A validation loss at a step without a row."""
        if self.metrics is not None:
            self.metrics.write({"step": step, "val_loss": val, **per_source,
                                "time": time.time()})
            self.say(f"step {step}: val_loss {val:.4f}")

    def sync(self) -> None:
        if self.metrics is not None:
            self.metrics.sync()

    def close(self) -> None:
        if self.metrics is not None:
            self.metrics.close()

    def close_mirrors(self, ok: bool) -> None:
        if self.mirrors is not None:
            self.mirrors.close(ok)
            self.mirrors = None


def _round(v: float | None) -> float | None:
    """A per-rank number as the row keeps it (None: not held by that rank; a non-finite
    loss stays non-finite)."""
    return round(v, 5) if v is not None and math.isfinite(v) else v


def append_event(out: str, name: str, step: int, **fields) -> None:
    """An event row appended to OUT/metrics.jsonl by any rank (the hang watchdog, a rank out
    of memory): one O_APPEND write of the whole line, so it never interleaves with rank 0's
    rows and needs no metrics writer of its own."""
    from llmtk.io.metrics import encode_row

    fd = os.open(os.path.join(out, "metrics.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                 0o644)
    try:
        os.write(fd, encode_row({"step": step, "event": name, **fields, "time": time.time()}))
    finally:
        os.close(fd)


def due(step: int, every: int, steps: int) -> bool:
    """Whether something done every `every` steps (0: never) is due after `step` of a
    run of `steps`: the last step always is."""
    return bool(every) and step % every == 0 or step == steps
