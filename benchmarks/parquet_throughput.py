"""Parquet pass-through throughput: llmtk Parquet -> Parquet vs its JSONL/zstd path vs
pyarrow.parquet read + write alone.

The same documents three ways, each pinned to one core (`taskset -c 0`), interleaved,
best of N (wall and CPU time each). Throughput is MB of the corpus as uncompressed JSONL
per second, so the three numbers are comparable whatever the file formats' sizes:

- `llmtk cat in.parquet -o out.parquet`: every row becomes a record (a dict), is
  validated, and is written back in row groups with the schema check;
- `llmtk cat in.jsonl.zst -o out.jsonl.zst`: the JSONL path of every tool;
- pyarrow alone, streaming as llmtk does (`ParquetFile.iter_batches` ->
  `ParquetWriter.write_batch`, zstd): the floor of what any Parquet pass can cost.

Reproduce:
    .venv/bin/python benchmarks/parquet_throughput.py [CORPUS.jsonl.zst] [--copies 2] [--runs 3]

The corpus is the argument (a JSONL file, plain or zstd); without one, a corpus built
from Python's own docstrings (see io_throughput.py).
"""

import argparse
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard
from _common import LLMTK, corpus_bytes, one_core, timed
from io_throughput import synthetic_corpus

PYARROW_PASS = """
import sys
import pyarrow.parquet as pq
src = pq.ParquetFile(sys.argv[1])
with pq.ParquetWriter(sys.argv[2], src.schema_arrow, compression="zstd") as w:
    for batch in src.iter_batches(batch_size=4096):
        w.write_batch(batch)
"""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("corpus", nargs="?", help="JSONL(.zst) corpus (default: one built "
                        "from the installed modules' docstrings)")
    parser.add_argument("--copies", type=int, default=2, help="concatenate the corpus N times")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        raw = (corpus_bytes(args.corpus) if args.corpus else synthetic_corpus()) * args.copies
        mb = len(raw) / 1e6
        jsonl = tmp / "in.jsonl.zst"
        jsonl.write_bytes(zstandard.ZstdCompressor(level=3).compress(raw))
        table = pa.Table.from_pylist([__import__("orjson").loads(x) for x in raw.splitlines()])
        src = tmp / "in.parquet"
        pq.write_table(table, src, compression="zstd", row_group_size=16384)
        print(f"input: {mb:.1f} MB as JSONL, {table.num_rows:,} records, "
              f"{src.stat().st_size / 1e6:.1f} MB Parquet (zstd), "
              f"{jsonl.stat().st_size / 1e6:.1f} MB .jsonl.zst; best of {args.runs}")
        cases = {
            "llmtk cat parquet -> parquet": one_core(
                [*LLMTK, "cat", str(src), "-o", f"{tmp}/out.parquet", "-q"]),
            "pyarrow.parquet read + write": one_core(
                [sys.executable, "-c", PYARROW_PASS, str(src), f"{tmp}/peer.parquet"]),
            "llmtk cat jsonl.zst -> jsonl.zst": one_core(
                [*LLMTK, "cat", str(jsonl), "-o", f"{tmp}/out.jsonl.zst", "-q"]),
        }
        best: dict[str, tuple[float, float]] = {}
        for _ in range(args.runs):
            for name, cmd in cases.items():
                wall, cpu = timed(cmd)
                prev = best.get(name, (wall, cpu))
                best[name] = (min(wall, prev[0]), min(cpu, prev[1]))
        out = pq.read_table(f"{tmp}/out.parquet")
        assert out.num_rows == table.num_rows and out.column("text") == table.column("text"), \
            "llmtk changed the records"

    print(f"{'':34} {'wall s':>8} {'cpu s':>8} {'MB/s wall':>10} {'MB/s cpu':>9}")
    for name, (wall, cpu) in best.items():
        print(f"{name:34} {wall:8.2f} {cpu:8.2f} {mb / wall:10.1f} {mb / cpu:9.1f}")
    # On a shared machine wall time mostly measures the neighbours; CPU seconds (process
    # start-up included) are what the pass itself costs. Both ratios are printed.
    ours, peer, jsonl_path = (best[n] for n in cases)
    for i, what in ((0, "wall"), (1, "CPU")):
        print(f"\n[{what}] llmtk parquet / pyarrow alone: {peer[i] / ours[i]:.2f}x   "
              f"llmtk parquet / llmtk jsonl.zst: {jsonl_path[i] / ours[i]:.2f}x", end="")
    print()


if __name__ == "__main__":
    main()
