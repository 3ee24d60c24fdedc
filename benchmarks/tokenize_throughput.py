"""`llmtk train tokenize` per core against a bare `Tokenizer.encode_batch` loop and against
datatrove's DocumentTokenizer; its memory at 1x and 4x the data; and the start-up of
`llmtk train --data DIR` on token datasets of 10^6 and 10^8 documents.

Same text for all three encoders: the first --mb MB of the corpus's text as plain JSONL,
and the same tokenizer.json (trained by `llmtk train tokenizer` on that text unless
--tokenizer is given). Every encoder runs as its own process pinned to one CPU
(`taskset -c 0`) with RAYON_NUM_THREADS=1 (the `tokenizers` library's pool: one thread),
and is timed by the CPU time of its process (all threads) around its work only (imports
and the tokenizer's loading excluded), which a busy machine inflates less than wall
time; the best of --repeat interleaved rounds is kept:

- bare: the texts already in memory, `Tokenizer.encode_batch` on batches of 1,024, the
  ids taken out of each Encoding;
- llmtk: what `llmtk train tokenize DIR -o OUT` runs (StreamRun + tokenize_task):
  reading, JSON parsing, encoding, writing the part and committing it; in the same
  process as the bare loop, the two alternating round by round, so both see the same
  load on a shared machine;
- datatrove: JsonlReader -> DocumentTokenizer (datatrove 0.10.1, in
  benchmarks/.venvs/datatrove, created with pip on first use; EOS appended, no
  shuffling), LocalPipelineExecutor with one task.

Peak RSS comes from wait4's rusage of each process. Memory at 1x and 4x: one task over
the slice, then over four copies of it. The start-up runs build
synthetic datasets from sparse files (a meta.json, one part, the sizes its manifest
names; the same 10^9 tokens for both document counts) and time `TokenDataset.open` + the
first batch in a fresh process, and `llmtk train --data DIR --steps 1` end to end.

Reproduce:

    make setup
    nice .venv/bin/python benchmarks/tokenize_throughput.py \
        CORPUS.jsonl.zst --mb 8
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import corpus_bytes, datatrove_python, one_core  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PY = ROOT / ".venv" / "bin" / "python"

# llmtk's task and the bare loop in one process, alternately, round after round: on a
# machine that other jobs share, the two then see the same load.
LLMTK = r'''
import json, shutil, sys, time
from llmtk.io import StreamOptions, StreamRun
from llmtk.text.tokenizer import load_tokenizer
from llmtk.train.data.tokens import tokenize_task
src, tok_path, out, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
tok = load_tokenizer(tok_path)
bare_tok = tok._tok  # the tokenizers.Tokenizer itself
texts = [json.loads(line)["text"] for f in sorted(__import__("glob").glob(src + "/*.jsonl"))
         for line in open(f, encoding="utf-8")]
best = {"llmtk": 1e9, "bare": 1e9}
for _ in range(rounds):
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.process_time()
    with StreamRun("train tokenize", StreamOptions(inputs=[src], quiet=True),
                   output_dirs=[("-o", out)]) as run:
        tokenize_task(run, tok, out)
    best["llmtk"] = min(best["llmtk"], time.process_time() - t0)
    t0 = time.process_time()
    n = 0
    for i in range(0, len(texts), 1024):
        for e in bare_tok.encode_batch(texts[i:i + 1024], add_special_tokens=False):
            n += len(e.ids)
    best["bare"] = min(best["bare"], time.process_time() - t0)
print(json.dumps({**best, "tokens": n}))
'''

DATATROVE = r'''
import json, sys, time
from datatrove.executor.local import LocalPipelineExecutor
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.tokens import DocumentTokenizer
src, tok, out = sys.argv[1:4]
step = DocumentTokenizer(output_folder=out, tokenizer_name_or_path=tok,
                         eos_token="<|endoftext|>", batch_size=1024, shuffle_documents=False)
step.tokenizer  # loaded before the clock starts, as the others' are
t0 = time.process_time()
LocalPipelineExecutor(pipeline=[JsonlReader(src, glob_pattern="*.jsonl", compression=None), step],
                      tasks=1, workers=1, logging_dir=out + "/logs").run()
print(json.dumps({"cpu": time.process_time() - t0}))
'''


def run_rss(cmd, env=None) -> tuple[float, float, str, float]:
    """(wall seconds, peak RSS MB, stdout, CPU seconds) of one process, from wait4."""
    t0 = time.perf_counter()
    with open(os.devnull, "wb") as null, tempfile.TemporaryFile() as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=null, cwd=ROOT,
                             env={**os.environ, **(env or {})})
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        out.seek(0)
        text = out.read().decode()
    if status != 0:
        sys.exit(f"failed ({status}): {' '.join(map(str, cmd))}")
    return wall, usage.ru_maxrss / 1024, text, usage.ru_utime + usage.ru_stime


def make_slice(corpus: str, mb: float, work: Path) -> tuple[Path, int, int]:
    """The first `mb` MB of the corpus's text as plain JSONL {id, text} in its own folder;
    (path, text bytes, documents)."""
    import orjson

    path = work / "x1" / "part.jsonl"
    path.parent.mkdir()
    size = docs = 0
    with open(path, "wb") as out:
        for line in corpus_bytes(corpus).splitlines():
            if not line.strip():
                continue
            rec = orjson.loads(line)
            out.write(orjson.dumps({"id": rec.get("id"), "text": rec["text"]}) + b"\n")
            size += len(rec["text"].encode())
            docs += 1
            if size >= mb * 1e6:
                break
    return path, size, docs


def throughput(args, work: Path) -> None:
    path, size, docs = make_slice(args.corpus, args.mb, work)
    tok = args.tokenizer
    if tok is None:
        tok = str(work / "tok.json")
        subprocess.run([str(PY), "-m", "llmtk", "train", "tokenizer", "--data", str(path),
                        "--vocab-size", str(args.vocab), "-o", tok, "-q"], check=True, cwd=ROOT)
    one = {"RAYON_NUM_THREADS": "1"}
    print(f"text: {size / 1e6:.1f} MB, {docs:,} documents; tokenizer {tok}; one core each; "
          f"rates are MB of text per CPU-second, the best of {args.repeat} rounds")
    wall, rss, out, _ = run_rss(one_core([str(PY), "-c", LLMTK, str(path.parent), tok,
                                          str(work / "ds"), str(args.repeat)]), one)
    r = json.loads(out)
    rates = {"llmtk": size / r["llmtk"] / 1e6, "bare": size / r["bare"] / 1e6}
    print(f"bare encode_batch loop       {rates['bare']:6.2f} MB/s  ({r['bare']:.2f} CPU-s, "
          f"{r['tokens']:,} tokens)")
    print(f"llmtk train tokenize         {rates['llmtk']:6.2f} MB/s  ({r['llmtk']:.2f} CPU-s; "
          f"one process for both, peak RSS {rss:.0f} MB)")
    print(f"llmtk / bare: {rates['llmtk'] / rates['bare']:.3f}")
    if not args.skip_datatrove:
        dt = datatrove_python()
        best = None
        for _ in range(args.repeat):
            shutil.rmtree(work / "dt", ignore_errors=True)
            wall, rss, out, _ = run_rss(one_core([str(dt), "-c", DATATROVE, str(path.parent),
                                                  tok, str(work / "dt")]), one)
            cpu = json.loads(out)["cpu"]
            best = cpu if best is None else min(best, cpu)
        rates["datatrove"] = size / best / 1e6
        print(f"datatrove DocumentTokenizer  {rates['datatrove']:6.2f} MB/s  ({best:.2f} CPU-s; "
              f"its own process, peak RSS {rss:.0f} MB)")
        print(f"llmtk / datatrove: {rates['llmtk'] / rates['datatrove']:.3f}")
    # Memory of one task at 1x and 4x the data: the slice, then four copies of it (copies,
    # not links: the same file named twice is one input).
    for copies in (1, 4):
        src = work / f"in-{copies}"
        src.mkdir()
        for c in range(copies):
            shutil.copy(path, src / f"{c}.jsonl")
        wall, rss, _, cpu = run_rss(one_core([
            str(PY), "-m", "llmtk", "train", "tokenize", str(src), "--tokenizer", tok, "-o",
            str(work / f"ds-{copies}"), "-q"]), one)
        print(f"llmtk train tokenize {copies}x: {copies * size / 1e6:.1f} MB of text, peak RSS "
              f"{rss:.0f} MB ({cpu:.1f} CPU-s, {wall:.1f} s wall)")


STARTUP = r'''
import json, sys, time
import numpy, torch  # imported before the clock: what is timed is the data's own start-up
from llmtk.train.data.cache import Sampler
from llmtk.train.data.tokens import TokenDataset
t0 = time.perf_counter()
ds = TokenDataset.open(sys.argv[1])
sampler = Sampler(ds.windows(int(sys.argv[2])), 8, 1, 0, seed=0)
first = sampler.rows(0)
print(json.dumps({"seconds": time.perf_counter() - t0, "docs": ds.docs, "tokens": ds.tokens,
                  "windows": len(sampler.w)}))
'''


def synthetic(directory: Path, docs: int, tokens: int) -> None:
    """A one-part token dataset of sparse files (what start-up reads is the metadata)."""
    from llmtk.train.data.tokens import KIND, VERSION, part_name

    part = directory / part_name(0, 1)
    part.mkdir(parents=True)
    meta = {"kind": KIND, "version": VERSION, "tokenizer": "bytes-v1", "tokenizer_name": "bytes",
            "vocab_size": 257, "eos_id": 256, "eos": "after-each-document", "dtype": "uint16",
            "text_field": "text", "tasks": 1, "files": ["synthetic.jsonl"]}
    (directory / "meta.json").write_text(json.dumps(meta))
    for name, size in (("tokens.bin", 2 * tokens), ("docs.bin", 16 * docs),
                       ("ids.end", 8 * docs), ("ids.bin", 0)):
        with open(part / name, "wb") as f:
            f.truncate(size)
    manifest = {"part": part_name(0, 1), "task": 0, "tasks": 1, "tokenizer": "bytes-v1",
                "dtype": "uint16", "eos": "after-each-document", "docs": docs,
                "tokens": tokens, "xxh64": "", "files": [{"ordinal": 0, "path":
                                                          "synthetic.jsonl", "records": docs}]}
    (part / "manifest.json").write_text(json.dumps(manifest))
    (directory / (part_name(0, 1) + ".done")).write_text("{}")


def startup(args, work: Path) -> None:
    tokens = int(float(args.startup_tokens))
    for docs in (int(float(d)) for d in args.startup_docs.split(",")):
        d = work / f"synthetic-{docs}"
        synthetic(d, docs, tokens)
        wall, rss, out, _ = run_rss([str(PY), "-c", STARTUP, str(d), "1024"])
        r = json.loads(out)
        train_wall, train_rss, _, _ = run_rss([
            str(PY), "-m", "llmtk", "train", "--data", str(d), "--out", str(work / f"run-{docs}"),
            "--model", "tiny", "--seq-len", "1024", "--batch-size", "1", "--steps", "1",
            "--warmup", "0", "--checkpoint-every", "0", "--device", "cpu", "-q"])
        print(f"start-up at {docs:.0e} documents ({tokens:.0e} tokens, {r['windows']:,} "
              f"windows of 1024): open + order + first batch {r['seconds'] * 1000:.0f} ms, "
              f"peak RSS "
              f"{rss:.0f} MB; `train --steps 1` {train_wall:.1f} s wall, peak RSS "
              f"{train_rss:.0f} MB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("corpus", help="JSONL(.zst) with a text field, any of yours (e.g. "
                    "benchmarks/out/manpages.jsonl, which manpages_corpus.py builds)")
    ap.add_argument("--mb", type=float, default=8.0, help="MB of text to use (0: all)")
    ap.add_argument("--tokenizer", help="tokenizer.json (default: train one on the slice)")
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--repeat", type=int, default=3, help="rounds; the best of each is kept")
    ap.add_argument("--skip-datatrove", action="store_true")
    ap.add_argument("--skip-startup", action="store_true")
    ap.add_argument("--startup-docs", default="1e6,1e8")
    ap.add_argument("--startup-tokens", default="1e9")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="llmtk-tokbench-"))
    try:
        throughput(args, work)
        if not args.skip_startup:
            startup(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
