"""Start-up time of `llmtk estimate` next to `python -c pass` and `llmtk --help`, same run.

`llmtk estimate` is a planning tool people run in a loop of what-ifs; the issue
asks for an answer in under 0.3 s, so it must not import torch or numpy. This
times, interleaved, N runs each of:
  python -c pass                                   (the interpreter's floor)
  python -m llmtk --help                           (the CLI's own start-up)
  python -m llmtk estimate --model llama3-405b ... (a full table)
  python -m llmtk estimate ... --json
and prints the median, the minimum, and the ratio to `python -c pass`.

Reproduce:  .venv/bin/python benchmarks/estimate_startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARGS = ["--model", "llama3-405b", "--tokens", "15.6T", "--gpus", "16384xH100", "--tp", "8",
        "--pp", "16", "--zero", "1", "--sequence-parallel", "--global-batch", "2048"]
CASES = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "llmtk --help": [sys.executable, "-m", "llmtk", "--help"],
    "llmtk estimate (table)": [sys.executable, "-m", "llmtk", "estimate", *ARGS],
    "llmtk estimate --json": [sys.executable, "-m", "llmtk", "estimate", *ARGS, "--json"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    runs = ap.parse_args().runs
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    times: dict[str, list[float]] = {k: [] for k in CASES}
    for _ in range(runs):
        for name, cmd in CASES.items():  # interleaved, so load changes hit every case alike
            t0 = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True, env=env, cwd=ROOT)
            times[name].append(time.perf_counter() - t0)
    floor = statistics.median(times["python -c pass"])
    print(f"{'command':28} {'median s':>9} {'min s':>7} {'x python -c pass':>17}")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:28} {med:9.3f} {min(ts):7.3f} {med / floor:17.1f}")
    est = statistics.median(times["llmtk estimate (table)"])
    helps = statistics.median(times["llmtk --help"])
    print(f"\nestimate over --help: +{est - helps:.3f} s; "
          f"{'under' if est < 0.3 else 'OVER'} the 0.3 s target ({os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
