"""Pass-through throughput: .jsonl.zst -> llmtk -> .jsonl.zst vs `zstdcat | zstd`.

Both run in the same process tree, interleaved, best of N. llmtk runs pinned
to one core (`taskset -c 0`) and parses and validates every record (it is the
I/O layer every tool uses: `llmtk cat`); the peer is the zstd CLI pipe in its
natural two-process form, and again pinned to one core. Throughput is MB of
uncompressed JSONL per second of wall time.

Reproduce:
    make bench
    .venv/bin/python benchmarks/io_throughput.py [CORPUS.jsonl.zst] [--copies 4] [--runs 3]

The corpus is the argument (a JSONL file, plain or zstd); without one, a corpus built
from Python's own docstrings (pydoc on the installed modules).
Goal: llmtk >= 50% of the zstd CLI pipe's throughput.
"""

import argparse
import pydoc
import sys
import tempfile
from pathlib import Path

import orjson
import zstandard
from _common import LLMTK, corpus_bytes, one_core, timed


def synthetic_corpus() -> bytes:
    import pkgutil

    lines = []
    names = sorted(m.name for m in pkgutil.iter_modules() if not m.name.startswith("_"))
    for i, mod in enumerate(names):
        try:
            text = pydoc.render_doc(mod, renderer=pydoc.plaintext)
        except Exception:
            continue
        lines.append(orjson.dumps({"id": f"py-{i}", "text": text, "source": "pydoc"}) + b"\n")
        if len(lines) >= 400:
            break
    return b"".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("corpus", nargs="?", help="JSONL(.zst) corpus (default: one built "
                        "from the installed modules' docstrings)")
    parser.add_argument("--copies", type=int, default=4, help="concatenate the corpus N times")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.corpus:
            raw = corpus_bytes(args.corpus)
        else:
            raw = synthetic_corpus()
        raw = raw * args.copies
        src = tmp / "in.jsonl.zst"
        src.write_bytes(zstandard.ZstdCompressor(level=3).compress(raw))
        mb = len(raw) / 1e6
        records = raw.count(b"\n")
        print(f"input: {mb:.1f} MB uncompressed, {src.stat().st_size / 1e6:.1f} MB zstd, "
              f"{records:,} records; best of {args.runs}")

        cases = {
            "zstdcat | zstd -3 (2 processes)": (
                f"zstdcat {src} | zstd -q -3 > {tmp}/peer.zst", True),
            "zstdcat | zstd -3 (one core)": (
                f"taskset -c 0 sh -c 'zstdcat {src} | zstd -q -3 > {tmp}/peer1.zst'", True),
            "llmtk cat (one core)": (
                one_core([*LLMTK, "cat", str(src), "-o", f"{tmp}/llmtk.jsonl.zst", "-q"]), False),
        }
        best: dict[str, tuple[float, float]] = {}
        for _ in range(args.runs):
            for name, (cmd, shell) in cases.items():
                wall, cpu = timed(cmd, shell=shell)
                if name not in best or wall < best[name][0]:
                    best[name] = (wall, cpu)

        check = zstandard.ZstdDecompressor().stream_reader(
            open(f"{tmp}/llmtk.jsonl.zst", "rb"), read_across_frames=True).read()
        assert check == raw, "llmtk cat changed the bytes"

    print(f"{'':36} {'wall s':>8} {'cpu s':>8} {'MB/s':>8}")
    for name, (wall, cpu) in best.items():
        print(f"{name:36} {wall:8.2f} {cpu:8.2f} {mb / wall:8.1f}")
    ours = mb / best["llmtk cat (one core)"][0]
    peer = mb / best["zstdcat | zstd -3 (2 processes)"][0]
    peer1 = mb / best["zstdcat | zstd -3 (one core)"][0]
    print(f"\nllmtk / zstd pipe: {ours / peer:.2f}x  (one core vs the 2-process pipe; "
          "goal >= 0.50)")
    print(f"llmtk / zstd pipe on one core: {ours / peer1:.2f}x")
    sys.exit(0)


if __name__ == "__main__":
    main()
