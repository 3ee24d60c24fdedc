"""Consistency of `llmtk clean` on parallel text: does a translation get its page's verdict?

Reproduce (after `make setup`):

    python3 benchmarks/manpages_corpus.py            # -> benchmarks/out/manpages.jsonl
    python3 benchmarks/gnome_help_corpus.py          # -> benchmarks/out/gnome-help.jsonl
    python3 benchmarks/debian_reference_corpus.py    # -> benchmarks/out/debian-reference.jsonl
    .venv/bin/python benchmarks/clean_parallel.py --calibrate

Any JSONL of {"page", "lang", "text"} records works (give the files as arguments; the default
is the three corpora above): the translations' languages present make the table's rows.

Every page runs through the default `llmtk clean` pipeline (normalise, language ID, the four
rule sets, PII). For each corpus and language it prints the two-way table against issue 28's
goal: of the pages kept in English, the share whose translation is kept (kept); of the pages
dropped in English, the share whose translation is kept all the same (kept when EN drops,
goal <= 0.15); the share of pages on which the two verdicts agree (goal >= 0.9; >= 0.8 for zh
and ja); the rules that make the verdicts differ in each direction; and how often language ID
names the translation's language.

What is compared is parallel text only. Left out of the comparison (counted in the output):
  * the translators' credits that manpages-l10n appends to every translated page
    (ÜBERSETZUNG, TRADUCTION, ...: names and <a@b.org> addresses, no translation of
    anything; `--keep-credits` keeps them);
  * translations with more than 10 % of their prose lines (3 words or more, ending with
    terminal punctuation) identical to a line of the English page (`--max-untranslated`):
    paragraphs left in English, as gnome_help_corpus.py and debian_reference_corpus.py
    already do at build time with the documents' markup (man pages have none);
  * translations of another version of the page: their length, relative to the English
    page's, is outside 1/1.5 .. 1.5 times the median ratio of their language in that corpus
    (`--length-band`; manpages-zh translates pages of the early 2000s: its tcp(7) has 4,521
    characters for English's 41,996).

`--calibrate` derives per-language minimum alpha-word shares that give a translation its
English page's verdict (the method and the choice are in docs/clean.md, "One verdict across
languages"): it measures every page once with the alpha-word rule off, fits each language's
threshold on one half of the pages of all corpora (a stable hash of the page name), prints
it with a bootstrap interval and the band of thresholds at which the goal is met on that
half of every corpus, proposes the threshold in force moved into the band (unchanged when
it lies there), and prints the two-way table of the other half at each set of thresholds.
`--alpha es=0.825` sets a language's threshold (a [lang.es.gopher_quality] override) for
every run; `--llmtk DIR` imports llmtk from another checkout (a "before" table);
`--cjk-ratios` prints, for Chinese and Japanese, the median ratio of a translation's
alpha-word share to its English page's, counted in words and a word per character.
"""

import argparse
import json
import re
import sys
import zlib
from collections import Counter, defaultdict
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# The languages first, in this order, then any others the corpus has.
ORDER = ("de", "fr", "es", "ru", "pl", "zh", "ja")
CORPORA = ("manpages", "gnome-help", "debian-reference")
# The goal: agreement >= 0.9 (0.8 for zh, ja), kept when English drops <= 0.15.
AGREE = {"zh": 0.8, "ja": 0.8}
AGREE_DEFAULT, KEPT_DROPPED_MAX = 0.9, 0.15
# The heading of the translators' credits that manpages-l10n appends to every page.
CREDITS = frozenset({"ÜBERSETZUNG", "TRADUCTION", "TRADUCCIÓN", "ПЕРЕВОД", "TŁUMACZENIE"})
# A prose line: three words or more, ending with terminal punctuation (and closers).
_PROSE_END = re.compile(r"[.!?。！？][\"'”’»)\]）」]*$")
GRID = [round(0.7 + i / 1000, 3) for i in range(251)]  # alpha thresholds tried, 0.700..0.950


def parallel_text(text: str) -> str:
    """The page without a trailing translators' credits section (see the docstring)."""
    lines = text.split("\n")
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].strip() in CREDITS:
            return "\n".join(lines[:i]).rstrip()
    return text


def prose_lines(text: str) -> list[str]:
    return [s for s in (x.strip() for x in text.split("\n"))
            if len(s.split()) >= 3 and _PROSE_END.search(s)]


def untranslated_share(text: str, english: str) -> float:
    """Share of the translation's prose lines that are a line of the English page."""
    prose = prose_lines(text)
    if not prose:
        return 0.0
    same = set(prose_lines(english))
    return sum(p in same for p in prose) / len(prose)


