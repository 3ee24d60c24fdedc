"""Where each rank's time goes, and the phase it is in now.

The loop marks each phase it enters (`Phases.at`): waiting for data, forward-backward, a
named collective, the optimizer, a checkpoint, an evaluation. The marks serve two readers:
  - the metrics row (steplog.py): the seconds each rank spent per step in data wait,
    compute and communication wait since the last row, gathered with the row's one
    all_gather, beside each rank's loss before reduction and its peak memory;
  - the hang watchdog (watchdog.py): the step and phase a rank is in, and a progress
    count that moves at every mark.
A mark costs a clock read and a few attribute writes: no device sync, no collective.

Under several processes a daemon thread (`Stalls`) also wakes every TICK seconds and
counts the time its wake-ups came late by more than a tick: the time this process was
not running at all (stopped, swapped out, starved of CPU by other jobs), whatever phase
it was in. A rank paused while it waits in a collective delays the others as much as one
paused while computing (the collective completes only when it runs again), but only the
stall count shows the first kind.

Communication wait is what the host sees of it: time blocked in a collective the loop
calls (the stop-signal agreement, the row's gather), and under DDP (not compiled) the end
of backward after this rank's last gradient bucket was handed to the all-reduce (a comm
hook stamps it), where a rank waits for the slowest one. Under FSDP the waits inside
forward and backward count as compute; on GPU the host runs ahead of the device, so its
split shows where the host waited (the device read at the row), not the kernels.
"""

from __future__ import annotations

import threading
import time

# s: 50 wake-ups a second. A 50 ms tick found a rank stopped 50 ms in every 100 ms in
# 3 of 4 runs, a 20 ms one in 4 of 4 (benchmarks/rank_noise.py); the thread cost +0.017 ms
# CPU on a 1.3 ms toy step (median of 8 paired rounds, noise +-0.04 ms): it costs per
# second, not per step, so a real step pays a smaller share
TICK = 0.02
KINDS = ("data", "compute", "comm")  # phases of another kind (checkpoint, eval) are not timed


class Phases:
    """This rank's current phase and the seconds per kind since the last `take`."""

    def __init__(self) -> None:
        self.step, self.phase, self.progress = 0, "start", 0
        self.kind: str | None = None
        self.t = time.perf_counter()
        self.spent = dict.fromkeys(KINDS, 0.0)
        self.steps = 0
        self.local_loss = None     # the last step's loss on this rank, before the reduction
        self.last_bucket = None    # DDP: when the backward's last gradient bucket was handed on
        self.stalled = 0.0         # seconds this process did not run (Stalls), since the take

    def at(self, phase: str, kind: str | None = None, step: int | None = None) -> None:
        """Enter `phase` (of `kind`: data, compute, comm, or None: not timed)."""
        now = time.perf_counter()
        if self.kind is not None:
            self.spent[self.kind] += now - self.t
        self.t, self.kind, self.phase = now, kind, phase
        if step is not None:
            self.step = step
        self.progress += 1

    def step_done(self, loss_sum, grad_accum: int) -> None:
        self.steps += 1
        self.local_loss = (loss_sum, grad_accum)  # divided when a row reads it
        self.at("optimizer", "compute")  # holds the step's own all-reduce too (optim.py)

    def backward_done(self) -> None:
        """After a synchronising backward: the time since the last bucket was handed to
        DDP's all-reduce was spent waiting for the other ranks."""
        if self.last_bucket is not None and self.kind == "compute":
            waited = max(0.0, time.perf_counter() - max(self.last_bucket, self.t))
            self.spent["compute"] -= waited
            self.spent["comm"] += waited
        self.last_bucket = None

    def take(self) -> tuple[dict, int]:
        """(seconds per kind, steps) since the last take; the clock goes on."""
        self.at(self.phase, self.kind)
        spent, steps = {**self.spent, "stall": self.stalled}, self.steps
        self.spent, self.steps, self.stalled = dict.fromkeys(KINDS, 0.0), 0, 0.0
        return spent, steps

    def reset(self) -> None:
        self.take()

    def timed_ddp(self, model, group=None) -> None:
        """Stamp when DDP hands each gradient bucket to its all-reduce. The hook is torch's
        default (divide by the world size, all-reduce the sum): the same arithmetic as DDP's
        built-in reduction, so the gradients keep their bits."""
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        def hook(state, bucket):
            self.last_bucket = time.perf_counter()
            self.phase = "all_reduce (DDP gradients)"
            return allreduce_hook(state, bucket)

        model.register_comm_hook(group, hook)


class Stalls:
    """The daemon thread that adds to `phases.stalled` the time its TICK-second sleeps
    overran by more than a tick. A context manager: runs inside."""

    def __init__(self, phases: Phases):
        self.phases, self._stop = phases, threading.Event()
        self._thread = threading.Thread(target=self._loop, name="llmtk-stalls", daemon=True)

    def __enter__(self) -> Stalls:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(TICK):
            now = time.monotonic()
            late = now - last - TICK
            if late > TICK:
                self.phases.stalled += late
            last = now


def gather_row(dist, phases: Phases, mem_gb: float) -> dict:
    """Every rank's seconds per step in data wait, compute and comm wait, its loss before
    reduction and its peak memory, with one all_gather on the host group (the row's only
    collective). Returns lists indexed by rank."""
    import torch

    spent, steps = phases.take()
    loss = phases.local_loss  # (the step's loss summed over micro-steps, grad_accum)
    loss = float(loss[0]) / loss[1] if loss is not None else 0.0
    # 0 exactly: this rank holds no loss (a pipeline stage before the last; an SFT step
    # without a trained token here), written as null; a NaN loss stays NaN
    n = max(1, steps)
    mine = torch.tensor([spent["data"] / n, spent["compute"] / n, spent["comm"] / n, loss,
                         mem_gb, float(loss != 0.0), spent["stall"] / n], dtype=torch.float64)
    if dist.distributed:
        import torch.distributed as tdist

        parts = [torch.empty_like(mine) for _ in range(dist.world)]
        tdist.all_gather(parts, mine, group=dist.groups["host"])
        rows = [p.tolist() for p in parts]
    else:
        rows = [mine.tolist()]
    names = ("data_s", "compute_s", "comm_s", "loss", "mem_gb")
    out = {name: [r[i] for r in rows] for i, name in enumerate(names)}
    out["loss"] = [v if r[5] else None for v, r in zip(out["loss"], rows, strict=True)]
    if dist.distributed:
        out["stall_s"] = [r[6] for r in rows]
    return out
