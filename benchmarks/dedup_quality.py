"""Precision and recall of `llmtk dedup` against exact Jaccard, on synthetic near-duplicates.

The corpus: random base documents (Zipf-distributed words from a made-up
vocabulary, in paragraphs; and CJK documents of Zipf-distributed Han
characters), then copies of some of them made with controlled edits — word
substitutions, insertions, deletions, reordered paragraphs, a changed
header/footer — at edit rates chosen so the true Jaccard similarity spans
about 0.4-1.0. A copy comes after its original, at a random later position.
The true Jaccard of each (copy, original) pair is computed exactly on the same
shingles that llmtk hashes (`MinHasher.shingles`).

`llmtk dedup --annotate` runs on the corpus as a real process. Reported:

- recall@0.8: copies with true J >= 0.8 that are dropped as duplicates;
- precision@0.5 / @0.7: of all documents marked as duplicates, the share whose
  true Jaccard with the document named in dup_of is >= 0.5 / 0.7;
- detection rate per true-Jaccard bucket next to the theoretical LSH curve
  1 - (1 - J^r)^b.

`--real manpages.jsonl` takes the base documents from real text instead: Debian's manual
pages (benchmarks/manpages_corpus.py builds the file) in English, German, French, Spanish,
Russian, Polish (word shingles) and Chinese, Japanese (character shingles). Their copies
drift the way copies do: tokens (words, or characters for CJK) replaced, inserted, deleted;
lines shuffled; boilerplate lines added at the top and bottom; or all of these.

Reproduce:

    make setup
    .venv/bin/python benchmarks/dedup_quality.py            # the defaults
    .venv/bin/python benchmarks/dedup_quality.py --real benchmarks/out/manpages.jsonl
    .venv/bin/python benchmarks/dedup_quality.py --threshold 0.8
    .venv/bin/python benchmarks/dedup_quality.py --verify 0.7
"""

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmtk.dedup.config import DedupConfig, bands_rows_for, candidate_probability  # noqa: E402
from llmtk.dedup.minhash import MinHasher  # noqa: E402


def vocabulary(rng: random.Random, n: int) -> list[str]:
    syll = ["ka", "to", "ri", "mu", "sen", "lo", "pa", "dri", "ve", "no", "shi", "tra", "el", "bu",
            "gor", "ta", "mi", "zen", "fa", "qui"]
    words = set()
    while len(words) < n:
        words.add("".join(rng.choice(syll) for _ in range(rng.randint(1, 4))))
    return sorted(words)


class Writer:
    def __init__(self, rng: random.Random, tokens: list[str], zipf: float, joiner: str) -> None:
        self.rng = rng
        self.tokens = tokens
        ranks = np.arange(1, len(tokens) + 1)
        self.weights = (1.0 / ranks**zipf).tolist()
        self.joiner = joiner

    def words(self, k: int) -> list[str]:
        return self.rng.choices(self.tokens, weights=self.weights, k=k)

    def doc(self, paras: int, words: tuple[int, int]) -> list[list[str]]:
        return [self.words(self.rng.randint(*words)) for _ in range(paras)]

    def text(self, doc: list[list[str]]) -> str:
        return "\n\n".join(self.joiner.join(p) for p in doc)


