"""The restore drill: prove a checkpoint before it is needed (`llmtk train verify RUN`).

1. Checksums: every file of the checkpoint (latest, or --step N) against its manifest,
   the manifest against COMPLETE, COMPLETE against itself, and `latest` names a
   checkpoint: one changed byte anywhere names the file (checkpoint.verify).
2. Recompute: train from the checkpoint, with the run's own configuration (that of the
   segment that logged the steps after it) and layout (as many processes as it had,
   through torchrun), up to the next step metrics.jsonl logged after it, in a scratch
   directory; the run's directory is only read. The loss (and grad norm) must equal the
   logged ones bit for bit on CPU (training there is deterministic: the
   same kernels, threads and reduction order). On GPU the kernels are not deterministic;
   the loss must agree within GPU_TOLERANCE per recomputed step, relative.
   The newest checkpoint of a finished run has no step logged after it: its steps are
   retrained from the checkpoint before it, and the state that drill checkpoints is
   compared with it tensor by tensor (rebuild).

The recompute goes through the trainer's own resume path (llmtk.train.trainer.train),
stopped by a Faults hook once the compared step is logged: nothing here re-implements
loading or a training step.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable

from llmtk.errors import LlmtkError, UsageError
from llmtk.train.checkpoint import files as C
from llmtk.train.runtime import Faults

# Relative difference allowed per recomputed step on GPU: one rounding of the bf16 matmul
# inputs (8 significant bits, 2^-8) or of TF32 (fp32 runs on GPU: 11 bits, 2^-11). Atomic
# adds and split-K reductions change the order of fp32 sums between two runs; the logged
# loss, a mean over the whole global batch, averages those orderings' rounding errors, so
# it should move by less than one input rounding per step. Derived, not yet measured on a
# GPU (none was available when it was written).
GPU_TOLERANCE = {"bf16": 2.0 ** -8, "fp32": 2.0 ** -11}


class VerifyFailed(LlmtkError):
    """The checkpoint or its recompute does not match: one line naming the file or step."""


class _Reached(Exception):
    """Raised by the drill's Faults hook once the compared step is done on this rank."""


class _StopAt(Faults):
    def __init__(self, step: int):
        self.step = step

    def after_step(self, step: int) -> None:  # after the step's row is written
        if step >= self.step:
            raise _Reached


# ---------------------------------------------------------------- choosing and checksums


def choose(run: str, step: int | None) -> str:
    """The checkpoint directory to verify: step `step`'s, or the newest complete one
    (even if it is corrupt: that is what this command is for)."""
    root = os.path.join(run, "checkpoints")
    found = C.step_dirs(root)
    if not found:
        raise UsageError(f"{run}: no complete checkpoint under {root}")
    if step is None:
        return found[-1][1]
    for s, path in found:
        if s == step:
            return path
    have = ", ".join(str(s) for s, _ in found)
    raise UsageError(f"{run}: no complete checkpoint of step {step} (there are: {have})")


def checksums(path: str) -> None:
    """Every file of checkpoint `path` against its manifest, and `latest` beside it."""
    problem = C.verify(path)
    if problem is not None:
        raise VerifyFailed(f"{path}: {problem}")
    root = os.path.dirname(path)
    latest = os.path.join(root, "latest")
    if os.path.exists(latest):
        try:
            with open(latest, "rb") as f:
                name = f.read().decode()
        except (OSError, UnicodeDecodeError):
            name = ""
        named = name.removesuffix("\n")
        if not (name.endswith("\n") and C.STEP_DIR.match(named)
                and os.path.exists(os.path.join(root, named, C.COMPLETE))):
            raise VerifyFailed(f"{latest}: names {named!r}, which is not a complete "
                               "checkpoint of this run")


def file_count(path: str) -> int:
    with open(os.path.join(path, C.MANIFEST)) as f:
        return len(json.load(f)["files"])


# ---------------------------------------------------------------- recomputing


