"""`llmtk dedup` on 1M synthetic documents: wall time, peak memory, state bytes per document.

Generates N documents (default 1,000,000) of ~80 words drawn from a 50,000-word
made-up vocabulary, each with a string id; 10 % of them are near-copies of an
earlier document (2 words substituted) and 2 % exact copies. Writes them to a
temporary plain JSONL file, then runs `llmtk dedup FILE --stats S > /dev/null`
(stdout redirected by the caller; no output path is a device) as one process on one
core and reports its wall time, peak RSS (wait4 rusage) and what it dropped.
The baseline RSS of `llmtk dedup` on a 1-record input is reported too, so the
difference is the state for N documents.

Reproduce:

    make setup
    .venv/bin/python benchmarks/dedup_scale.py            # 1M documents, ~10 min on 1 core
    .venv/bin/python benchmarks/dedup_scale.py --docs 100000
"""

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
PY = ROOT / ".venv" / "bin" / "python"


def generate(path: Path, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    syll = np.array(["ka", "to", "ri", "mu", "sen", "lo", "pa", "dri", "ve", "no", "shi", "tra"])
    vocab = sorted({"".join(rng.choice(syll, size=rng.integers(2, 5))) for _ in range(80000)})
    vocab = np.array(vocab[:50000], dtype=object)
    zipf = 1.0 / np.arange(1, len(vocab) + 1)
    cdf = np.cumsum(zipf / zipf.sum())
    recent: list[np.ndarray] = []  # documents that later ones copy from
    block = 10000
    with open(path, "w") as f:
        for start in range(0, n, block):
            m = min(block, n - start)
            lengths = rng.integers(60, 100, size=m)
            words = np.searchsorted(cdf, rng.random(lengths.sum()))  # Zipf word ids
            ends = np.cumsum(lengths)
            kinds = rng.random(m)
            lines = []
            for j in range(m):
                i = start + j
                doc = words[ends[j] - lengths[j] : ends[j]]
                if recent and kinds[j] < 0.10:  # near copy: 2 words substituted
                    doc = recent[rng.integers(len(recent))].copy()
                    doc[rng.integers(0, len(doc), size=2)] = rng.integers(0, len(vocab), size=2)
                elif recent and kinds[j] < 0.12:  # exact copy
                    doc = recent[rng.integers(len(recent))]
                if len(recent) < 20000:
                    recent.append(doc)
                else:
                    recent[rng.integers(len(recent))] = doc
                text = " ".join(vocab[doc])
                lines.append(f'{{"id": "doc-{i:07d}", "text": "{text}"}}\n')
            f.write("".join(lines))


def run(cmd: list[str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL)  # records go nowhere
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return time.perf_counter() - t0, usage.ru_maxrss * 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dedup-scale-"))
    try:
        src = work / "docs.jsonl"
        t0 = time.perf_counter()
        generate(src, args.docs, args.seed)
        print(f"generated {args.docs:,} documents, {src.stat().st_size / 1e6:.0f} MB, "
              f"in {time.perf_counter() - t0:.0f} s")
        pin = ["taskset", "-c", "0"] if shutil.which("taskset") and args.workers == 1 else []
        one = work / "one.jsonl"
        one.write_text(src.open().readline())
        _, base_rss = run([*pin, str(PY), "-m", "llmtk", "dedup", str(one), "-q"])
        stats = work / "stats.json"
        wall, rss = run([*pin, str(PY), "-m", "llmtk", "dedup", str(src), "-q",
                         "--stats", str(stats), "--workers", str(args.workers)])
        s = json.loads(stats.read_text())
        print(f"llmtk dedup --workers {args.workers}: {wall:.1f} s wall, "
              f"{args.docs / wall:,.0f} docs/s, {s['bytes_in'] / 1e6 / wall:.1f} MB/s")
        print(f"peak RSS {rss / 2**20:.0f} MiB (baseline {base_rss / 2**20:.0f} MiB): state "
              f"{(rss - base_rss) / args.docs * 1e6 / 2**30:.2f} GiB per 1M documents")
        print(f"records in {s['records_in']:,}, out {s['records_out']:,}, dropped {s['dropped']}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
