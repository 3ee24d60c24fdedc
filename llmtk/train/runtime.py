"""The process side of training: ranks and process groups, signals, collective errors,
and the fault-injection seam tests use.

Three process groups when distributed: the main one (NCCL on GPU, gloo on CPU) for
gradients and the step's reduction; `host`, a gloo group for small host values (the
preemption flag, peak memory), so agreeing on them never waits for the GPU; and `ckpt`,
a gloo group that asynchronous checkpoint writes use from their background thread.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field
from datetime import timedelta

from llmtk.errors import ConfigError, LlmtkError


class CollectiveError(LlmtkError):
    """An error every rank reached together (the same verdict from the same reduced
    values): rank 0 reports it, the other ranks exit with the same status silently."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


class Faults:
    """Where a test may break a run on purpose. Production runs use this no-op; tests pass
    a subclass to `train(cfg, faults=...)` (see tests/train_driver.py)."""

    def loss(self, step: int, loss):
        """The loss of micro-step at 0-based optimizer step `step` (tests: NaN, spikes)."""
        return loss

    def before_commit(self, step: int) -> None:
        """Rank 0, checkpoint `step` fully written but not yet COMPLETE (tests: SIGKILL)."""

    def after_step(self, step: int) -> None:
        """After step `step` (1-based) and its checkpoint (tests: crashes, delays)."""


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: str = "cpu"
    groups: dict = field(default_factory=dict)  # "host", "ckpt": gloo groups

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    def barrier(self) -> None:
        if self.distributed:
            import torch.distributed as tdist

            tdist.barrier(group=self.groups["host"])

    def broadcast(self, obj):
        """Rank 0's `obj` on every rank (a small picklable value)."""
        if not self.distributed:
            return obj
        import torch.distributed as tdist

        box = [obj]
        tdist.broadcast_object_list(box, src=0, group=self.groups["host"])
        return box[0]

    def host_max(self, values: list[float]) -> list[float]:
        """Element-wise max over ranks of host-side numbers (no device sync)."""
        if not self.distributed:
            return values
        import torch
        import torch.distributed as tdist

        t = torch.tensor(values, dtype=torch.float64)
        tdist.all_reduce(t, op=tdist.ReduceOp.MAX, group=self.groups["host"])
        return t.tolist()

    def close(self) -> None:
        if self.distributed:
            import torch.distributed as tdist

            if tdist.is_initialized():
                tdist.destroy_process_group()


def exit_worker() -> None:
    """End a torchrun worker whose run succeeded as the interpreter ends, but without its
    module teardown: threads joined, atexit handlers run, the streams flushed, then
    os._exit(0). The teardown aborted finished workers now and then (SIGABRT, "terminate
    called without an active exception": gloo's threads still hold tensors when the
    interpreter finalizes), and torchrun then reported a run that had finished as failed."""
    import atexit
    import sys
    import threading

    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    os._exit(0)


def ranks() -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun's environment (0, 1, 0 without it)."""
    return (int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
            int(os.environ.get("LOCAL_RANK", 0)))


# The default --threads is at most this many per process: llmtk's CPU runs are small
# models (smoke tests, tiny presets) whose matmuls are too small to feed more threads, and a
# machine with more cores usually runs several jobs or ranks at once. A judgment, not a
# measurement (this project's machines have 2 cores); --threads overrides it.
MAX_DEFAULT_THREADS = 8


def usable_cores() -> int:
    """Physical cores this process may use: the CPUs of its affinity mask (taskset, cgroup
    cpusets), counted once per core (hyperthread siblings share one core's FPUs, which is
    also why PyTorch's own default counts physical cores), within a cgroup CPU quota
    (docker --cpus, Kubernetes limits), which the affinity mask does not show."""
    try:
        cpus = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        cpus = set(range(os.cpu_count() or 1))
    cores = set()
    for cpu in cpus:
        topo = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        try:
            with open(f"{topo}/physical_package_id") as f, open(f"{topo}/core_id") as g:
                cores.add((f.read().strip(), g.read().strip()))
        except OSError:
            cores.add(("cpu", str(cpu)))
    quota = _cgroup_cpus()
    return max(1, min(len(cores), int(quota) if quota else len(cores)))


