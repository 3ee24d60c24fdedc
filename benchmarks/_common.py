"""Shared helpers for benchmarks: timing child processes by wall and CPU time."""

import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LLMTK = [sys.executable, "-m", "llmtk"]
CORPUS = Path("/work/shared/data/corpus-public.jsonl.zst")


def timed(cmd, shell: bool = False) -> tuple[float, float]:
    """Run a command; return (wall seconds, CPU seconds of it and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, shell=shell, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def one_core(cmd: list[str]) -> list[str]:
    """Pin a command to one CPU when taskset exists (the per-core comparison)."""
    return ["taskset", "-c", "0", *cmd] if shutil.which("taskset") else cmd
