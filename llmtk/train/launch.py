"""Launching through torchrun (torch.distributed.elastic), the existing distributed engine.

`llmtk train ... --nproc-per-node 8 [--nnodes 4 --rdzv-endpoint HOST:PORT ...]` runs
torchrun in this process with those flags and `-m llmtk train <the same arguments>`
as the worker. A worker sees RANK/WORLD_SIZE in its environment and trains; it
ignores the launch flags it was passed again.
"""

from __future__ import annotations

import os
import signal
import sys

from llmtk.errors import LlmtkError


def is_worker() -> bool:
    """Started by torchrun (or srun with the torch variables exported)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def follow_launcher() -> None:
    """Have the kernel send this worker SIGTERM when its parent (torchrun's agent) dies.

    torchrun starts each worker in a session of its own, so a launcher killed outright
    (`kill -9`, the OOM killer) used to leave its workers training, writing checkpoints
    and holding the run's lock. With this a worker takes its launcher's death as a stop
    signal: the ranks agree on it, checkpoint at the step and exit, as on SIGTERM (the
    agent starts its workers from its main thread, which lives as long as it does).
    Linux only (prctl); elsewhere nothing changes."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_PDEATHSIG = 1
    if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
        return  # not permitted (a seccomp sandbox): the old behaviour
    if os.getppid() != parent:  # it died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


def torchrun_argv(*, nproc_per_node: int, nnodes: int, node_rank: int | None,
                  rdzv_endpoint: str | None, rdzv_id: str | None, rdzv_backend: str,
                  max_restarts: int, worker_args: list[str],
                  rdzv_timeout: int | None = None) -> list[str]:
    """torchrun's arguments for a checked LaunchConfig's values (LaunchConfig.validate)."""
    args = [f"--nproc-per-node={nproc_per_node}", f"--max-restarts={max_restarts}"]
    if nnodes == 1 and not rdzv_endpoint:
        args.append("--standalone")  # a private rendezvous on a free local port
    else:
        args += [f"--nnodes={nnodes}", f"--rdzv-backend={rdzv_backend}",
                 f"--rdzv-endpoint={rdzv_endpoint}", f"--rdzv-id={rdzv_id or 'llmtk'}"]
        if node_rank is not None:
            args.append(f"--node-rank={node_rank}")
        if rdzv_timeout is not None:  # how long nodes wait for each other (torchrun: 600 s)
            args.append(f"--rdzv-conf=join_timeout={rdzv_timeout}")
    return [*args, "-m", "llmtk", "train", *worker_args]


SHUTDOWN_SECONDS = 600  # a 70B model's sharded checkpoint takes minutes on slow storage


def run_torchrun(argv: list[str]) -> int:
    """Run torchrun's launcher here; return the exit status of the job."""
    from torch.distributed.elastic.multiprocessing import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun_main

    # SIGUSR1 (Slurm's advance warning) is for the workers, which checkpoint on it; the
    # launcher ignores it rather than die and orphan them. Workers set their own handler.
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    # On SIGTERM/SIGINT torchrun passes the signal on, then waits this long before it
    # SIGKILLs the workers (torch's default 30 s): time for the checkpoint they write at the
    # step. A user's own value wins.
    os.environ.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(SHUTDOWN_SECONDS))
    try:
        torchrun_main(argv)
    except SignalException as e:
        # torchrun passed the signal on to the workers (Ctrl-C reaches only the launcher:
        # they run in sessions of their own) and waited for them: they checkpointed and
        # said so. Ctrl-C exits 130 as a single process does; another signal 128 + its number.
        if e.sigval == signal.SIGINT:
            raise KeyboardInterrupt from None
        err = LlmtkError(f"stopped by {signal.Signals(e.sigval).name} (the workers "
                         "checkpointed where they could; the same command resumes)")
        err.exit_code = 128 + int(e.sigval)
        raise err from None
    except ChildFailedError as e:
        codes = [f.exitcode for f in e.failures.values()]
        code = next((c for c in codes if c and c > 0), 1)
        err = LlmtkError(f"training failed: worker exit status {codes} (see the worker "
                         "messages above)")
        err.exit_code = code
        raise err from None
    return 0


def worker_args() -> list[str]:
    """This process's `llmtk train` arguments, to hand to the workers unchanged."""
    argv = sys.argv[1:]
    if "train" in argv:
        argv = argv[argv.index("train") + 1:]
    return argv
