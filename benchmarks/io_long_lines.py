"""Very long lines: `llmtk cat` on one 200 MB line vs on 200 MB of ordinary records.

Reading must be linear in the line length: the ratio of the
long-line run to the ordinary run, in wall time and in peak memory, should be
near 1, not grow with the line. Both files are plain JSONL of the same size;
stdout goes to a file (no output path is a device). Peak RSS comes from wait4.
`--max-record-bytes` is raised above the line so that the record is read, not
skipped; a second long-line run with the default 64 MiB limit shows the cost
of skipping it. The peer is `jq -c .` on the same two files.

Reproduce:
    .venv/bin/python benchmarks/io_long_lines.py [--mb 200] [--checkout PATH]

`--checkout` runs another checkout's llmtk (e.g. an export of main) for a
before/after comparison.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(cmd: list[str], cwd: Path, out: Path) -> tuple[float, int, int]:
    """(wall seconds, peak RSS bytes, exit status) of cmd with stdout into `out`."""
    with open(out, "wb") as f:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=f, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - t0, usage.ru_maxrss * 1024, os.waitstatus_to_exitcode(status)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--checkout", type=Path, default=ROOT)
    args = ap.parse_args()
    n = args.mb * 1_000_000
    llmtk = [sys.executable, "-m", "llmtk", "cat", "-q"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        long, normal = tmp / "long.jsonl", tmp / "normal.jsonl"
        # Written in 1 MB pieces: a child forked while this process held 200 MB would
        # count those pages in its peak RSS.
        piece = b"a" * 1_000_000
        with open(long, "wb") as f:
            f.write(b'{"text": "')
            for _ in range(args.mb):
                f.write(piece)
            f.write(b'"}\n')
        record = b'{"text": "' + b"a" * 987 + b'"}\n'  # 1000 bytes
        with open(normal, "wb") as f:
            for _ in range(args.mb):
                f.write(record * 1000)
        del piece
        print(f"{args.mb} MB: one line vs {args.mb * 1000:,} records of 1 kB; "
              f"llmtk from {args.checkout}")
        cases = {
            "ordinary records": [*llmtk, str(normal)],
            "one long line": [*llmtk, str(long), "--max-record-bytes", str(2 * n)]
            if (args.checkout / "llmtk" / "io" / "atomic.py").exists() else [*llmtk, str(long)],
        }
        if (args.checkout / "llmtk" / "io" / "atomic.py").exists():
            cases["one long line, skipped (64 MiB limit)"] = [
                *llmtk, str(long), "--on-error", "skip"]
        if shutil.which("jq"):  # the peer: jq reads JSON Lines too
            cases["jq -c . (ordinary records)"] = ["jq", "-c", ".", str(normal)]
            cases["jq -c . (one long line)"] = ["jq", "-c", ".", str(long)]
        results = {}
        for name, cmd in cases.items():
            wall, rss, code = run(cmd, args.checkout, tmp / "out.jsonl")
            results[name] = (wall, rss)
            print(f"{name:40} {wall:7.1f} s  {rss / 2**20:7.0f} MiB  exit {code}")
        w0, m0 = results["ordinary records"]
        w1, m1 = results["one long line"]
        print(f"llmtk long line / ordinary: {w1 / w0:.2f}x time, {m1 / m0:.2f}x peak memory")
        if "jq -c . (one long line)" in results:
            wj, mj = results["jq -c . (one long line)"]
            print(f"llmtk / jq on the long line: {w1 / wj:.2f}x time, {m1 / mj:.2f}x memory")


if __name__ == "__main__":
    main()
