"""Shared by the parallel-corpus builders (gnome_help_corpus.py, debian_reference_corpus.py):
leave out translations that are largely untranslated, write the JSONL, report the counts.

Translations built from the English source and a catalogue of translated strings (itstool
for GNOME's Mallard pages, po4a for the Debian Reference) keep a string in English when the
catalogue lacks it (untranslated or fuzzy). Such a page is partly English text, not a
translation. A translation's prose paragraph (not code) identical to a prose paragraph of at
least 3 words of its English page is counted as untranslated (shorter ones, such as
"Bluetooth" or a key name, are often the same in both languages); a page with more than
`max_untranslated` of its prose paragraphs untranslated goes to a separate file.
"""

import argparse
import json
import os
import sys
from collections import Counter, defaultdict

# A paragraph: (text, is code). Code lines are the same in every language.
Para = tuple[str, bool]


def inline(el, skip: set, joined: dict | None = None) -> str:
    """An XML element's text, the subtrees whose tag is in `skip` left out; the children
    of an element whose tag is in `joined` joined by its string (GNOME's key and menu
    sequences: Ctrl+C, Settings ▸ Network)."""
    if joined and el.tag in joined:
        return joined[el.tag].join(inline(c, skip, joined) for c in el if c.tag not in skip)
    parts = [el.text or ""]
    for child in el:
        if child.tag not in skip:
            parts.append(inline(child, skip, joined))
        parts.append(child.tail or "")
    return "".join(parts)


def add_block(out: list[Para], text: str, code: bool) -> None:
    """A leaf block's text as paragraphs: code line by line as it is, prose as one line
    with its whitespace collapsed."""
    if code:
        out.extend((x.rstrip(), True) for x in text.strip("\n").split("\n") if x.strip())
    elif text.strip():
        out.append((" ".join(text.split()), False))


def untranslated(paras: list[Para], english: list[Para]) -> tuple[int, int]:
    """(prose paragraphs, those identical to a prose paragraph of >= 3 words of English)."""
    long = {p for p, code in english if not code and len(p.split()) >= 3}
    prose = [p for p, code in paras if not code]
    return len(prose), sum(p in long for p in prose)


def corpus_args(description: str, out_dir: str, name: str, unit: str) -> argparse.Namespace:
    """The builders' command line: --debs, -o (default OUT_DIR/NAME.jsonl), --min-chars,
    --max-untranslated (see write_corpus; UNIT: what a record is, in the help) and
    --more-languages (each builder's MORE_LANGS instead of its LANGS, English always)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--debs", default=os.path.join(out_dir, "debs"))
    ap.add_argument("-o", "--output", default=os.path.join(out_dir, f"{name}.jsonl"))
    ap.add_argument("--min-chars", type=int, default=500, help=f"skip shorter {unit}")
    ap.add_argument("--max-untranslated", type=float, default=0.1,
                    help="largest share of prose paragraphs left in English in a translation")
    ap.add_argument("--more-languages", action="store_true",
                    help=f"the other languages Debian has translations in, instead of the "
                    f"issue's seven (default output: {name}-more.jsonl)")
    args = ap.parse_args()
    if args.more_languages and args.output == os.path.join(out_dir, f"{name}.jsonl"):
        args.output = os.path.join(out_dir, f"{name}-more.jsonl")
    return args


def write_corpus(output: str, records: list[tuple[str, str, str, list[Para]]],
                 max_untranslated: float, min_chars: int) -> None:
    """records: (page, lang, package, paragraphs), English ("en") pages before translations.

    A page is written when its English page has `min_chars` characters or more. Writes
    `output` (the parallel pages) and OUTPUT-untranslated.jsonl (the translations with
    more than `max_untranslated` of their prose paragraphs in English), atomically, and prints
    the per-language counts to stderr.
    """
    english: dict[str, list[Para]] = {}
    english_chars: dict[str, int] = {}
    stats: dict[str, Counter] = defaultdict(Counter)
    out_untr = output.removesuffix(".jsonl") + "-untranslated.jsonl"
    n = 0
    with open(output + ".tmp", "w", encoding="utf-8") as f, \
            open(out_untr + ".tmp", "w", encoding="utf-8") as g:
        for page, lang, package, paras in records:
            parallel = True
            if lang == "en":
                english[page] = paras
            elif page in english:
                prose, same = untranslated(paras, english[page])
                s = stats[lang]
                s["pages"] += 1
                s["paragraphs"] += prose
                s["identical"] += same
                parallel = same <= max_untranslated * prose
                s["left_out"] += not parallel
            text = "\n".join(p for p, _ in paras)
            # the length rule is the English page's: a Chinese translation of a 600-character
            # page may have 250 characters, and it is still the same text
            if lang == "en":
                english_chars[page] = len(text)
            if english_chars.get(page, len(text)) < min_chars:
                continue
            line = json.dumps({"id": f"{page}/{lang}", "page": page, "lang": lang,
                               "package": package, "text": text}, ensure_ascii=False)
            (f if parallel else g).write(line + "\n")
            n += parallel
    os.replace(output + ".tmp", output)
    os.replace(out_untr + ".tmp", out_untr)
    print(f"wrote {n:,} pages to {output} (largely untranslated ones: {out_untr})",
          file=sys.stderr)
    print("lang  pages  prose paragraphs  identical to English  pages left out "
          f"(> {max_untranslated:.0%} of paragraphs English)", file=sys.stderr)
    for lang, s in stats.items():
        print(f"{lang:4}  {s['pages']:>5}  {s['paragraphs']:>16,}  "
              f"{s['identical']:>10,} ({s['identical'] / max(s['paragraphs'], 1):.3f})  "
              f"{s['left_out']:>14}", file=sys.stderr)