def logged_after(run: str, step: int) -> dict | None:
    """The first training row of RUN/metrics.jsonl after `step` (None: there is none)."""
    from llmtk.io.metrics import read_metrics

    path = os.path.join(run, "metrics.jsonl")
    try:
        for row in read_metrics(path):
            if (isinstance(row.get("step"), int) and row["step"] > step and "loss" in row
                    and "event" not in row):
                return row
    except FileNotFoundError:
        raise LlmtkError(f"{path}: no such file: the run's log is what the recompute "
                         "is compared with") from None
    except ValueError as e:
        raise LlmtkError(str(e)) from None
    return None


def drill_config(run: str, path: str, state: dict, stop: int, scratch: str) -> dict:
    """The run's own training configuration, resuming from `path` into `scratch`, with
    what does not change the trained numbers switched off (evaluation, samples, other
    loggers, checkpoints) and the thread count the run had."""
    from llmtk.train.config import TrainConfig

    known = {f.name for f in dataclasses.fields(TrainConfig)}
    flags = {k: v for k, v in segment_config(run, path, state).items() if k in known}
    threads = _run_json(run).get("threads")
    flags.update(
        out=scratch, resume=path, quiet=True, log_to="none", eval_every=0, eval_tasks=[],
        sample_every=0, checkpoint_every=0, verify_every=0, keep_checkpoints=0,
        async_checkpoint=False,  # the drill's own final checkpoint is read at once
        dry_run=False, steps=max(flags.get("steps", stop), stop),
        cache_dir=flags.get("cache_dir") or os.path.join(run, "cache"),
        threads=flags.get("threads") or threads)
    return flags


def segment_config(run: str, path: str, state: dict) -> dict:
    """The training configuration of the run segment that logged the steps after
    checkpoint `path`: a resume may change settings (--steps to train further moves the
    schedule), and they apply from the checkpoint it resumed on. That segment wrote the
    next checkpoint (its state.json), or, if none came after, config.json (the newest
    segment's); the checkpoint's own configuration is the last resort."""
    saved = state["step"]
    for step, later in C.step_dirs(os.path.dirname(path)):
        if step > saved:
            try:
                return C.load_state(later)["train_config"]
            except (C.CheckpointError, KeyError):
                break
    return _run_json(run).get("train") or state["train_config"]


