"""Consistency of `llmtk clean` on parallel text: is a translation of a kept page kept too?

Reproduce (after `make setup`):

    python3 benchmarks/manpages_corpus.py                    # builds benchmarks/out/manpages.jsonl
    .venv/bin/python benchmarks/clean_parallel.py benchmarks/out/manpages.jsonl
    python3 benchmarks/gnome_help_corpus.py                  # GNOME's desktop user help
    .venv/bin/python benchmarks/clean_parallel.py benchmarks/out/gnome-help.jsonl
    python3 benchmarks/debian_reference_corpus.py            # the Debian Reference, per section
    .venv/bin/python benchmarks/clean_parallel.py benchmarks/out/debian-reference.jsonl

Any JSONL of {"page", "lang", "text"} records works: the translations' languages present in
it make the table's rows. `--alpha es=0.825` sets a language's min_alpha_words_ratio (a
`[lang.es.gopher_quality]` override) for every run, to compare a figure with the built-in one.

The default corpus is Debian's manual pages in English and their translations (manpages-de,
-fr, -es, -ru, -pl, -ja, -zh; see manpages_corpus.py). Every page runs through the default
`llmtk clean` pipeline (normalise, language ID, the four rule sets, PII) twice: with the
built-in per-language thresholds (the default) and with `--no-lang-thresholds` (the global,
English-tuned thresholds for every language, as before). For each language: of the pages
kept in English that have a translation, the share whose translation is kept too, and the
reasons the others were dropped; and the other direction, of the pages dropped in English,
the share whose translation is kept all the same (a threshold more lenient than English's
shows there), with the share of pages where both verdicts agree. Also: how often language ID
names the translation's language (a man page is full of English option names and code, so
this is a real test of mixed-script text).

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
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# The languages first, in this order, then any others the corpus has.
ORDER = ("de", "fr", "es", "ru", "pl", "zh", "ja")
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
    from dataclasses import replace

    from llmtk.clean import CleanConfig, Cleaner
    from llmtk.io.record import Doc

    cfg = CleanConfig()
    cfg = replace(cfg, langid=replace(cfg.langid, lang_thresholds=lang_thresholds),
                  lang=user or {})
    cleaner = Cleaner(cfg)
    cleaner.load()
    return [cleaner(Doc({"text": d["text"]}, None, "corpus", i + 1, i)) or "keep"
            for i, d in enumerate(docs)]


def detected(docs: list[dict]) -> list[str]:
    from llmtk.text.langid import LanguageId

    lid = LanguageId()
    lid.load()
    return [lid.predict(d["text"])[0] for d in docs]


def languages(docs: list[dict]) -> list[str]:
    """The translations' languages in the corpus, ORDER's first."""
    found = {d["lang"] for d in docs} - {"en"}
    return [x for x in ORDER if x in found] + sorted(found - set(ORDER))


class Row(NamedTuple):
    """One language's counts over the pages that have a translation in it."""

    base: int  # pages kept in English
    kept: int  # ... whose translation is kept too
    why: Counter  # the reasons the other translations were dropped
    base_dropped: int  # pages dropped in English
    kept_dropped: int  # ... whose translation is kept all the same

    @property
    def share(self) -> float:
        return self.kept / max(self.base, 1)

    @property
    def share_dropped(self) -> float:
        return self.kept_dropped / max(self.base_dropped, 1)

    @property
    def agreement(self) -> float:
        """Share of pages on which the translation's verdict is English's."""
        same = self.kept + self.base_dropped - self.kept_dropped
        return same / max(self.base + self.base_dropped, 1)


def table(docs: list[dict], v: list[str]) -> dict[str, Row]:
    by_page: dict[str, dict[str, str]] = defaultdict(dict)
    for d, verdict in zip(docs, v, strict=True):
        by_page[d["page"]][d["lang"]] = verdict
    rows = {}
    for lang in languages(docs):
        base = kept = base_dropped = kept_dropped = 0
        why: Counter = Counter()
        for page in by_page.values():
            if "en" not in page or lang not in page:
                continue
            if page["en"] == "keep":
                base += 1
                if page[lang] == "keep":
                    kept += 1
                else:
                    why[page[lang]] += 1
            else:
                base_dropped += 1
                kept_dropped += page[lang] == "keep"
        rows[lang] = Row(base, kept, why, base_dropped, kept_dropped)
    return rows


def half(page: str) -> int:
    """Pages split in two fixed halves by a stable hash of their name."""
    import zlib

    return zlib.crc32(page.encode()) & 1


def english_equivalent(docs: list[dict], v: list[str], q: float = 0.1,
                       user: dict | None = None, halves: tuple[int, ...] = (0,)
                       ) -> tuple[dict, dict]:
    """[lang.XX] alpha-word thresholds as strict as English's on the same text.

    For the pages kept in English (in `halves`: the calibration half), the ratio of a
    translation's share of words with a letter to the English page's; the threshold is
    English's 0.8 times the q-quantile of those ratios, or the figure in force (the built-in
    one, or `user`'s) when that is lower. Also returns, per language, (pages, median ratio,
    0.8 x q-quantile).
    """
    from llmtk.clean.calibrate import quantile
    from llmtk.clean.filters import DocText, alpha_share

    def alpha(text: str, lang: str) -> float:
        return alpha_share(DocText(text, lang).words)

    by_page: dict[str, dict[str, str]] = defaultdict(dict)
    for d, verdict in zip(docs, v, strict=True):
        if half(d["page"]) in halves:
            by_page[d["page"]][d["lang"]] = d["text"] if verdict == "keep" or d["lang"] != "en" \
                else None
    ratios: dict[str, list[float]] = defaultdict(list)
    for page in by_page.values():
        if page.get("en"):
            a_en = alpha(page["en"], "en")
            for lang, text in page.items():
                if lang != "en":
                    ratios[lang].append(alpha(text, lang) / a_en)
    out, raw = {}, {}
    for lang, r in ratios.items():
        now = alpha_threshold(lang, user)
        raw[lang] = (len(r), quantile(r, 0.5), 0.8 * quantile(r, q))
        out[lang] = {"gopher_quality": {"min_alpha_words_ratio": round(min(
            now, 0.8 * quantile(r, q)), 3)}}
    return out, raw


