"""Start-up time of `llmtk --help` against a bare `python -c pass`, in the same run.

Reproduce: `make bench` or `.venv/bin/python benchmarks/startup.py [--runs 20]`.
Goal: `llmtk --help` under 0.3 s. The test suite only asserts that
--help imports no heavy library; the time is measured here, not asserted.
"""

import argparse
import sys

from _common import LLMTK, timed


def best(cmd: list[str], runs: int) -> float:
    return min(timed(cmd)[0] for _ in range(runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    bare = best([sys.executable, "-c", "pass"], args.runs)
    rows = [("python -c pass", bare)]
    for argv in (["--help"], ["clean", "--help"], ["estimate", "--help"], ["train", "--help"]):
        rows.append(("llmtk " + " ".join(argv), best([*LLMTK, *argv], args.runs)))
    print(f"{'command':32} {'best of ' + str(args.runs):>12} {'vs python':>10}")
    for name, seconds in rows:
        print(f"{name:32} {seconds * 1000:10.0f} ms {seconds / bare:9.1f}x")
    verdict = "meets" if rows[1][1] < 0.3 else "MISSES"
    print(f"\nllmtk --help: {rows[1][1]:.3f} s ({verdict} the 0.3 s goal)")


if __name__ == "__main__":
    main()
