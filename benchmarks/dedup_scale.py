"""The dedup stages at 1M, 10M (, 100M) documents: peak RSS of each stage's largest task,
wall time per stage, bytes on disk per document; and what a file-sharded task reads.

Stage benchmark (`stages`, default). For D documents in N = D / 1M signature
tasks, it writes, in the signatures stage's own on-disk format (the stage's run
writer, llmtk.dedup.stages._RunWriter), synthetic signatures: every document's
band keys (the default 16) and exact key are a hash of its identity, except that
10 % of the documents are near copies of a random earlier document (each band
key copied with probability 0.66, about Jaccard 0.95 at 7 rows; each of the 112
low signature bytes that --verify compares copied with probability 0.95) and 2 %
exact copies (every key and byte copied). Computing real MinHash for 100M
documents would take days on 2 cores; the stages after `signatures` only ever
see keys. Each task's input file is a real JSONL file with the same number of
(tiny) records, so the filter stage runs for real. Then it runs, as separate
processes measured with wait4: one real `signatures` task over one of those
files (its memory is per task: the same at every D), every one of the M = 64
`buckets` tasks, `clusters`, and `filter` for task 0, and reports per stage the
largest task's peak RSS and wall time, and the bytes per document in each stage
folder.

Read benchmark (`reads`): a `--shard 0/100` task of `llmtk cat` over 100
files reads (rusage read bytes of the process, from /proc/PID/io) about 1/100
of the corpus, against the same task over stdin (record-hash sharding).

Reproduce:

    make setup
    .venv/bin/python benchmarks/dedup_scale.py                      # 1M and 10M
    .venv/bin/python benchmarks/dedup_scale.py --docs 1e6 1e7 1e8   # needs ~35 GB of disk
    .venv/bin/python benchmarks/dedup_scale.py --bench reads
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PY = ROOT / ".venv" / "bin" / "python"
LLMTK = [str(PY), "-m", "llmtk"]
PER_TASK = 1_000_000
BUCKET_TASKS = 64


def mix64(x: np.ndarray) -> np.ndarray:
    from llmtk.dedup.minhash import fmix64

    return fmix64(x.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(12345))


def low_bytes(docs: np.ndarray, permutations: int) -> np.ndarray:
    """(D, P) uint8: a document's low signature bytes, a function of its identity only."""
    words = -(-permutations // 8)  # each 64-bit hash gives 8 of the bytes
    out = np.empty((len(docs), permutations), np.uint8)
    salt = np.arange(words, dtype=np.uint64) + np.uint64(1 << 40)
    for lo in range(0, len(docs), 100_000):  # in slices: the temporaries stay small
        part = docs[lo:lo + 100_000].astype(np.uint64)
        h = mix64(part[:, None] * np.uint64(words) + salt)  # (d, words) uint64
        out[lo:lo + 100_000] = h.view(np.uint8).reshape(len(part), -1)[:, :permutations]
    return out


def write_synthetic(work: Path, docs: int, seed: int) -> list[Path]:
    """N signature parts + N input files of PER_TASK tiny records each; returns the files."""
    import orjson

    from llmtk.dedup.config import DedupConfig
    from llmtk.dedup.stages import SIG_KIND, VERSION, _done, _part, _RunWriter
    from llmtk.io import write_json_atomically
    from llmtk.io.shard import RECORD_BITS

    config = DedupConfig()
    nb = config.bands
    tasks = max(1, docs // PER_TASK)
    inputs = work / "inputs"
    inputs.mkdir()
    line = b'{"text":"x"}\n' * PER_TASK
    files = []
    for k in range(tasks):
        f = inputs / f"{k:05d}.jsonl"
        f.write_bytes(line)
        files.append(f)
    sigs = work / "sigs"
    sigs.mkdir()
    rng = np.random.default_rng(seed)
    band_ids = np.arange(nb + 1, dtype=np.uint64)
    for k in range(tasks):
        g = np.arange(k * PER_TASK, (k + 1) * PER_TASK, dtype=np.uint64)  # global numbers
        kind = rng.random(PER_TASK)
        src = (rng.random(PER_TASK) * g).astype(np.uint64)  # a random earlier document
        near, exact = (kind < 0.10) & (g > 0), (kind >= 0.10) & (kind < 0.12) & (g > 0)
        own = mix64(g[:, None] * np.uint64(nb + 1) + band_ids)  # (D, B + 1)
        copied = mix64(src[:, None] * np.uint64(nb + 1) + band_ids)
        take = exact[:, None] | (near[:, None] & (rng.random((PER_TASK, nb + 1)) < 0.66))
        take[near, nb] = False  # a near copy has its own exact key
        keys = np.where(take, copied, own)
        keys[keys == 0] = 1
        part = sigs / _part(k, tasks)
        part.mkdir()
        writer = _RunWriter(str(part), config, PER_TASK)
        doc_keys = (np.uint64(k) << np.uint64(RECORD_BITS)) | np.arange(PER_TASK,
                                                                         dtype=np.uint64)
        low = None
        if config.verify:  # the default: the low byte of every signature value travels too
            low = low_bytes(g, config.permutations)
            src_low = low_bytes(src, config.permutations)
            # A near copy (J ~0.95) shares each MinHash value with probability J.
            same = exact[:, None] | (near[:, None] & (rng.random(low.shape) < 0.95))
            low = np.where(same, src_low, low)
        batch = SimpleNamespace(exact=keys[:, nb].copy(), bands=keys[:, :nb].copy(), low=low)
        writer.add(doc_keys, batch, [None] * PER_TASK)
        writer.finish()
        (part / "files.json").write_bytes(orjson.dumps(
            {"ordinals": [k], "records": [PER_TASK], "runs": writer.runs}))
        write_json_atomically(_done(str(sigs), _part(k, tasks)), {"documents": PER_TASK})
    write_json_atomically(str(sigs / "meta.json"), {
        "kind": SIG_KIND, "version": VERSION, "config": config.to_dict(), "tasks": tasks,
        "files": [str(f) for f in files]})
    return files


def measure(cmd: list[str]) -> tuple[float, int]:
    """(wall seconds, peak RSS bytes) of one process; stdout to a file, never /dev/null."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out)
        _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return time.perf_counter() - t0, usage.ru_maxrss * 1024


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def bench_stages(docs: int, seed: int, keep: bool, signatures: tuple | None,
                 bucket_tasks: int = BUCKET_TASKS) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"dedup-scale-{docs}-", dir=os.environ.get("TMPDIR")))
    try:
        # Generated in a child process: a process's peak RSS is inherited through fork and
        # exec, so this driver stays small and the stage processes' numbers are their own.
        gen, _ = measure([str(PY), __file__, "--generate", str(work), "--docs", str(docs),
                          "--seed", str(seed)])
        files = sorted((work / "inputs").iterdir())
        res = {"docs": docs, "tasks": len(files), "generate_s": gen}
        # One real signatures task (its own file): per-task work, the same at any corpus size.
        res["signatures"] = signatures or measure(
            [*LLMTK, "dedup", "signatures", str(files[0]), "-o", str(work / "sigs-real"), "-q"])
        walls, rss = [], []
        for k in range(bucket_tasks):
            w, r = measure([*LLMTK, "dedup", "buckets", str(work / "sigs"), "--shard",
                            f"{k}/{bucket_tasks}", "-o", str(work / "buckets"), "-q"])
            walls.append(w)
            rss.append(r)
        res["buckets"] = (max(walls), max(rss), sum(walls))
        res["clusters"] = measure([*LLMTK, "dedup", "clusters", str(work / "buckets"), "-o",
                                   str(work / "clusters"), "-q"])
        out = work / "out"
        out.mkdir()
        res["filter"] = measure([*LLMTK, "dedup", "filter", str(work / "inputs"), "--index",
                                 str(work / "clusters"), "--shard", f"0/{len(files)}", "-o",
                                 str(out / "00000.jsonl"), "-q"])
        kept = sum(1 for _ in open(out / "00000.jsonl", "rb"))
        res["filter_kept"] = kept
        for stage in ("sigs", "buckets", "clusters"):
            res[f"{stage}_bytes_per_doc"] = du(work / stage) / docs
        return res
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def print_stages(results: list[dict]) -> None:
    mib = 2**20
    print(f"\n{'docs':>12} {'stage':<11} {'largest task RSS':>17} {'largest task wall':>18} "
          f"{'all tasks wall':>15} {'disk B/doc':>11}")
    for r in results:
        rows = [
            ("signatures", r["signatures"][1], r["signatures"][0],
             r["signatures"][0] * r["tasks"], r["sigs_bytes_per_doc"]),
            ("buckets", r["buckets"][1], r["buckets"][0], r["buckets"][2],
             r["buckets_bytes_per_doc"]),
            ("clusters", r["clusters"][1], r["clusters"][0], r["clusters"][0],
             r["clusters_bytes_per_doc"]),
            ("filter", r["filter"][1], r["filter"][0], r["filter"][0] * r["tasks"], 0.0),
        ]
        for name, rss, wall, total, disk in rows:
            print(f"{r['docs']:>12,} {name:<11} {rss / mib:>13,.0f} MiB {wall:>16.1f} s "
                  f"{total:>13.0f} s {disk:>11.1f}")
        print(f"{'':>12} (synthetic signatures of {r['tasks']} tasks written in "
              f"{r['generate_s']:.0f} s; signatures/filter 'all tasks' = one task x N; "
              f"filter task 0 kept {r['filter_kept']:,} of {PER_TASK:,})")


class ReadBytes(threading.Thread):
    """Samples /proc/PID/io rchar (bytes read through read(2)) until the process exits."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.rchar = pid, 0

    def run(self) -> None:
        while True:
            try:
                with open(f"/proc/{self.pid}/io") as f:
                    for line in f:
                        if line.startswith("rchar:"):
                            self.rchar = max(self.rchar, int(line.split()[1]))
            except OSError:
                return
            time.sleep(0.005)


def read_bytes(cmd: list[str], stdin: Path | None) -> tuple[int, float]:
    """(bytes the process read, wall seconds)."""
    with tempfile.TemporaryFile() as out:
        src = open(stdin, "rb") if stdin else subprocess.DEVNULL
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, stdin=src, stdout=out)
        reader = ReadBytes(proc.pid)
        reader.start()
        proc.wait()
        wall = time.perf_counter() - t0
        reader.join()
        if stdin:
            src.close()
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return reader.rchar, wall


def bench_reads(files: int, per_file: int) -> None:
    import zstandard

    work = Path(tempfile.mkdtemp(prefix="shard-reads-"))
    try:
        d = work / "corpus"
        d.mkdir()
        rng = np.random.default_rng(0)
        vocab = [bytes(rng.integers(97, 123, size=rng.integers(2, 9)).astype(np.uint8))
                 for _ in range(5000)]
        frames = []
        for f in range(files):
            rows = b"".join(b'{"id":%d,"text":"%s"}\n' % (
                f * per_file + i, b" ".join(vocab[j] for j in rng.integers(0, 5000, 150)))
                for i in range(per_file))
            frames.append(zstandard.ZstdCompressor(level=3).compress(rows))
            (d / f"{f:05d}.jsonl.zst").write_bytes(frames[-1])
        total = du(d)
        whole = work / "whole.jsonl.zst"
        whole.write_bytes(b"".join(frames))  # the same corpus as one stream (frames concatenate)
        print(f"corpus: {files} files, {total / 1e6:.1f} MB compressed")
        base = work / "empty.jsonl"
        base.write_bytes(b"")
        startup = read_bytes([*LLMTK, "cat", str(base), "-o", str(work / "e.jsonl"), "-q"],
                             None)[0]
        print(f"(start-up alone reads {startup / 1e6:.1f} MB: Python modules; subtracted)")
        for label, cmd, stdin in (
                ("files, --shard 0/100", [*LLMTK, "cat", str(d), "--shard", "0/100"], None),
                ("stdin, --shard 0/100", [*LLMTK, "cat", "--shard", "0/100"], whole)):
            stats = work / "stats.json"
            cmd = [*cmd, "-o", str(work / "out.jsonl"), "--stats", str(stats), "-q"]
            rchar, wall = read_bytes(cmd, stdin)
            read = rchar - startup
            s = json.loads(stats.read_text())
            print(f"{label}: read {read / 1e6:7.2f} MB of {total / 1e6:.1f} MB "
                  f"({read / total:.4f} of the corpus), decompressed {s['bytes_in'] / 1e6:.1f} MB, "
                  f"kept {s['records_out']:,} of {files * per_file:,} records, {wall:.2f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", choices=("stages", "reads"), default="stages")
    ap.add_argument("--docs", type=float, nargs="+", default=[1e6, 1e7])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="keep the work folders")
    ap.add_argument("--bucket-tasks", type=int, default=BUCKET_TASKS,
                    help="M, the number of bucket tasks (fewer: more documents per task)")
    ap.add_argument("--no-real-signatures", action="store_true",
                    help="skip the real signatures task (its cost is per task, not per corpus)")
    ap.add_argument("--generate", help=argparse.SUPPRESS)  # internal: the child that generates
    args = ap.parse_args()
    if args.generate:
        write_synthetic(Path(args.generate), int(args.docs[0]), args.seed)
        return
    if args.bench == "reads":
        bench_reads(100, 2000)
        return
    results: list[dict] = []
    for d in args.docs:
        skip = (0.0, 0) if args.no_real_signatures else None
        r = bench_stages(int(d), args.seed, args.keep,
                         results[0]["signatures"] if results else skip, args.bucket_tasks)
        results.append(r)
        print_stages([r])
        sys.stdout.flush()
    print_stages(results)


if __name__ == "__main__":
    main()
