"""llmtk dedup vs datatrove's 4-stage MinHash pipeline: same corpus, same parameters, one core.

Both read the same plain JSONL (the corpus decompressed once beforehand) and
write the kept documents as JSONL. Parameters: word 5-grams, 16 buckets x 7
hashes, 64-bit xxhash (llmtk's defaults; datatrove is given the same banding,
its own default is 14 x 8). llmtk also verifies each band match on the whole
signature (its default --verify 0.5), which datatrove does not do.
datatrove runs signatures -> buckets (16 tasks, one after another) -> cluster
-> filter with LocalPipelineExecutor(workers=1); llmtk runs `llmtk dedup`
with --workers 1. Each is pinned to one CPU with `taskset -c 0` (when
available). Wall time is measured around each process, peak RSS from
wait4's rusage of each process (datatrove: the largest stage), and CPU time
(user + system, datatrove: the sum of its stages), which a busy machine inflates
less than wall time.

Reproduce:

    make setup
    python3.11 benchmarks/manpages_corpus.py      # -> benchmarks/out/manpages-sample.jsonl
    nice python3.11 benchmarks/dedup_vs_datatrove.py benchmarks/out/manpages-sample.jsonl \
        [MORE.jsonl.zst ...]

The first run creates benchmarks/.venvs/datatrove (datatrove 0.10.1 with
spaCy for its English word tokenizer) with pip.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import datatrove_python

ROOT = Path(__file__).resolve().parent.parent
LLMTK_PY = ROOT / ".venv" / "bin" / "python"

DATATROVE_SCRIPT = r'''
import sys
from datatrove.executor.local import LocalPipelineExecutor
from datatrove.pipeline.dedup.minhash import (
    MinhashConfig, MinhashDedupBuckets, MinhashDedupCluster, MinhashDedupFilter,
    MinhashDedupSignature)
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter
from datatrove.utils.hashing import HashConfig

stage, src_dir, work = sys.argv[1], sys.argv[2], sys.argv[3]
config = MinhashConfig(n_grams=5, num_buckets=16, hashes_per_bucket=7, seed=1,
                       hash_config=HashConfig(precision=64, hash_fc="xxhash"))
reader = lambda: JsonlReader(src_dir, glob_pattern="*.jsonl", compression=None)
if stage == "signatures":
    steps, tasks = [reader(), MinhashDedupSignature(output_folder=f"{work}/sigs", config=config)], 1
elif stage == "buckets":
    step = MinhashDedupBuckets(input_folder=f"{work}/sigs", output_folder=f"{work}/buckets",
                               config=config)
    steps, tasks = [step], config.num_buckets
elif stage == "cluster":
    step = MinhashDedupCluster(input_folder=f"{work}/buckets",
                               output_folder=f"{work}/remove_ids", config=config)
    steps, tasks = [step], 1
else:
    steps, tasks = [reader(), MinhashDedupFilter(input_folder=f"{work}/remove_ids"),
                    JsonlWriter(f"{work}/out", compression=None)], 1
LocalPipelineExecutor(pipeline=steps, tasks=tasks, workers=1, logging_dir=f"{work}/logs/{stage}",
                      skip_completed=False).run()
'''


def pinned(cmd: list[str]) -> list[str]:
    return (["taskset", "-c", "0"] if shutil.which("taskset") else []) + cmd


def timed(cmd: list[str], env: dict | None = None) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + system) and peak RSS (bytes) of one child process,
    from os.wait4's own rusage. On a shared machine CPU time is the steadier measure: wall
    time also counts the time the pinned core spent on other jobs."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(pinned(cmd), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    err = proc.stderr.read()  # type: ignore[union-attr]
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{err.decode()[-3000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024  # KiB on Linux


def count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def ids(path: Path) -> set:
    with open(path, "rb") as f:
        return {json.loads(line)["id"] for line in f}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("corpus", nargs="+",
                    help="JSONL corpora (.zst/.gz/plain), each measured on its own, e.g. "
                         "benchmarks/out/manpages-sample.jsonl (manpages_corpus.py builds it)")
    ap.add_argument("--keep", help="keep the work folders under this folder")
    args = ap.parse_args()
    python = datatrove_python()
    results = []
    for i, corpus in enumerate(args.corpus):
        work = (Path(args.keep) / f"corpus{i}" if args.keep
                else Path(tempfile.mkdtemp(prefix="dedup-vs-dt-")))
        results.append(compare(corpus, work, python))
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if len(results) > 1:
        print("\nsummary (datatrove / llmtk):")
        for corpus, wall_ratio, cpu_ratio in results:
            print(f"  {corpus}: {wall_ratio:.1f}x by wall time, {cpu_ratio:.1f}x by CPU time")


def compare(corpus: str, work: Path, python: Path) -> tuple[str, float, float]:
    src = work / "src"
    src.mkdir(parents=True, exist_ok=True)
    plain = src / "corpus.jsonl"
    subprocess.run([str(LLMTK_PY), "-m", "llmtk", "cat", corpus, "-o", str(plain), "-q"],
                   check=True, cwd=ROOT)
    n_in = count_lines(plain)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = work / "llmtk.jsonl"
    llmtk_wall, llmtk_cpu, llmtk_rss = timed(
        [str(LLMTK_PY), "-m", "llmtk", "dedup", str(plain), "-o", str(out), "-q", "--workers", "1"],
        env=env)
    n_llmtk = count_lines(out)

    script = work / "dt_stage.py"
    script.write_text(DATATROVE_SCRIPT)
    dt_wall, dt_cpu, dt_rss, stage_walls = 0.0, 0.0, 0, {}
    for stage in ("signatures", "buckets", "cluster", "filter"):
        wall, cpu, rss = timed([str(python), str(script), stage, str(src), str(work / "dt")],
                               env=env)
        stage_walls[stage] = wall
        dt_wall += wall
        dt_cpu += cpu
        dt_rss = max(dt_rss, rss)
    n_dt = sum(count_lines(p) for p in (work / "dt" / "out").glob("*.jsonl"))
    kept_llmtk = ids(out)
    kept_dt = set().union(*(ids(p) for p in (work / "dt" / "out").glob("*.jsonl")))

    print(f"corpus: {corpus}  ({n_in:,} documents, {plain.stat().st_size / 1e6:.1f} MB)")
    print(f"{'tool':<12}{'wall s':>10}{'CPU s':>10}{'peak RSS MB':>14}{'docs out':>12}")
    print(f"{'llmtk':<12}{llmtk_wall:>10.2f}{llmtk_cpu:>10.2f}{llmtk_rss / 2**20:>14.0f}"
          f"{n_llmtk:>12,}")
    print(f"{'datatrove':<12}{dt_wall:>10.2f}{dt_cpu:>10.2f}{dt_rss / 2**20:>14.0f}{n_dt:>12,}")
    print("datatrove stages (wall): " + ", ".join(f"{k} {v:.1f}s" for k, v in stage_walls.items()))
    print(f"agreement: {len(kept_llmtk & kept_dt):,} kept by both, "
          f"{len(kept_llmtk - kept_dt):,} only by llmtk, {len(kept_dt - kept_llmtk):,} only by "
          "datatrove")
    wall_ratio, cpu_ratio = dt_wall / llmtk_wall, dt_cpu / llmtk_cpu
    print(f"speed-up (datatrove / llmtk): {wall_ratio:.1f}x by wall time, {cpu_ratio:.1f}x by "
          "CPU time", flush=True)
    return corpus, wall_ratio, cpu_ratio


if __name__ == "__main__":
    main()