def _run_json(run: str) -> dict:
    try:
        with open(os.path.join(run, "config.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def recompute(flags: dict, world: int, stop: int) -> list[dict]:
    """Train from the checkpoint to step `stop` with the run's layout; the training rows
    it logged, each with the device it ran on."""
    scratch = flags["out"]
    if world == 1:
        _train_until(flags, stop)
    else:
        _torchrun(flags, world, stop)
    from llmtk.io.metrics import read_metrics

    logged = list(read_metrics(os.path.join(scratch, "metrics.jsonl")))
    resumed = [r for r in logged if r.get("event") == "resume"]
    if not resumed or os.path.basename(resumed[0].get("path", "")) != \
            os.path.basename(flags["resume"]):
        # a fresh start reproduces the run's first steps too: only a resume proves anything
        raise VerifyFailed(f"the recompute did not resume from {flags['resume']}")
    device = _run_json(scratch).get("device", "cpu")
    return [{**r, "device": device} for r in logged if "loss" in r and "event" not in r]


def row_at(rows: list[dict], step: int) -> dict:
    found = [r for r in rows if r.get("step") == step]
    if not found:
        raise VerifyFailed(f"step {step} recomputed from the checkpoint logged no loss "
                           "(a non-finite step?)")
    return found[-1]


def _train_until(flags: dict, stop: int) -> None:
    from llmtk.train.config import resolve_config
    from llmtk.train.trainer import train

    try:
        train(resolve_config(flags, None), faults=_StopAt(stop))
    except _Reached:
        pass


def _torchrun(flags: dict, world: int, stop: int) -> None:
    """`world` worker processes on this machine (torchrun --standalone), each running
    `worker` below: the run's layout needs as many processes as it had."""
    import subprocess

    spec = os.path.join(flags["out"], "drill.json")
    with open(spec, "w") as f:
        json.dump({"flags": flags, "stop": stop}, f)
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(flags.get("threads") or 1))
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={world}", "-m", "llmtk.train.checkpoint.verify", spec]
    p = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
    if p.returncode != 0:
        tail = p.stderr.decode(errors="replace").strip().splitlines()[-12:]
        sys.stderr.write("\n".join(tail) + "\n")
        raise VerifyFailed(f"the recompute in {world} processes failed (exit status "
                           f"{p.returncode}; its last lines are above)")


def worker(spec_path: str) -> None:
    """One rank of the recompute (started by torchrun through _torchrun)."""
    with open(spec_path) as f:
        spec = json.load(f)
    _train_until(spec["flags"], spec["stop"])


def tolerance(row: dict, k: int, dtype: str) -> float:
    """Allowed |recomputed - logged| for a loss recomputed `k` steps after the checkpoint:
    0 when the run and the recompute both ran on CPU, else GPU_TOLERANCE of the run's
    dtype per step, relative to the loss."""
    devices = (str(row.get("device", "cpu")), str(row.get("run_device", "cpu")))
    if not any(d.startswith("cuda") for d in devices):
        return 0.0
    unit = GPU_TOLERANCE["fp32" if dtype == "fp32" else "bf16"]
    return k * unit * abs(float(row["loss"]))


# ---------------------------------------------------------------- the drill


def verify(run: str, step: int | None = None, *, checksums_only: bool = False,
           say: Callable[[str], None] | None = None) -> str:
    """The restore drill on checkpoint `step` of `run` (default: the newest). Returns the
    line that says what was proven; raises VerifyFailed naming the file or the step."""
    say = say or (lambda _msg: None)
    path = choose(run, step)
    name = os.path.basename(path)
    checksums(path)
    proven = f"{name}: {file_count(path)} files match {C.MANIFEST}"
    if checksums_only:
        return proven
    state = C.load_state(path)
    saved = state["step"]
    row = logged_after(run, saved)
    stop = row["step"] if row is not None else saved + 1
    world = int(state.get("world_size", 1))
    say(f"{proven}; recomputing step {stop} from it in {world} process"
        f"{'es' if world > 1 else ''}")
    if row is None:
        rebuilt = rebuild(run, path, saved, world, proven, say)
        if rebuilt is not None:
            return proven + "; " + rebuilt
    scratch = tempfile.mkdtemp(prefix="llmtk-verify-")
    try:
        flags = drill_config(run, path, state, stop, scratch)
        got = row_at(recompute(flags, world, stop), stop)
        got["run_device"] = _run_json(run).get("device", "cpu")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if row is None:
        return (f"{proven}; it loads and trains (step {stop}: loss {got['loss']!r}); "
                f"metrics.jsonl logs no step after {saved} to compare with")
    return proven + "; " + compare(row, got, stop - saved, flags.get("dtype", "auto"))


def rebuild(run: str, path: str, saved: int, world: int, proven: str,
            say: Callable[[str], None]) -> str | None:
    """The newest checkpoint of a finished run (no step logged after it): retrain its
    steps from the checkpoint before it, in the run's layout, and compare the state the
    drill's own final checkpoint holds with it (bit for bit; on CPU only: GPU kernels
    are not deterministic), and the logged losses on the way. None: there is no earlier
    checkpoint that verifies, the checkpoint is not the end of its schedule (a stop on
    SIGTERM), or the run was on GPU."""
    earlier = [p for s, p in C.step_dirs(os.path.dirname(path)) if s < saved]
    if not earlier or C.verify(earlier[-1]) is not None or \
            str(_run_json(run).get("device", "cpu")).startswith("cuda"):
        return None
    prev = earlier[-1]
    prev_state = C.load_state(prev)
    scratch = tempfile.mkdtemp(prefix="llmtk-verify-")
    try:
        flags = drill_config(run, prev, prev_state, saved, scratch)
        if flags["steps"] != saved:
            return None
        first = prev_state["step"] + 1
        say(f"{proven}; metrics.jsonl logs no step after it: retraining steps {first}-"
            f"{saved} from {os.path.basename(prev)} in {world} process"
            f"{'es' if world > 1 else ''} to compare its state")
        rows = recompute(flags, world, saved)
        logged = {r["step"]: r for r in _training_rows(run) if first <= r["step"] <= saved}
        for step, want in sorted(logged.items()):
            compare(want, row_at(rows, step), step - first + 1, flags.get("dtype", "auto"))
        mine = C.load_full_state(os.path.join(scratch, "checkpoints", f"step-{saved:07d}"))
        differs = first_difference(dict(zip(("model", "optimizer"), mine, strict=True)),
                                   dict(zip(("model", "optimizer"), C.load_full_state(path),
                                            strict=True)))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if differs is not None:
        raise VerifyFailed(f"{path}: {differs} differs from the state retrained from "
                           f"{os.path.basename(prev)} (steps {first}-{saved}): the checkpoint "
                           "does not hold what the run trained")
    steps = f"step {saved}" if first == saved else f"steps {first}-{saved}"
    losses = "its logged loss" if len(logged) == 1 else f"{len(logged)} logged losses"
    return (f"{steps} retrained from {os.path.basename(prev)}: {losses} and the model and "
            "optimizer state equal it bit for bit")


def _training_rows(run: str) -> list[dict]:
    from llmtk.io.metrics import read_metrics

    return [r for r in read_metrics(os.path.join(run, "metrics.jsonl"))
            if isinstance(r.get("step"), int) and "loss" in r and "event" not in r]


def first_difference(a, b, where: str = "") -> str | None:
    """Where two (model, optimizer) states differ, e.g. 'model layers.0.attn.wo.weight';
    None if every tensor and value is equal (bit for bit)."""
    import torch

    here = where or "the state"
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        same = (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
                and a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b))
        return None if same else here
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return f"{here} (its entries)"
        for k in sorted(a, key=str):
            d = first_difference(a[k], b[k], f"{where} {k}".strip() if where else str(k))
            if d is not None:
                return d
        return None
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            return f"{here} (its length)"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            d = first_difference(x, y, f"{where}[{i}]")
            if d is not None:
                return d
        return None
    return None if a == b else here


