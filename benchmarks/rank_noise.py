"""What the per-rank times of 2-process CPU runs look like, healthy and with one rank paused
half of the time: the numbers llmtk/curves/ranks.py's straggler thresholds come from.

Runs `llmtk train --nproc-per-node 2` on a corpus of the standard library's docstrings,
RUNS times healthy and RUNS times with rank 1's worker stopped (SIGSTOP) for PAUSE seconds
out of every 2*PAUSE, and prints each run's per-row lag of each rank (the other rank's
comm wait minus its own, as a share of the step) and what detect_straggler says. Runs
alternate between the `fit` half (even run numbers: thresholds chosen on these) and the
`check` half (odd: reported).

    nice python benchmarks/rank_noise.py [RUNS] [STEPS]
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from llmtk.curves.logs import load_run  # noqa: E402
from llmtk.curves.ranks import _per_rank, _step, detect_straggler  # noqa: E402

PAUSE = 0.05
SCORE = os.environ.get("SCORE", "max")  # max: of comm lag and stall excess; comm: lag only
TINY = ["--layers", "2", "--d-model", "64", "--heads", "4", "--seq-len", "64", "--warmup",
        "2", "--lr", "3e-3", "-q", "--batch-size", "2", "--threads", "1"]


def corpus(d: str) -> str:
    path = os.path.join(d, "docs.jsonl")
    with open(path, "w") as f:
        for name in ["json", "os", "re", "collections", "itertools", "functools", "pathlib"]:
            for attr, obj in inspect.getmembers(importlib.import_module(name)):
                doc = inspect.getdoc(obj)
                if doc and len(doc) > 200 and not attr.startswith("_"):
                    f.write(json.dumps({"id": f"{name}.{attr}", "text": doc}) + "\n")
    return path


def worker(out: str, rank: int) -> int | None:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            continue
        if out.encode() in cmd and f"RANK={rank}".encode() in environ:
            return int(pid)
    return None


def pause_loop(pid: int, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(PAUSE)
            os.kill(pid, signal.SIGCONT)
            time.sleep(PAUSE)
        except ProcessLookupError:
            return


def one_run(data: str, out: str, steps: int, paused: bool) -> str:
    argv = [sys.executable, "-m", "llmtk", "train", "--data", data, "--out", out,
            "--cache-dir", os.path.join(os.path.dirname(data), "cache"), *TINY,
            "--steps", str(steps), "--log-every", "5", "--nproc-per-node", "2"]
    env = {**os.environ, "PYTHONPATH": ROOT}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stop = threading.Event()
    if paused:
        pid = None
        while pid is None and proc.poll() is None:
            time.sleep(0.05)
            pid = worker(out, 1) if os.path.exists(os.path.join(out, "metrics.jsonl")) else None
        if pid:
            threading.Thread(target=pause_loop, args=(pid, stop), daemon=True).start()
    _, err = proc.communicate()
    stop.set()
    if proc.returncode:
        sys.exit(err.decode()[-2000:])
    return out


def lags(run) -> list[list[float]]:
    out = []
    for row in _per_rank(run):
        r = row["ranks"]
        step = max(_step(r, i) for i in range(2))
        lag = [(r["comm_s"][1 - i] - r["comm_s"][i]) / step for i in range(2)]
        if SCORE == "max" and "stall_s" in r:
            lag = [max(lag[i], (r["stall_s"][i] - r["stall_s"][1 - i]) / step)
                   for i in range(2)]
        out.append(lag)
    return out


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    with tempfile.TemporaryDirectory() as d:
        data = corpus(d)
        for paused in (False, True):
            for i in range(runs):
                half = "fit" if i % 2 == 0 else "check"
                out = one_run(data, os.path.join(d, f"run-{paused}-{i}"), steps, paused)
                run = load_run(out)
                ls = lags(run)
                per_rank = [sorted(x[k] for x in ls) for k in range(2)]
                q = [(p[len(p) // 20], p[len(p) // 2], p[-1 - len(p) // 20]) for p in per_rank]
                found = [f.summary[:60] for f in detect_straggler(run)]
                print(f"{'paused' if paused else 'healthy'} {half} run {i}: rows {len(ls)}; "
                      f"lag p5/p50/p95 rank 0 {q[0][0]:+.2f}/{q[0][1]:+.2f}/{q[0][2]:+.2f} "
                      f"rank 1 {q[1][0]:+.2f}/{q[1][1]:+.2f}/{q[1][2]:+.2f}; "
                      f"finding: {found or 'none'}", flush=True)


if __name__ == "__main__":
    main()
