"""What another alpha-word threshold changes: documents kept at one of OLD, NEW and not the other.

Reproduce (after `make setup`; see monolingual_corpus.py for the input):

    .venv/bin/python benchmarks/clean_threshold_cost.py benchmarks/out/mono-es.jsonl \\
        --lang es --old 0.825 --new 0.803

Every record runs through the default `llmtk clean` pipeline twice, with
`[lang.LANG.gopher_quality] min_alpha_words_ratio` set to OLD and to NEW (nothing else
changes, so only documents that language ID puts in LANG can change verdict). Per `source`
field: records, how many language ID puts in LANG, kept at OLD, kept at NEW. The documents
kept at only one of them are written, with their alpha-word share, to
benchmarks/out/cost-LANG.jsonl and a sample of them printed, to be read: are they text a
training set wants, or junk?
"""

import argparse
import json
import random
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from clean_parallel import cleaner, run  # noqa: E402


def verdicts(docs: list[dict], lang: str, alpha: float) -> tuple[list[str], list[str | None]]:
    """The default pipeline's verdicts with LANG's min_alpha_words_ratio set to ALPHA, and
    the languages language ID names."""
    found = run(docs, cleaner({lang: {"gopher_quality": {"min_alpha_words_ratio": alpha}}}))
    return [r for r, _, _ in found], [x for _, x, _ in found]


def alpha_words(text: str, lang: str) -> float:
    from llmtk.clean.filters import DocText, alpha_share
    from llmtk.clean.normalize import Normalize

    return alpha_share(DocText(Normalize()(text), lang).words)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", help="JSONL documents of one language, e.g. "
                    "benchmarks/out/mono-es.jsonl (monolingual_corpus.py builds it)")
    ap.add_argument("--lang", required=True)
    ap.add_argument("--old", type=float, required=True)
    ap.add_argument("--new", type=float, required=True)
    ap.add_argument("--sample", type=int, default=12, help="documents to print")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    docs = [json.loads(line) for line in open(args.corpus, encoding="utf-8")]
    old, detected = verdicts(docs, args.lang, args.old)
    new, _ = verdicts(docs, args.lang, args.new)
    rows: dict[str, Counter] = {}
    gained = []
    for d, o, n, det in zip(docs, old, new, detected, strict=True):
        c = rows.setdefault(d.get("source", "-"), Counter())
        c["records"] += 1
        c["detected"] += det == args.lang
        c["old"] += o == "keep"
        c["new"] += n == "keep"
        c["alpha_dropped_old"] += o == "gopher.alpha_words"
        if (n == "keep") != (o == "keep"):
            gained.append({**d, "alpha_words": round(alpha_words(d["text"], args.lang), 4),
                           "reason_at_old": o, "reason_at_new": n})
    print(f"corpus: {args.corpus}; lang {args.lang}: min_alpha_words_ratio {args.old} -> "
          f"{args.new}")
    print(f"\nsource      records  lang-ID {args.lang}  dropped as alpha_words at old  "
          "kept at old  kept at new  gained")
    total = Counter()
    for source, c in sorted(rows.items()):
        total.update(c)
        print(f"{source:10}  {c['records']:>7,}  {c['detected']:>10,}  "
              f"{c['alpha_dropped_old']:>29,}  {c['old']:>11,}  {c['new']:>11,}  "
              f"{c['new'] - c['old']:>+6,}")
    print(f"{'all':10}  {total['records']:>7,}  {total['detected']:>10,}  "
          f"{total['alpha_dropped_old']:>29,}  {total['old']:>11,}  {total['new']:>11,}  "
          f"{total['new'] - total['old']:>+6,}")
    out = ROOT / "benchmarks" / "out" / f"cost-{args.lang}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        for g in gained:
            f.write(json.dumps(g, ensure_ascii=False) + "\n")
    print(f"\n{len(gained)} documents kept at only one of {args.old}, {args.new}: {out}")
    for g in random.Random(args.seed).sample(gained, min(args.sample, len(gained))):
        head = " | ".join(x for x in g["text"].splitlines() if x.strip())[:300]
        print(f"\n[{g['id']}] alpha {g['alpha_words']:.3f}, {len(g['text']):,} chars, "
              f"{g['reason_at_old']} -> {g['reason_at_new']}\n  {head}")


if __name__ == "__main__":
    main()