def _cgroup_cpus() -> float | None:
    """The CPU quota of this process's cgroup in CPUs (v2 cpu.max, else v1), None: none."""
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        with open("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") as f, \
                open("/sys/fs/cgroup/cpu/cpu.cfs_period_us") as g:
            quota, period = int(f.read()), int(g.read())
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def default_threads(procs_per_node: int) -> int:
    """This process's share of the node's physical cores, 1 to MAX_DEFAULT_THREADS."""
    return max(1, min(MAX_DEFAULT_THREADS, usable_cores() // max(1, procs_per_node)))


def set_threads(requested: int | None) -> tuple[int, str]:
    """Set torch's intra-op threads: --threads, else OMP_NUM_THREADS when the environment
    sets it (a job script's choice), else default_threads. Returns (threads, source)."""
    import torch

    if requested is None and os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads(), "OMP_NUM_THREADS"
    source = "--threads" if requested is not None else "default"
    n = requested or default_threads(int(os.environ.get("LOCAL_WORLD_SIZE", 1)))
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n, source


def busy_note(threads: int, source: str, device: str) -> str | None:
    """A hint when default threads meet cores that other processes already keep busy: the
    default stays deterministic (a resume should compute the same bits), the user decides."""
    if source != "default" or threads < 2 or device != "cpu":
        return None
    try:
        load = os.getloadavg()[0]
    except OSError:
        return None
    cores = usable_cores()
    if load <= cores:
        return None
    return (f"note: load average {load:.1f} on {cores} cores: other processes keep them busy, "
            f"and {threads} threads would wait on each other; --threads 1 may be several "
            "times faster here")


def setup_dist(device: str, nccl_timeout: int, out: str | None = None) -> Dist:
    """This process's ranks, device and process groups. On GPU with several processes the
    NCCL flight recorder is switched on first (watchdog.nccl_env: OUT/hang/), unless the
    environment already sets it."""
    import torch

    rank, world, local_rank = ranks()
    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device", "no CUDA device is available", value="cuda")
    dev = f"cuda:{local_rank}" if use_cuda else "cpu"
    if use_cuda:
        torch.cuda.set_device(local_rank)
        # TF32 for any fp32 matmul/conv left outside autocast (Ampere and later).
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    groups = {}
    if world > 1:
        import torch.distributed as tdist

        timeout = timedelta(seconds=nccl_timeout)
        if use_cuda and out:
            from llmtk.train.watchdog import nccl_env

            os.makedirs(os.path.join(out, "hang"), exist_ok=True)
            for key, value in nccl_env(out).items():
                os.environ.setdefault(key, value)
        tdist.init_process_group(backend="nccl" if use_cuda else "gloo", timeout=timeout,
                                 **_attempt_store(rank, world, timeout),
                                 **({"device_id": torch.device(dev)} if use_cuda else {}))
        groups = {"host": tdist.new_group(backend="gloo", timeout=timeout),
                  "ckpt": tdist.new_group(backend="gloo", timeout=timeout)}
    return Dist(rank, world, local_rank, dev, groups)


def _attempt_store(rank: int, world: int, timeout: timedelta) -> dict:
    """Under torchrun the workers share the agent's TCPStore, which a restart
    (--max-restarts) keeps, keys and all: a rank that reaches the process group before
    rank 0 after a restart read the dead rank 0's gloo address from the attempt before
    and failed ("connectFullMesh failed ... Connection refused"; 2 of 3 restarts here
    after one of 2 ranks was killed). A prefix per attempt keeps the attempts apart.
    Elsewhere ({}): torch's own env:// rendezvous."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return {}
    import torch.distributed as tdist

    store = tdist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                           is_master=False, timeout=timeout)
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return {"store": tdist.PrefixStore(f"llmtk/attempt-{attempt}", store), "rank": rank,
            "world_size": world}


class Stopper:
    """SIGTERM / SIGUSR1 (Slurm preemption) and SIGINT (Ctrl-C) ask for a checkpoint at the
    step and an exit; the ranks agree on it over the host group, so a signal seen by one
    rank stops them all at the same step. A second Ctrl-C stops at once (KeyboardInterrupt:
    a checkpoint being written is left unfinished, and resume takes the one before)."""

    SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)

    def __init__(self, dist: Dist):
        self.dist, self.signum, self.previous = dist, 0, {}

    def __enter__(self) -> Stopper:
        for sig in self.SIGNALS:
            self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self.previous.items():  # in-process callers get theirs back
            signal.signal(sig, handler)

    def _handle(self, signum, frame):
        if signum == signal.SIGINT and self.signum:  # Ctrl-C after any stop signal: now
            raise KeyboardInterrupt
        self.signum = self.signum or signum  # the first signal names the stop

    def agreed(self) -> int:
        """The signal number some rank received (0: none), the same on every rank."""
        if not self.dist.distributed:
            return self.signum
        (value,) = self.dist.host_max([float(self.signum)])
        return int(value)
