"""Consistency of `llmtk clean` on parallel text: is a translation of a kept page kept too?

Reproduce (after `make setup`):

    python3 benchmarks/manpages_corpus.py                    # builds benchmarks/out/manpages.jsonl
    .venv/bin/python benchmarks/clean_parallel.py benchmarks/out/manpages.jsonl

The corpus is Debian's manual pages in English and their translations (manpages-de, -fr,
-es, -ru, -pl, -ja, -zh; see manpages_corpus.py). Every page runs through the default
`llmtk clean` pipeline (normalise, language ID, the four rule sets, PII) twice: with the
built-in per-language thresholds (the default) and with `--no-lang-thresholds` (the global,
English-tuned thresholds for every language, as before). For each language: of the pages
kept in English that have a translation, the share whose translation is kept too, and the
reasons the others were dropped. Also: how often language ID names the translation's
language (a man page is full of English option names and code, so this is a real test of
mixed-script text).

The l10n translations (de, fr, es, ru, pl) end with a section the English page does not have:
the translators' credits (ÜBERSETZUNG, TRADUCTION, TRADUCCIÓN, ПЕРЕВОД, TŁUMACZENIE), a list
of names and e-mail addresses in angle brackets plus licence boilerplate. It is not a
translation of anything, and its "<a@b.org>," tokens (3 of 4 without a letter) pull a page's
alpha-word share down by ~0.01-0.03, so the comparison leaves it out (`parallel_text`);
`--keep-credits` measures the pages as rendered.
"""

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LANGS = ("de", "fr", "es", "ru", "pl", "zh", "ja")
# The heading of the translators' credits that manpages-l10n appends to every page.
CREDITS = frozenset({"ÜBERSETZUNG", "TRADUCTION", "TRADUCCIÓN", "ПЕРЕВОД", "TŁUMACZENIE"})


def parallel_text(text: str) -> str:
    """The page without a trailing translators' credits section (see the docstring)."""
    lines = text.split("\n")
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].strip() in CREDITS:
            return "\n".join(lines[:i]).rstrip()
    return text


def verdicts(docs: list[dict], lang_thresholds: bool, user: dict | None = None) -> list[str]:
    from llmtk.clean import CleanConfig, Cleaner
    from llmtk.io.record import Doc

    cfg = CleanConfig()
    cfg.langid.lang_thresholds = lang_thresholds
    cfg.lang = user or {}
    cleaner = Cleaner(cfg)
    cleaner.load()
    return [cleaner(Doc({"text": d["text"]}, None, "corpus", i + 1, i)) or "keep"
            for i, d in enumerate(docs)]


def detected(docs: list[dict]) -> list[str]:
    from llmtk.text.langid import LanguageId

    lid = LanguageId()
    lid.load()
    return [lid.predict(d["text"])[0] for d in docs]


def table(docs: list[dict], v: list[str]) -> dict[str, tuple[int, int, Counter]]:
    by_page: dict[str, dict[str, str]] = defaultdict(dict)
    for d, verdict in zip(docs, v, strict=True):
        by_page[d["page"]][d["lang"]] = verdict
    rows = {}
    for lang in LANGS:
        base = kept = 0
        why: Counter = Counter()
        for page in by_page.values():
            if page.get("en") == "keep" and lang in page:
                base += 1
                if page[lang] == "keep":
                    kept += 1
                else:
                    why[page[lang]] += 1
        rows[lang] = (base, kept, why)
    return rows


def half(page: str) -> int:
    """Pages split in two fixed halves by a stable hash of their name."""
    import zlib

    return zlib.crc32(page.encode()) & 1


