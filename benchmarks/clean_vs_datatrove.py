"""`llmtk clean` vs datatrove: the same four quality filters on the same corpus, one core each.

Reproduce (from the repository root, after `make setup`):

    python3 benchmarks/manpages_corpus.py      # real multilingual manual pages, see there
    nice .venv/bin/python benchmarks/clean_vs_datatrove.py benchmarks/out/manpages-sample.jsonl \
        benchmarks/out/manpages-en.jsonl [MORE.jsonl.zst ...] --no-cli

Each corpus is measured and reported on its own. English web pages: see
benchmarks/web_pages_corpus.py (trafilatura's evaluation pages as JSONL).

The first run creates datatrove's own virtualenv under benchmarks/.venvs/datatrove
(git-ignored): datatrove 0.10.1 plus spaCy (its English word tokenizer), regex, orjson and
zstandard, from PyPI. `--limit N` uses the first N documents.

What is measured, each in its own process pinned to one core (taskset) and timed with CPU
time, reading excluded:
  * datatrove: GopherRepetitionFilter -> GopherQualityFilter -> C4QualityFilter ->
    FineWebQualityFilter with default arguments (the FineWeb order); a document stops at the
    first filter that drops it, and C4 rewrites the text the next filter sees.
  * llmtk, same rules: `Cleaner` with normalisation, language ID and PII off, so only the
    Gopher/C4/FineWeb rules run (CJK rules from the script census).
  * llmtk, full default pipeline: normalise + language ID + the four filters + PII.
  * language ID alone (lid.176 + script census) in MB/s.
Then the keep/drop agreement on the documents whose `lang` field is `en`, and wall time of
the real CLI with --workers 1 and 2 (I/O included; only meaningful with two idle cores).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from _common import datatrove_python, one_core, read_corpus

ROOT = Path(__file__).resolve().parent.parent
DT_WORKER = ROOT / "benchmarks" / "_clean_datatrove_worker.py"


# -- the llmtk side (runs in a child process: `--llmtk-worker MODE`) -------------------------


def llmtk_worker(path: str, out_path: str, limit: int, mode: str) -> None:
    from llmtk.clean import CleanConfig, Cleaner
    from llmtk.io.record import Doc
    from llmtk.text.langid import LanguageId

    docs = read_corpus(path, limit)
    nbytes = sum(len(d["text"].encode()) for d in docs)
    verdicts: list[str] = []
    if mode == "langid":
        lid = LanguageId()
        lid.load()
        start = time.process_time()
        for d in docs:
            lid.predict(d["text"])
        seconds = time.process_time() - start
    else:
        cfg = CleanConfig()
        if mode == "filters":
            cfg = cfg.with_values({"normalize.enabled": False, "langid.enabled": False,
                                   "pii.enabled": False})
        cleaner = Cleaner(cfg)
        cleaner.load()
        records = [Doc(d, None, "corpus", i + 1, i) for i, d in enumerate(docs)]
        start = time.process_time()
        for doc in records:
            verdicts.append(cleaner(doc) or "keep")
        seconds = time.process_time() - start
    with open(out_path, "w") as f:
        for v in verdicts:
            f.write(v + "\n")
        f.write(json.dumps({"docs": len(docs), "bytes": nbytes, "seconds": seconds}) + "\n")


def run_side(cmd: list[str], out: Path) -> tuple[list[str], dict]:
    subprocess.run(cmd, check=True)
    lines = out.read_text().splitlines()
    return lines[:-1], json.loads(lines[-1])


def rate(m: dict) -> str:
    return f"{m['docs'] / m['seconds']:>9,.0f} docs/s {m['bytes'] / 1e6 / m['seconds']:>7.2f} MB/s"


def cli_wall(path: str, workers: int, limit: int) -> float:
    cmd = [sys.executable, "-m", "llmtk", "clean", "-q", "-j", str(workers)]
    if limit:
        data = b"".join(json.dumps(d).encode() + b"\n" for d in read_corpus(path, limit))
        start = time.perf_counter()
        subprocess.run(cmd, input=data, stdout=subprocess.DEVNULL, check=True, cwd=ROOT)
    else:
        start = time.perf_counter()
        subprocess.run([*cmd, path], stdout=subprocess.DEVNULL, check=True, cwd=ROOT)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", nargs="+", help="JSONL(.zst/.gz) corpora, each measured on its "
                    "own; benchmarks/manpages_corpus.py builds some from Debian packages")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out"))
    ap.add_argument("--no-cli", action="store_true", help="skip the CLI --workers timing")
    ap.add_argument("--llmtk-worker", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.llmtk_worker:
        llmtk_worker(args.corpus[0], args.result, args.limit, args.llmtk_worker)
        return
    for corpus in args.corpus:
        compare(corpus, args)


def compare(corpus: str, args) -> None:
    dt_python = datatrove_python()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    me = [sys.executable, __file__, corpus, "--limit", str(args.limit)]
    dt_v, dt = run_side(one_core([str(dt_python), str(DT_WORKER), corpus,
                                str(out / "datatrove.txt"), str(args.limit)], 0),
                        out / "datatrove.txt")
    lt_v, lt = run_side(one_core([*me, "--llmtk-worker", "filters", "--result",
                                str(out / "llmtk_filters.txt")], 0), out / "llmtk_filters.txt")
    _, full = run_side(one_core([*me, "--llmtk-worker", "full", "--result",
                               str(out / "llmtk_full.txt")], 0), out / "llmtk_full.txt")
    _, lid = run_side(one_core([*me, "--llmtk-worker", "langid", "--result",
                              str(out / "llmtk_langid.txt")], 0), out / "llmtk_langid.txt")

    docs = read_corpus(corpus, args.limit)
    en = [i for i, d in enumerate(docs) if d.get("lang") == "en"]
    same = sum((dt_v[i] == "keep") == (lt_v[i] == "keep") for i in en)
    both_keep = sum(dt_v[i] == "keep" and lt_v[i] == "keep" for i in en)
    only_dt = sum(dt_v[i] == "keep" and lt_v[i] != "keep" for i in en)
    only_lt = sum(dt_v[i] != "keep" and lt_v[i] == "keep" for i in en)

    print(f"\ncorpus: {corpus}  {dt['docs']:,} docs, {dt['bytes'] / 1e6:.1f} MB of text "
          f"(one core each, CPU time, reading excluded)")
    print(f"  datatrove 4 filters         {rate(dt)}")
    print(f"  llmtk same 4 filters        {rate(lt)}   x{dt['seconds'] / lt['seconds']:.1f}")
    print(f"  llmtk full pipeline         {rate(full)}   x{dt['seconds'] / full['seconds']:.1f}"
          "   (+ normalise, language ID, PII)")
    print(f"  llmtk language ID alone     {rate(lid)}")
    print(f"  kept: datatrove {sum(v == 'keep' for v in dt_v):,}, llmtk "
          f"{sum(v == 'keep' for v in lt_v):,} of {len(dt_v):,}")
    print(f"  English docs ({len(en):,}): identical keep/drop {same / max(len(en), 1):.2%}  "
          f"(both keep {both_keep}, only datatrove keeps {only_dt}, only llmtk keeps {only_lt})")
    differ = Counter((dt_v[i], lt_v[i]) for i in en if (dt_v[i] == "keep") != (lt_v[i] == "keep"))
    for (a, b), n in differ.most_common(5):
        print(f"    {n:>5}  datatrove {a}  /  llmtk {b}")
    if not args.no_cli and (os.cpu_count() or 1) >= 2:
        w1 = cli_wall(corpus, 1, args.limit)
        w2 = cli_wall(corpus, 2, args.limit)
        print(f"  CLI wall time (I/O included): -j1 {w1:.1f}s, -j2 {w2:.1f}s, "
              f"speed-up x{w1 / w2:.2f}")


if __name__ == "__main__":
    main()
