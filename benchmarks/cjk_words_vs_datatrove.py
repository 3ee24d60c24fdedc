"""Chinese and Japanese words: llmtk's against datatrove's (FineWeb-2's) word tokenizers.

Reproduce (after `make setup`; the corpora from manpages_corpus.py, gnome_help_corpus.py and
debian_reference_corpus.py, see clean_parallel.py):

    .venv/bin/python benchmarks/cjk_words_vs_datatrove.py
    .venv/bin/python benchmarks/cjk_words_vs_datatrove.py --write-fixture   # tests' words

The first run completes datatrove's virtualenv (benchmarks/.venvs/datatrove) with jieba,
SudachiPy and SudachiDict-core. From each corpus, up to 60 Chinese and 60 Japanese pages
drawn at random (seed 0) are tokenized by datatrove 0.10.1 for `cmn_Hani` (spaCy-zh with
jieba) and `jpn_Jpan` (spaCy-ja: SudachiPy mode A), as FineWeb-2 measured its figures, and
by llmtk's `tokens(text, lang)` (llmtk/clean/cjk_words.py). Per language it prints the
pages with identical words, the mean and largest difference of their alpha-word shares, the
bytes of the pages that differ, and, for Chinese, the same for rjieba's words without the
split of unknown non-Han runs that jieba's HMM step makes (what cjk_words.py corrects).

`--write-fixture` writes tests/data/clean/cjk_words.jsonl instead: datatrove's words of the
Chinese and Japanese texts of tests/data/clean/parallel.jsonl.
"""

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import datatrove_python

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "benchmarks" / "_cjk_datatrove_worker.py"
CORPORA = ("manpages", "gnome-help", "debian-reference")
FIXTURE = ROOT / "tests" / "data" / "clean" / "cjk_words.jsonl"
PARALLEL = ROOT / "tests" / "data" / "clean" / "parallel.jsonl"


def datatrove_words(docs: list[dict]) -> list[list[str]]:
    """datatrove's words of each {"lang", "text"} record (in its own virtualenv)."""
    python = datatrove_python()
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "in.jsonl", Path(tmp) / "out.jsonl"
        src.write_text("".join(json.dumps({"lang": d["lang"], "text": d["text"]},
                                          ensure_ascii=False) + "\n" for d in docs),
                       encoding="utf-8")
        subprocess.run([str(python), str(WORKER), str(src), str(dst)], check=True,
                       stderr=subprocess.DEVNULL)
        return [json.loads(x) for x in dst.read_text(encoding="utf-8").splitlines()]


def sample(per_corpus: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for name in CORPORA:
        path = ROOT / "benchmarks" / "out" / f"{name}.jsonl"
        docs = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
        for lang in ("zh", "ja"):
            found = [d for d in docs if d["lang"] == lang]
            rng.shuffle(found)
            out += found[:per_corpus]
    return out


def write_fixture() -> None:
    docs = [d for d in map(json.loads, PARALLEL.read_text(encoding="utf-8").splitlines())
            if d["lang"] in ("zh", "ja")]
    with FIXTURE.open("w", encoding="utf-8") as f:
        for d, words in zip(docs, datatrove_words(docs), strict=True):
            f.write(json.dumps({"page": d["page"], "lang": d["lang"], "words": words},
                               ensure_ascii=False) + "\n")
    print(f"wrote {FIXTURE.relative_to(ROOT)} ({len(docs)} texts)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-corpus", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--write-fixture", action="store_true")
    args = ap.parse_args()
    if args.write_fixture:
        write_fixture()
        return
    sys.path.insert(0, str(ROOT))
    import rjieba

    from llmtk.clean.filters import alpha_share
    from llmtk.clean.tokens import tokens

    docs = sample(args.per_corpus, args.seed)
    theirs = datatrove_words(docs)
    raw = {"zh": lambda t: [w.strip() for w in rjieba.cut(t) if w.strip()]}
    print("lang  words            pages  identical  |alpha diff| mean    max  bytes of pages "
          "that differ")
    for lang in ("zh", "ja"):
        for label, words in (("llmtk", lambda t, lang=lang: tokens(t, lang)),
                             ("rjieba, no split", raw.get(lang))):
            if words is None:
                continue
            same, diffs, sizes = 0, [], []
            for d, want in zip(docs, theirs, strict=True):
                if d["lang"] != lang:
                    continue
                got = words(d["text"])
                same += got == want
                if got != want:
                    sizes.append(len(d["text"].encode()))
                diffs.append(abs(alpha_share(got) - alpha_share(want)))
            print(f"{lang:4}  {label:16} {len(diffs):5}  {same:9}  {sum(diffs) / len(diffs):15.5f}"
                  f"  {max(diffs):.5f}  {sorted(sizes)[:8]}")


if __name__ == "__main__":
    main()
