"""Out of memory at the step, as a finding: the rank, the step, what was held, what the
plan expected, and the cheapest fix, instead of a traceback from deep inside autograd.

`torch.OutOfMemoryError` (CUDA) and `MemoryError` (a CPU allocation that failed) raised
anywhere in the loop end here. The rank that ran out appends an `oom` event to
OUT/metrics.jsonl (any rank can: steplog.append_event), tells the other ranks through its
heartbeat so they end at once instead of waiting --hang-timeout for it (watchdog.py), and
exits 1 with one line.
"""

from __future__ import annotations

import os

from llmtk.errors import LlmtkError


class OutOfMemory(LlmtkError):
    """Exit 1 with the line that names the fix."""


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    import torch

    return isinstance(exc, getattr(torch, "OutOfMemoryError", ()))


def cheapest_fix(plan) -> str:
    """The cheapest change to the run plan that lowers the peak: recompute activations
    (about a third more compute), else half the micro-batch with twice the accumulation
    (the same global batch, slower), else another layout."""
    if not plan.activation_checkpointing:
        return "--activation-checkpointing (recomputes activations: about a third more compute)"
    if plan.batch_size > 1:
        return (f"--batch-size {plan.batch_size // 2} --grad-accum {plan.grad_accum * 2} "
                "(the same global batch in smaller micro-batches)")
    return ("another layout: `llmtk estimate --solve layout` (more --tp, --pp or FSDP "
            "sharding), or a GPU with more memory")


def memory_now(device: str) -> tuple[float, float | None]:
    """(allocated, reserved) GB: the CUDA caching allocator's, or this process's resident
    memory on CPU (no reserve)."""
    import torch

    if device.startswith("cuda"):
        return torch.cuda.memory_allocated() / 1e9, torch.cuda.memory_reserved() / 1e9
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e9, None
    except (OSError, ValueError, IndexError):
        return float("nan"), None


def planned_gb(plan, rank: int) -> float | None:
    """The dry run's bytes for this rank's kind (weights, gradients, optimizer states; not
    activations), in GB; None when it cannot be planned."""
    try:
        from llmtk.train.layout.dryrun import plan_ranks

        pp_rank = plan.layout.coords(rank).get("pp", 0)
        kinds = plan_ranks(plan)
        mine = next((k for k in kinds if k.pp_rank == pp_rank), kinds[0])
        return (mine.weights + mine.gradients + mine.optimizer) / 1e9
    except Exception:  # noqa: BLE001 - an estimate must never hide the OOM itself
        return None


class OomGuard:
    """Around the loop: an out-of-memory error becomes the event, the heartbeat that ends
    the other ranks, and OutOfMemory's one line (`out`: the run directory)."""

    def __init__(self, out: str, plan, dist, phases, watchdog):
        self.out, self.plan, self.dist = out, plan, dist
        self.phases, self.watchdog = phases, watchdog

    def __enter__(self) -> OomGuard:
        return self

    def __exit__(self, et, exc, tb) -> bool:
        if exc is None or not is_oom(exc):
            return False
        from llmtk.train.steplog import append_event

        rank, step, phase = self.dist.rank, self.phases.step, self.phases.phase
        allocated, reserved = memory_now(self.dist.device)
        planned = planned_gb(self.plan, rank)
        fix = cheapest_fix(self.plan)
        self.watchdog.failed(f"out of memory ({phase})")
        try:
            append_event(self.out, "oom", step, rank=rank, phase=phase,
                         allocated_gb=round(allocated, 3),
                         reserved_gb=None if reserved is None else round(reserved, 3),
                         planned_gb=None if planned is None else round(planned, 3),
                         device=self.dist.device, fix=fix, error=str(exc)[:300])
        except OSError:
            pass
        held = f"{allocated:.3g} GB allocated" + \
            (f", {reserved:.3g} GB reserved" if reserved is not None else "")
        est = (f"; the dry run plans {planned:.3g} GB of weights, gradients and optimizer "
               f"states for this rank, activations aside" if planned is not None else "")
        raise OutOfMemory(f"out of memory on rank {rank} at step {step} in {phase} "
                          f"({held}{est}); the cheapest fix: {fix}") from None