def english_equivalent(docs: list[dict], v: list[str], q: float = 0.1) -> dict:
    """[lang.XX] alpha-word thresholds as strict as English's on the same text.

    For the pages kept in English (calibration half), the ratio of a translation's share of
    words with a letter to the English page's; the threshold is English's 0.8 times the
    q-quantile of those ratios, or the built-in figure when that is lower.
    """
    from llmtk.clean.calibrate import quantile
    from llmtk.clean.filters import _ALPHA, DocText
    from llmtk.clean.langs import builtin

    def alpha(text: str, lang: str) -> float:
        w = DocText(text, lang).words
        return sum(map(bool, map(_ALPHA.search, w))) / max(len(w), 1)

    by_page: dict[str, dict[str, str]] = defaultdict(dict)
    for d, verdict in zip(docs, v, strict=True):
        if half(d["page"]) == 0:
            by_page[d["page"]][d["lang"]] = d["text"] if verdict == "keep" or d["lang"] != "en" \
                else None
    ratios: dict[str, list[float]] = defaultdict(list)
    for page in by_page.values():
        if page.get("en"):
            a_en = alpha(page["en"], "en")
            for lang, text in page.items():
                if lang != "en":
                    ratios[lang].append(alpha(text, lang) / a_en)
    out = {}
    for lang, r in ratios.items():
        fw2 = builtin().get(lang, {}).get("gopher_quality", {}).get("min_alpha_words_ratio", 0.8)
        out[lang] = {"gopher_quality": {"min_alpha_words_ratio": round(min(
            fw2, 0.8 * quantile(r, q)), 3)}}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", nargs="?", default=str(ROOT / "benchmarks/out/manpages.jsonl"))
    ap.add_argument("--keep-credits", action="store_true",
                    help="keep the translators' credits section of the translations")
    args = ap.parse_args()
    docs = [json.loads(line) for line in open(args.corpus, encoding="utf-8")]
    if not args.keep_credits:
        for d in docs:
            d["text"] = parallel_text(d["text"])
    pages = Counter(d["page"] for d in docs)
    docs = [d for d in docs if pages[d["page"]] > 1]  # pages with at least one translation
    en_kept = {}
    results = {}
    for mode in (False, True):
        v = verdicts(docs, mode)
        results[mode] = table(docs, v)
        en_kept[mode] = sum(d["lang"] == "en" and x == "keep" for d, x in zip(docs, v,
                                                                              strict=True))
    # English-equivalent alpha thresholds from one half of the pages, measured on the other
    v = verdicts(docs, True)
    equiv = english_equivalent(docs, v)
    evaluation = [d for d in docs if half(d["page"]) == 1]
    held = {"built-in": table(evaluation, verdicts(evaluation, True)),
            "english-equivalent": table(evaluation, verdicts(evaluation, True, equiv))}
    lid = detected(docs)
    print(f"corpus: {args.corpus}: {len(docs):,} pages that have a translation "
          f"(translators' credits {'kept' if args.keep_credits else 'left out'}) "
          f"({sum(d['lang'] == 'en' for d in docs):,} English); English pages kept: "
          f"{en_kept[True]:,}")
    print("\nlang  EN-kept pages  translation kept: global thresholds | per-language   "
          "lang-ID correct   main drop reasons (per-language)")
    for lang in LANGS:
        b0, k0, _ = results[False][lang]
        b1, k1, why = results[True][lang]
        mine = [x for d, x in zip(docs, lid, strict=True) if d["lang"] == lang]
        right = sum(x == lang for x in mine) / max(len(mine), 1)
        top = ", ".join(f"{r} {n}" for r, n in why.most_common(3))
        print(f"{lang:4}  {b1:>13}  {k0 / max(b0, 1):>31.3f} | {k1 / max(b1, 1):>12.3f}   "
              f"{right:>15.3f}   {top}")
    print("\nheld-out half: alpha-word thresholds as strict as English's on the other half's "
          "parallel pages\nlang  EN-kept pages  built-in  english-equivalent  (threshold)")
    for lang in LANGS:
        b, k, _ = held["built-in"][lang]
        b2, k2, why = held["english-equivalent"][lang]
        thr = equiv.get(lang, {}).get("gopher_quality", {}).get("min_alpha_words_ratio")
        print(f"{lang:4}  {b:>13}  {k / max(b, 1):>8.3f}  {k2 / max(b2, 1):>18.3f}  ({thr})")


if __name__ == "__main__":
    main()