def select(docs: list[dict], max_untranslated: float = 0.1, band: float = 1.5
           ) -> tuple[list[dict], dict[str, Counter]]:
    """The parallel pages: translations that are neither partly English nor of another
    version of the page (see the docstring), with the English pages that keep at least one.
    Returns them and, per language, how many were left out and why."""
    pages: dict[str, dict[str, dict]] = defaultdict(dict)
    for d in docs:
        pages[d["page"]][d["lang"]] = d
    ratios: dict[str, list[float]] = defaultdict(list)
    for g in pages.values():
        if "en" in g:
            for lang, d in g.items():
                if lang != "en":
                    ratios[lang].append(len(d["text"]) / max(len(g["en"]["text"]), 1))
    median = {lang: sorted(r)[len(r) // 2] for lang, r in ratios.items()}
    out: dict[str, Counter] = defaultdict(Counter)
    keep: set[int] = set()
    for g in pages.values():
        en = g.get("en")
        if en is None:
            continue
        for lang, d in g.items():
            if lang == "en":
                continue
            ratio = len(d["text"]) / max(len(en["text"]), 1) / median[lang]
            if untranslated_share(d["text"], en["text"]) > max_untranslated:
                out[lang]["untranslated"] += 1
            elif not 1 / band <= ratio <= band:
                out[lang]["other_version"] += 1
            else:
                out[lang]["compared"] += 1
                keep.update((id(d), id(en)))
    return [d for d in docs if id(d) in keep], out


def cleaner(lang_overrides: dict | None = None, alpha: bool = True):
    """The default pipeline, with `lang_overrides` ([lang.XX] tables) on top of the built-in
    ones; `alpha=False` switches the alpha-word rule off in every language."""
    from dataclasses import replace

    from llmtk.clean import CleanConfig, Cleaner
    from llmtk.clean.langs import builtin

    cfg = CleanConfig()
    user = {k: dict(v) for k, v in (lang_overrides or {}).items()}
    if not alpha:
        cfg = replace(cfg, gopher_quality=replace(cfg.gopher_quality,
                                                  min_alpha_words_ratio=None))
        for lang in set(builtin()) | set(user):
            user[lang] = {**user.get(lang, {}), "gopher_quality": {
                **user.get(lang, {}).get("gopher_quality", {}), "min_alpha_words_ratio": False}}
    c = Cleaner(replace(cfg, lang=user), annotate=True)
    c.load()
    return c


def run(docs: list[dict], c) -> list[tuple[str, str | None, dict]]:
    """(verdict, detected language, the rule values measured) for every page."""
    from llmtk.io.record import Doc

    out = []
    for i, d in enumerate(docs):
        doc = Doc({"text": d["text"]}, None, "corpus", i + 1, i)
        reason = c(doc) or "keep"
        notes = doc.data.get("llmtk", {})
        out.append((reason, notes.get("lang"), notes))
    return out


def alpha_shares(docs: list[dict], langs: list[str | None], c) -> list[float]:
    """Each page's share of words with a letter, as the rule measures it (the normalised
    text, segmented as its detected language)."""
    from llmtk.clean.filters import DocText, alpha_share

    norm = c.cfg.normalize
    return [alpha_share(DocText(norm(d["text"]), lang).words)
            for d, lang in zip(docs, langs, strict=True)]


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
    why_en: Counter = Counter()  # ... and English's reasons for dropping those

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

    def meets(self, lang: str) -> bool:
        return (self.agreement >= AGREE.get(lang, AGREE_DEFAULT)
                and self.share_dropped <= KEPT_DROPPED_MAX)


def table(docs: list[dict], v: list[str]) -> dict[str, Row]:
    by_page: dict[str, dict[str, str]] = defaultdict(dict)
    for d, verdict in zip(docs, v, strict=True):
        by_page[d["page"]][d["lang"]] = verdict
    rows = {}
    for lang in languages(docs):
        base = kept = base_dropped = kept_dropped = 0
        why: Counter = Counter()
        why_en: Counter = Counter()
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
                if page[lang] == "keep":
                    kept_dropped += 1
                    why_en[page["en"]] += 1
        rows[lang] = Row(base, kept, why, base_dropped, kept_dropped, why_en)
    return rows


def half(page: str) -> int:
    """Pages split in two fixed halves by a stable hash of their name (0: calibration)."""
    return zlib.crc32(page.encode()) & 1


class Fact(NamedTuple):
    """A page measured once with the alpha-word rule off."""

    page: str
    lang: str  # the corpus's language
    detected: str | None
    passes: bool  # kept by every other rule
    alpha: float


def verdict_at(f: Fact, thresholds: dict[str, float]) -> bool:
    """Kept at these alpha-word thresholds (by detected language; English's 0.8 else)?
    Exactly the pipeline's keep/drop: the alpha rule only adds drops."""
    return f.passes and f.alpha >= thresholds.get(f.detected, 0.8)


def pairs(facts: list[Fact], lang: str, halves: tuple[int, ...]) -> list[tuple[Fact, Fact]]:
    by_page: dict[str, dict[str, Fact]] = defaultdict(dict)
    for f in facts:
        if half(f.page) in halves:
            by_page[f.page][f.lang] = f
    return [(g["en"], g[lang]) for g in by_page.values() if "en" in g and lang in g]


def arrays(pp: list[tuple[Fact, Fact]], lang: str, rest: dict):
    """Per page: English's verdict, and the translation's as a function of the threshold t
    for `lang` (kept when `fixed`, or when `var` and its share >= t)."""
    import numpy as np

    en = np.array([verdict_at(e, rest) for e, _ in pp], dtype=bool)
    var = np.array([x.detected == lang and x.passes for _, x in pp], dtype=bool)
    fixed = np.array([x.detected != lang and verdict_at(x, rest) for _, x in pp], dtype=bool)
    alpha = np.array([x.alpha for _, x in pp])
    return en, var, fixed, alpha


def balanced(en, var, fixed, alpha):
    """For every threshold of GRID: (share of English-kept pages whose translation is kept +
    share of English-dropped pages whose translation is dropped) / 2; None without 5 pages
    of each English verdict."""
    import numpy as np

    n_kept, n_dropped = int(en.sum()), int((~en).sum())
    if n_kept < 5 or n_dropped < 5:
        return None
    kept = fixed[None, :] | (var[None, :] & (alpha[None, :] >= np.array(GRID)[:, None]))
    return ((kept & en).sum(1) / n_kept + (~kept & ~en).sum(1) / n_dropped) / 2  # (grid,)


def fit(corpora: list, lang: str, rest: dict, arrs: list | None = None) -> float | None:
    """The threshold that gives translations their English page's verdict best, both ways
    counted alike (balanced accuracy, averaged over the corpora that have 5 pages of each
    English verdict; the lowest of equal ones), or None when no corpus has."""
    import numpy as np

    arrs = arrs if arrs is not None else [arrays(pp, lang, rest) for pp in corpora]
    scores = [s for a in arrs if (s := balanced(*a)) is not None]
    if not scores:
        return None
    return GRID[int(np.argmax(np.mean(scores, axis=0)))]


def goal_band(corpora: list, lang: str, rest: dict) -> list[float]:
    """The thresholds of GRID at which the goal is met on every corpus that has 5 pages of
    each English verdict (agreement >= 0.9, 0.8 for zh and ja; kept when English drops
    <= 0.15)."""
    import numpy as np

    grid = np.array(GRID)
    ok = np.ones(len(GRID), dtype=bool)
    for en, var, fixed, alpha in (arrays(pp, lang, rest) for pp in corpora):
        n_kept, n_dropped = int(en.sum()), int((~en).sum())
        if n_kept < 5 or n_dropped < 5:
            continue
        kept = fixed[None, :] | (var[None, :] & (alpha[None, :] >= grid[:, None]))
        agree = (kept == en[None, :]).mean(1)
        kept_dropped = (kept & ~en).sum(1) / n_dropped
        ok &= (agree >= AGREE.get(lang, AGREE_DEFAULT)) & (kept_dropped <= KEPT_DROPPED_MAX)
    return [t for t, o in zip(GRID, ok, strict=True) if o]


def nearest(value: float, band: list[float]) -> float:
    """`value` if the band holds it (or is empty), else the band's threshold nearest to it
    (the lower of two as near)."""
    if not band or value in band:
        return value
    return min(band, key=lambda t: (abs(t - value), t))


def spans(band: list[float]) -> str:
    """0.789-0.792, 0.809-0.810: the band as runs of consecutive grid steps."""
    runs: list[list[float]] = []
    for t in band:
        if runs and round(t - runs[-1][-1], 3) <= 0.001:
            runs[-1].append(t)
        else:
            runs.append([t])
    return ", ".join(f"{r[0]:.3f}-{r[-1]:.3f}" for r in runs) or "none"


def bootstrap(corpora: list, lang: str, rest: dict, n: int = 200, seed: int = 0
              ) -> tuple[float, float]:
    """5th and 95th percentile of the fit over pages resampled (per corpus)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    arrs = [arrays(pp, lang, rest) for pp in corpora if pp]
    fits = []
    for _ in range(n):
        sample = []
        for a in arrs:
            i = rng.integers(0, len(a[0]), len(a[0]))
            sample.append(tuple(x[i] for x in a))
        if (t := fit([], lang, rest, sample)) is not None:
            fits.append(t)
    lo, hi = np.quantile(fits, [0.05, 0.95])
    return float(lo), float(hi)


def print_table(name: str, docs: list[dict], v: list[str], lid: list[str | None] | None,
                left_out: dict[str, Counter] | None = None) -> dict[str, Row]:
    rows = table(docs, v)
    en_kept = sum(d["lang"] == "en" and x == "keep" for d, x in zip(docs, v, strict=True))
    print(f"\n{name}: {len(docs):,} pages ({sum(d['lang'] == 'en' for d in docs):,} English, "
          f"{en_kept:,} of them kept)")
    if left_out:
        print("left out (not parallel): " + "; ".join(
            f"{lang} {c['untranslated']} partly English, {c['other_version']} other version"
            for lang, c in left_out.items() if c["untranslated"] or c["other_version"]))
    print("lang  EN-kept  kept   EN-dropped  kept-when-EN-drops  agree  goal  "
          + ("lang-ID  " if lid else "")
          + "EN keeps, translation drops | EN drops, translation keeps")
    for lang, r in rows.items():
        right = ""
        if lid:
            mine = [x for d, x in zip(docs, lid, strict=True) if d["lang"] == lang]
            right = f"{sum(x == lang for x in mine) / max(len(mine), 1):>7.3f}  "
        tr = ", ".join(f"{w} {n}" for w, n in r.why.most_common(3)) or "-"
        en = ", ".join(f"{w} {n}" for w, n in r.why_en.most_common(3)) or "-"
        print(f"{lang:4}  {r.base:>7}  {r.share:.3f}  {r.base_dropped:>10}  "
              f"{r.share_dropped:>18.3f}  {r.agreement:.3f}  {'met ' if r.meets(lang) else 'NOT '}"
              f"  {right}{tr} | {en}")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", nargs="*", help="parallel pages as JSONL (default: the three "
                    "corpora under benchmarks/out, which the *_corpus.py scripts build)")
    ap.add_argument("--keep-credits", action="store_true",
                    help="keep the translators' credits section of the translations")
    ap.add_argument("--max-untranslated", type=float, default=0.1,
                    help="largest share of prose lines identical to English's (default 0.1)")
    ap.add_argument("--length-band", type=float, default=1.5,
                    help="length ratio band around the language's median (default 1.5)")
    ap.add_argument("--alpha", action="append", default=[], metavar="LANG=VALUE",
                    help="min_alpha_words_ratio for LANG in every run (repeatable)")
    ap.add_argument("--calibrate", action="store_true",
                    help="fit the alpha-word thresholds on one half, report on the other")
    ap.add_argument("--llmtk", metavar="DIR", help="import llmtk from this checkout")
    ap.add_argument("--cjk-ratios", action="store_true",
                    help="zh, ja: alpha-word share ratios to English, in words and per character")
    args = ap.parse_args()
    if args.llmtk:
        sys.path.insert(0, str(Path(args.llmtk).resolve()))
    paths = args.corpus or [str(ROOT / "benchmarks" / "out" / f"{c}.jsonl") for c in CORPORA]
    user = {}
    for item in args.alpha:
        lang, _, value = item.partition("=")
        user[lang] = {"gopher_quality": {"min_alpha_words_ratio": float(value)}}

    import llmtk

    print(f"llmtk from {Path(llmtk.__file__).parent}"
          + (f"; overrides: {' '.join(args.alpha)}" if args.alpha else ""))
    c = cleaner(user)
    corpora = {}
    for path in paths:
        docs = [json.loads(line) for line in open(path, encoding="utf-8")]
        if not args.keep_credits:
            for d in docs:
                d["text"] = parallel_text(d["text"])
        docs, left_out = select(docs, args.max_untranslated, args.length_band)
        results = run(docs, c)
        lid = [lang for _, lang, _ in results]
        print_table(Path(path).stem, docs, [r for r, _, _ in results], lid, left_out)
        corpora[Path(path).stem] = (docs, results)
    if args.calibrate:
        calibrate(corpora, user)
    if args.cjk_ratios:
        cjk_ratios(corpora, c)


def cjk_ratios(corpora: dict, c) -> None:
    """Per corpus, for zh and ja: the median ratio of a translation's alpha-word share to its
    English page's, the translation counted in its words (jieba, Sudachi) and a word per
    character (Korean's segmentation, llmtk's for Chinese and Japanese before), with every
    token and with the marks set aside (docs/clean.md, "One verdict across languages")."""
    from statistics import median

    from llmtk.clean.filters import _SYMBOL_TOKENS, alpha_share
    from llmtk.clean.tokens import tokens

    norm = c.cfg.normalize

    def shares(text: str, lang: str) -> tuple[float, float]:
        w = tokens(norm(text), lang)
        return alpha_share(w), alpha_share([x for x in w if x not in _SYMBOL_TOKENS])

    print("\nalpha-word share of a translation / its English page's, median over pages:")
    print("corpus             lang  pages  in words  per character  | marks set aside: "
          "in words  per character")
    for name, (docs, _) in corpora.items():
        by_page: dict[str, dict[str, str]] = defaultdict(dict)
        for d in docs:
            by_page[d["page"]][d["lang"]] = d["text"]
        for lang in ("zh", "ja"):
            r: dict[str, list[float]] = defaultdict(list)
            for g in by_page.values():
                if "en" not in g or lang not in g:
                    continue
                en, en_marks = shares(g["en"], "en")
                if not en or not en_marks:
                    continue
                for label, seg in (("words", lang), ("chars", "ko")):
                    a, a_marks = shares(g[lang], seg)
                    r[label].append(a / en)
                    r[label + "_marks"].append(a_marks / en_marks)
            if r:
                print(f"{name:18} {lang:4}  {len(r['words']):5}  {median(r['words']):8.3f}  "
                      f"{median(r['chars']):13.3f}  | {median(r['words_marks']):25.3f}  "
                      f"{median(r['chars_marks']):13.3f}")


def calibrate(corpora: dict, user: dict) -> None:
    """Fit each language's alpha-word threshold on the calibration half of all corpora, then
    show the other half at the fitted thresholds next to the thresholds in force."""
    from llmtk.clean.langs import builtin

    off = cleaner(user, alpha=False)
    facts: dict[str, list[Fact]] = {}
    in_force = {}
    for name, (docs, results) in corpora.items():
        found = run(docs, off)
        langs = [lang for _, lang, _ in found]
        shares = alpha_shares(docs, langs, off)
        facts[name] = [Fact(d["page"], d["lang"], lang, r == "keep", a)
                       for d, (r, lang, _), a in zip(docs, found, shares, strict=True)]
        for lang in set(langs) - {None, "en"}:
            table_ = {**builtin().get(lang, {}), **user.get(lang, {})}
            in_force[lang] = table_.get("gopher_quality", {}).get("min_alpha_words_ratio", 0.8)
        # the simulation must give the pipeline's own keep/drop at the thresholds in force
        sim = [verdict_at(f, in_force) for f in facts[name]]
        real = [r == "keep" for r, _, _ in results]
        assert sim == real, f"{name}: simulated verdicts differ from the pipeline's"
    langs = languages([{"lang": f.lang} for fs in facts.values() for f in fs])
    fitted, proposed = dict(in_force), dict(in_force)
    print("\nalpha-word thresholds on the calibration half of all corpora: fitted (balanced "
          "accuracy; bootstrap 90 % interval); in force; the band where the goal is met on "
          "every corpus; in force moved into that band (proposed):")
    for lang in langs:
        cal = [pairs(fs, lang, (0,)) for fs in facts.values()]
        t = fit(cal, lang, in_force)
        if t is None:
            continue
        lo, hi = bootstrap(cal, lang, in_force)
        fitted[lang] = t
        now = in_force.get(lang, 0.8)
        band = goal_band(cal, lang, in_force)
        proposed[lang] = nearest(now, band)
        print(f"{lang:4}  fitted {t:.3f} [{lo:.3f}, {hi:.3f}]  in force {now}  goal met at "
              f"{spans(band)}  proposed {proposed[lang]}")
    for name, fs in facts.items():
        held = [f for f in fs if half(f.page) == 1]
        docs = [{"page": f.page, "lang": f.lang} for f in held]
        for label, th in (("in force", in_force), ("fitted", fitted), ("proposed", proposed)):
            print_table(f"{name}, held-out half, thresholds {label}", docs,
                        ["keep" if verdict_at(f, th) else "drop" for f in held], None)
    print("\n# the proposed thresholds as a --config file")
    for lang in langs:
        if lang in proposed:
            print(f"[lang.{lang}.gopher_quality]\nmin_alpha_words_ratio = {proposed[lang]}")


if __name__ == "__main__":
    main()