def edit(w: Writer, doc: list[list[str]], rng: random.Random) -> tuple[list[list[str]], str]:
    """A copy of doc with one kind of edit at a random rate."""
    kind = rng.choice(["substitute", "insert", "delete", "reorder+substitute", "header/footer",
                       "mixed"])
    rate = rng.uniform(0.0, 0.12)
    new = [list(p) for p in doc]

    def each_word(fn):
        for p in new:
            i = 0
            while i < len(p):
                if rng.random() < rate:
                    i += fn(p, i)
                i += 1

    def sub(p, i):
        p[i] = w.words(1)[0]
        return 0

    def ins(p, i):
        p.insert(i, w.words(1)[0])
        return 1

    def dele(p, i):
        del p[i]
        return -1

    if kind == "substitute":
        each_word(sub)
    elif kind == "insert":
        each_word(ins)
    elif kind == "delete":
        each_word(dele)
    elif kind == "reorder+substitute":
        rng.shuffle(new)
        each_word(sub)
    elif kind == "header/footer":
        k = int(rate * 4 * sum(map(len, doc))) + 1  # header + footer of ~ rate*4 of the length
        new = [w.words(k // 2 + 1), *new, w.words(k // 2 + 1)]
    else:
        each_word(sub)
        each_word(ins)
        each_word(dele)
    return new, kind


class Pool(Writer):
    """Replacement tokens drawn from real text; a document is a list of lines."""

    def __init__(self, rng: random.Random, tokens: list[str], joiner: str) -> None:
        self.rng, self.tokens, self.joiner = rng, tokens, joiner

    def words(self, k: int) -> list[str]:
        return [self.rng.choice(self.tokens) for _ in range(k)]

    def text(self, doc: list[list[str]]) -> str:
        return "\n".join(self.joiner.join(p) for p in doc)


CJK = ("zh", "ja")


def build_real(path: str, seed: int, n_word: int, n_cjk: int, copy_share: float,
               max_chars: int = 6000):
    """Bases from real pages (see the module docstring); ids start with en or zh by shingle."""
    rng = random.Random(seed)
    pages = [json.loads(line) for line in open(path, encoding="utf-8")]
    rng.shuffle(pages)
    word = [p for p in pages if p["lang"] not in CJK][:n_word]
    cjk = [p for p in pages if p["lang"] in CJK][:n_cjk]
    pools = {}
    for name, group, joiner in (("en", word, " "), ("zh", cjk, "")):
        sample = [t for p in group[:300] for t in (p["text"].split() if joiner else
                                                    p["text"].replace(" ", ""))]
        pools[name] = Pool(rng, sample, joiner)
    docs = []
    for i, p in enumerate(word + cjk):
        kind = "zh" if p["lang"] in CJK else "en"
        lines = [ln for ln in p["text"][:max_chars].split("\n") if ln.strip()]
        d = [ln.split() if kind == "en" else list(ln) for ln in lines]
        w = pools[kind]
        docs.append({"id": f"{kind}{i}-{p['lang']}", "text": w.text(d), "_doc": d, "_w": w})
    return _with_copies(rng, docs, copy_share)


def _with_copies(rng: random.Random, docs: list[dict], copy_share: float):
    copies = []  # (index of original, record, kind)
    for i, base in enumerate(list(docs)):
        if rng.random() < copy_share:
            new, kind = edit(base["_w"], base["_doc"], rng)
            copies.append((i, {"id": f"{base['id']}-copy", "text": base["_w"].text(new)}, kind))
    records = [{"id": d["id"], "text": d["text"]} for d in docs]
    for src, rec, _ in copies:  # insert after the original
        pos = next(k for k, r in enumerate(records) if r["id"] == docs[src]["id"])
        records.insert(rng.randint(pos + 1, len(records)), rec)
    origin = {rec["id"]: (docs[src]["id"], kind) for src, rec, kind in copies}
    return records, origin


def build(seed: int, n_latin: int, n_cjk: int, copy_share: float):
    rng = random.Random(seed)
    latin = Writer(rng, vocabulary(rng, 20000), 1.0, " ")
    cjk = Writer(rng, [chr(c) for c in range(0x4E00, 0x4E00 + 4000)], 0.9, "")
    docs = []
    for i in range(n_latin + n_cjk):
        is_cjk = i >= n_latin
        w = cjk if is_cjk else latin
        d = w.doc(rng.randint(3, 7), (60, 200) if is_cjk else (25, 70))
        docs.append({"id": f"{'zh' if is_cjk else 'en'}{i}", "text": w.text(d), "_doc": d,
                     "_w": w})
    return _with_copies(rng, docs, copy_share)


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--latin", type=int, default=6000, help="base documents in Latin script")
    ap.add_argument("--cjk", type=int, default=2000, help="base documents in Chinese")
    ap.add_argument("--copies", type=float, default=0.5, help="share of bases that get a copy")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threshold", type=float, help="pass --threshold to llmtk dedup")
    ap.add_argument("--verify", type=float, help="pass --verify to llmtk dedup")
    ap.add_argument("--bands", type=int, help="pass --bands (with --rows) to llmtk dedup")
    ap.add_argument("--rows", type=int)
    ap.add_argument("--real", metavar="MANPAGES_JSONL", help="real base documents (see above)")
    args = ap.parse_args()

    if args.real:
        records, origin = build_real(args.real, args.seed, args.latin, args.cjk, args.copies)
    else:
        records, origin = build(args.seed, args.latin, args.cjk, args.copies)
    data = b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in records)
    extra = ["--threshold", str(args.threshold)] if args.threshold else []
    extra += ["--verify", str(args.verify)] if args.verify else []
    if args.bands:
        extra += ["--bands", str(args.bands), "--rows", str(args.rows)]
    r = subprocess.run([sys.executable, "-m", "llmtk", "dedup", "--annotate", "-q", *extra],
                       input=data, capture_output=True, cwd=ROOT, check=True)
    marked = {}
    for line in r.stdout.splitlines():
        d = json.loads(line)
        if "llmtk" in d:
            marked[d["id"]] = d["llmtk"]["dup_of"]

    default = DedupConfig()
    bands, rows = (bands_rows_for(args.threshold) if args.threshold else
                   (args.bands, args.rows) if args.bands else (default.bands, default.rows))
    hasher = MinHasher(DedupConfig(bands=bands, rows=rows))
    text = {r["id"]: r["text"] for r in records}
    cache: dict[str, set] = {}

    def shingles(doc_id: str) -> set:
        if doc_id not in cache:
            cache[doc_id] = set(hasher.shingles(text[doc_id]).tolist())
        return cache[doc_id]

    print(f"corpus: {args.real or 'synthetic'}: {len(records):,} documents "
          f"({len(records) - len(origin):,} bases, "
          f"{len(origin):,} edited copies); LSH {bands} bands x {rows} rows, "
          f"--verify {args.verify if args.verify is not None else default.verify}")
    for script in ("all", "en", "zh"):
        pairs = [(c, o) for c, (o, _) in origin.items() if script == "all" or c.startswith(script)]
        true_j = np.array([jaccard(shingles(c), shingles(o)) for c, o in pairs])
        # detected: the copy was dropped as a duplicate. Its dup_of is the root of the cluster
        # it joined, which is its original unless the original is itself a near-duplicate of
        # an earlier document (real pages often are); precision checks where it points.
        found = np.array([c in marked for c, _ in pairs])
        flagged = [(d, ref) for d, ref in marked.items() if script == "all" or d.startswith(script)]
        flagged_j = np.array([jaccard(shingles(d), shingles(ref)) for d, ref in flagged])
        hi = true_j >= 0.8
        name = {"all": "all", "en": "word shingles", "zh": "CJK character shingles"}[script]
        print(f"\n[{name}] pairs {len(pairs):,}, flagged documents {len(flagged):,}")
        print(f"  recall@0.8    {found[hi].mean():.4f}  ({found[hi].sum()}/{hi.sum()})")
        for cut in (0.5, 0.7):
            ok = (flagged_j >= cut).mean() if len(flagged_j) else float("nan")
            print(f"  precision@{cut}  {ok:.4f}")
        print("  true J bucket   pairs  detected  LSH theory")
        for lo in np.arange(0.3, 1.0, 0.1):
            sel = (true_j >= lo) & (true_j < lo + 0.1 + (1e-9 if lo >= 0.9 else 0))
            if sel.sum():
                mid = float(true_j[sel].mean())
                theory = float(np.mean(candidate_probability(true_j[sel], bands, rows)))
                print(f"  [{lo:.1f}, {lo + 0.1:.1f})  {sel.sum():>7}  {found[sel].mean():>8.3f}"
                      f"  {theory:>10.3f}   (mean J {mid:.2f})")


if __name__ == "__main__":
    main()