def alpha_threshold(lang: str, user: dict | None = None) -> float:
    """The min_alpha_words_ratio a document in `lang` gets (user's, built-in, or global)."""
    from llmtk.clean.langs import builtin

    for table in ((user or {}).get(lang, {}), builtin().get(lang, {})):
        value = table.get("gopher_quality", {}).get("min_alpha_words_ratio")
        if value is not None:
            return value
    return 0.8


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", nargs="?", default=str(ROOT / "benchmarks/out/manpages.jsonl"),
                    help="parallel pages as JSONL (default: benchmarks/out/manpages.jsonl, "
                         "which manpages_corpus.py builds from Debian packages)")
    ap.add_argument("--keep-credits", action="store_true",
                    help="keep the translators' credits section of the translations")
    ap.add_argument("--alpha", action="append", default=[], metavar="LANG=VALUE",
                    help="min_alpha_words_ratio for LANG in every run (repeatable)")
    args = ap.parse_args()
    user = {}
    for item in args.alpha:
        lang, _, value = item.partition("=")
        user[lang] = {"gopher_quality": {"min_alpha_words_ratio": float(value)}}
    docs = [json.loads(line) for line in open(args.corpus, encoding="utf-8")]
    if not args.keep_credits:
        for d in docs:
            d["text"] = parallel_text(d["text"])
    pages = Counter(d["page"] for d in docs)
    docs = [d for d in docs if pages[d["page"]] > 1]  # pages with at least one translation
    verdict = {mode: verdicts(docs, mode, user) for mode in (False, True)}
    results = {mode: table(docs, v) for mode, v in verdict.items()}
    v = verdict[True]
    en_kept = sum(d["lang"] == "en" and x == "keep" for d, x in zip(docs, v, strict=True))
    # English-equivalent alpha thresholds from one half of the pages, measured on the other
    equiv, raw = english_equivalent(docs, v, user=user)
    held_out = [(d, x) for d, x in zip(docs, v, strict=True) if half(d["page"]) == 1]
    evaluation = [d for d, _ in held_out]
    held = {"in force": table(evaluation, [x for _, x in held_out]),
            "english-equivalent": table(evaluation, verdicts(evaluation, True,
                                                            {**user, **equiv}))}
    _, whole = english_equivalent(docs, v, user=user, halves=(0, 1))
    lid = detected(docs)
    print(f"corpus: {args.corpus}: {len(docs):,} pages that have a translation "
          f"(translators' credits {'kept' if args.keep_credits else 'left out'}) "
          f"({sum(d['lang'] == 'en' for d in docs):,} English); English pages kept: "
          f"{en_kept:,}" + (f"; overrides: {' '.join(args.alpha)}" if args.alpha else ""))
    langs = languages(docs)
    print("\nkept: share of the translations kept; agree: share of pages where the translation's "
          "verdict is English's\nlang  EN-kept  kept: global | per-language  EN-dropped  "
          "kept (per-language)  agree  lang-ID right  main drop reasons (per-language)")
    for lang in langs:
        r0, r = results[False][lang], results[True][lang]
        mine = [x for d, x in zip(docs, lid, strict=True) if d["lang"] == lang]
        right = sum(x == lang for x in mine) / max(len(mine), 1)
        top = ", ".join(f"{why} {n}" for why, n in r.why.most_common(3))
        print(f"{lang:4}  {r.base:>7}  {r0.share:>12.3f} | {r.share:>12.3f}  "
              f"{r.base_dropped:>10}  {r.share_dropped:>19.3f}  {r.agreement:>5.3f}  "
              f"{right:>13.3f}  {top}")
    print("\nheld-out half: alpha-word thresholds as strict as English's on the other half's "
          "parallel pages\n(calibration half: pages, median translation/English alpha-word "
          "share ratio, 0.8 x its 10th percentile)\n"
          "lang  EN-kept  kept: in force | English-equivalent  EN-dropped  "
          "kept: in force | English-equivalent  (threshold; in force)  "
          "calibration: pages  median  0.8 x p10")
    for lang in langs:
        a, b = held["in force"][lang], held["english-equivalent"][lang]
        thr = equiv.get(lang, {}).get("gopher_quality", {}).get("min_alpha_words_ratio")
        n, med, p10 = raw.get(lang, (0, float("nan"), float("nan")))
        print(f"{lang:4}  {a.base:>7}  {a.share:>14.3f} | {b.share:>18.3f}  "
              f"{a.base_dropped:>10}  {a.share_dropped:>14.3f} | {b.share_dropped:>18.3f}  "
              f"{f'({thr}; {alpha_threshold(lang, user)})':>21}  {n:>18}  {med:>6.3f}  "
              f"{p10:>9.3f}")
    print("\nEnglish-equivalent alpha-word threshold on all pages (0.8 x the 10th-percentile "
          "ratio; pages):\n" + "  ".join(f"{lang} {whole[lang][2]:.3f} ({whole[lang][0]})"
                                         for lang in langs if lang in whole))

if __name__ == "__main__":
    main()