def compare(logged: dict, got: dict, k: int, dtype: str) -> str:
    """The verdict on the recomputed row `got` against the `logged` one."""
    want, have, step = float(logged["loss"]), float(got["loss"]), logged["step"]
    tol = tolerance(got, k, dtype)
    diff = abs(have - want)
    if tol == 0.0:
        for key in ("loss", "grad_norm"):  # the grad norm too, where both logged it
            if key in logged and key in got and got[key] != logged[key]:
                raise VerifyFailed(f"step {step}: the {key} recomputed from the checkpoint "
                                   f"is {got[key]!r}, metrics.jsonl has {logged[key]!r} (CPU "
                                   "recomputes bit for bit: the checkpoint does not restore "
                                   "the run)")
        return f"step {step} recomputed: loss {have!r}, bit for bit as logged"
    if not diff <= tol:
        raise VerifyFailed(f"step {step}: the loss recomputed from the checkpoint is "
                           f"{have!r}, metrics.jsonl has {want!r}: {diff:.3g} apart, more "
                           f"than the GPU tolerance {tol:.3g} ({k} step(s))")
    return (f"step {step} recomputed: loss {have!r}, logged {want!r} ({diff:.3g} apart, "
            f"within the GPU tolerance {tol:.3g})")


if __name__ == "__main__":  # a torchrun worker of the recompute
    try:
        worker(sys.argv[1])
    except LlmtkError as e:
        print(f"llmtk: error: {e}", file=sys.stderr, flush=True)
        sys.exit(e.exit_code)
    from llmtk.train.runtime import exit_worker

    exit_worker()
