"""`llmtk run`: a command's N array tasks on an existing engine, with retries.

The command is any program (usually `llmtk ...`); in its arguments `{shard}`
becomes K/N, `{k}` K zero-padded to 5 digits, `{n}` N and `{cpus}` the CPUs a
task has (its share of this machine, or Ray's --cpus-per-task), exactly as
bin/llmtk-array.sbatch does under Slurm. Each task is one subprocess:

- executor `ray`: one Ray task per array task (`ray.init(address)`: a running
  cluster, or a local instance), retried by Ray up to `retries` times when its
  exit status is not 0 or its node dies. Ray is imported only here (optional
  extra: `pip install 'llmtk[ray]'`).
- executor `local`: `parallel` subprocesses on this machine, same retries.

A task that exits 2 (bad usage: every try would fail the same way) is not
retried, and the tasks not yet started are cancelled. A retried task starts
from scratch: its outputs are temporary files until it
finishes, and the tasks that finished before are skipped by their `.done`
markers, so retries and reruns are safe.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable

from llmtk.errors import ConfigError, LlmtkError, UsageError

USAGE_STATUS = 2  # the command's own "bad usage": a retry would fail the same way


class TaskFailed(Exception):
    """A task's command exited non-zero (Ray retries on this exception)."""


class TaskMisused(Exception):
    """A task's command exited 2, bad usage: never retried."""


def task_argv(argv: list[str], k: int, n: int, cpus: int = 1) -> list[str]:
    return [a.replace("{shard}", f"{k}/{n}").replace("{k}", f"{k:05d}").replace("{n}", str(n))
            .replace("{cpus}", str(cpus)) for a in argv]


def run_task(argv: list[str], k: int, n: int, cpus: int = 1) -> int:
    """Run task K of N to the end; raise TaskFailed (TaskMisused for exit 2) unless it
    exits 0."""
    code = subprocess.run(task_argv(argv, k, n, cpus)).returncode
    if code == USAGE_STATUS:
        raise TaskMisused(f"task {k} of {n} exited with status 2 (bad usage; not retried)")
    if code != 0:
        raise TaskFailed(f"task {k} of {n} exited with status {code}")
    return k


def run_tasks(argv: list[str], tasks: int, executor: str, retries: int, parallel: int | None,
              address: str | None, cpus_per_task: float,
              log: Callable[[str], None] = lambda s: None) -> None:
    if not argv:
        raise UsageError("give the command to run after --, e.g. llmtk run --tasks 8 -- "
                         "llmtk clean in/ --shard {shard} -o out/{k}.jsonl.zst")
    if tasks < 1:
        raise ConfigError("tasks", f"must be >= 1, got {tasks}")
    if executor == "local":
        _run_local(argv, tasks, retries, parallel or 1, log)
    elif executor == "ray":
        _run_ray(argv, tasks, retries, parallel, address, cpus_per_task, log)
    else:
        raise ConfigError("executor", f"expected local or ray, got {executor!r}")


def _run_local(argv, tasks, retries, parallel, log) -> None:
    import os
    import threading
    from concurrent.futures import ThreadPoolExecutor

    cpus = max(1, (os.cpu_count() or 1) // parallel)
    misused = threading.Event()  # after a usage error no task starts (running ones finish)

    def one(k: int) -> None:
        for attempt in range(retries + 1):
            if misused.is_set():
                return
            try:
                run_task(argv, k, tasks, cpus)
                return
            except TaskMisused as e:
                misused.set()
                raise UsageError(str(e)) from None
            except TaskFailed as e:
                if attempt == retries:
                    raise LlmtkError(f"{e}, after {retries + 1} tries") from None
                log(f"{e}; retrying ({attempt + 1} of {retries})")

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        for future in [pool.submit(one, k) for k in range(tasks)]:
            future.result()


def _run_ray(argv, tasks, retries, parallel, address, cpus_per_task, log) -> None:
    try:
        import ray
    except ImportError:
        raise ConfigError("executor", "ray needs Ray: pip install 'llmtk[ray]'") from None

    if address is not None:
        ray.init(address=address, log_to_driver=True)
    else:  # RAY_ADDRESS, or a local instance on this machine
        ray.init(num_cpus=parallel, include_dashboard=False, log_to_driver=True)
    try:
        # TaskMisused is not in retry_exceptions: Ray does not retry a usage error.
        remote = ray.remote(num_cpus=cpus_per_task, max_retries=retries,
                            retry_exceptions=[TaskFailed])(run_task)
        cpus = max(1, int(cpus_per_task))
        refs = [remote.remote(argv, k, tasks, cpus) for k in range(tasks)]
        try:
            ray.get(refs)
        except ray.exceptions.RayTaskError as e:
            cause = e.as_instanceof_cause()
            if isinstance(cause, TaskMisused):
                for ref in refs:
                    ray.cancel(ref)
                raise UsageError(str(cause)) from None
            raise LlmtkError(f"{cause}, after {retries + 1} tries") from None
    finally:
        ray.shutdown()
