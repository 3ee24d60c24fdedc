"""Calibrate the Gopher/FineWeb thresholds for one language from reference text.

FineWeb-2's method, in the small: measure every rule's statistic on each document of a
reference corpus that is known to be good text in the language (Wikipedia, curated
documentation, your own accepted data), then put each threshold at a tail quantile of those
values, so that each rule removes about the same small share of the reference text:

* rules that drop documents *above* a value (duplicate-line fraction, most-frequent and
  repeated n-gram character shares, line breaks per word, mean word length) take the
  `quantile` (default 0.95) of the reference values;
* rules that drop documents *below* a value (share of words with a letter, share of lines
  ending in terminal punctuation, mean word length) take the `1 - quantile` one;
* the stop words are the language's most frequent tokens that contain a letter, counted by
  the number of reference documents they occur in (FineWeb-2 took its lists the same way).

Words are counted with the same segmentation `llmtk clean` uses for that language (CJK per
character, French elision, ...), so the thresholds fit the numbers the filters measure.
The result is a `[lang.XX...]` table in `llmtk clean --config` format (`llmtk.clean.langs`).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from llmtk.clean.filters import (
    _ALPHA,
    _LINES,
    _SYMBOL_TOKENS,
    CJK_LANGS,
    TERMINAL_PUNCT,
    DocText,
    _find_duplicates,
    alpha_share,
    ngrams,
)
from llmtk.errors import ConfigError, UsageError

TOP_N = (2, 3, 4)
DUP_N = (5, 6, 7, 8, 9, 10)
N_STOP_WORDS = 15
MIN_DOCS = 20  # fewer reference documents than this cannot give a 5 % tail


@dataclass
class Stats:
    """Each rule's statistic, one value per reference document."""

    alpha: list[float] = field(default_factory=list)
    mean_word_length: list[float] = field(default_factory=list)
    dup_line_frac: list[float] = field(default_factory=list)
    top: dict[int, list[float]] = field(default_factory=lambda: {n: [] for n in TOP_N})
    dup: dict[int, list[float]] = field(default_factory=lambda: {n: [] for n in DUP_N})
    line_punct: list[float] = field(default_factory=list)
    new_line_ratio: list[float] = field(default_factory=list)
    doc_freq: Counter = field(default_factory=Counter)  # word -> documents it occurs in
    freq: Counter = field(default_factory=Counter)  # word -> occurrences
    docs: int = 0


def measure(texts: Iterable[str], lang: str) -> Stats:
    """The statistics of every non-empty reference document."""
    st = Stats()
    for text in texts:
        text = text.strip()
        d = DocText(text, lang)
        words = d.words
        if not words:
            continue
        st.docs += 1
        n_chars = len(text)
        st.alpha.append(alpha_share(words))
        real = [w for w in words if w not in _SYMBOL_TOKENS]
        if real:
            st.mean_word_length.append(sum(map(len, real)) / len(real))
        lines = _LINES.split(text)
        st.dup_line_frac.append(_find_duplicates(lines)[0] / len(lines))
        grams = ngrams(words)
        for n in TOP_N:
            st.top[n].append(grams.top_chars(n) / n_chars if len(words) >= n else 0.0)
        for n in DUP_N:
            st.dup[n].append(grams.dup_chars(n) / n_chars)
        nonblank = [line for line in text.split("\n") if line.strip()]
        st.line_punct.append(sum(line.endswith(TERMINAL_PUNCT) for line in nonblank)
                             / len(nonblank))
        st.new_line_ratio.append(text.count("\n") / len(words))
        alpha_words = [w for w in real if _ALPHA.search(w)]
        st.doc_freq.update(set(alpha_words))
        st.freq.update(alpha_words)
    return st


def quantile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _up(x: float) -> float:
    return math.ceil(x * 1000 - 1e-9) / 1000


def _down(x: float) -> float:
    return math.floor(x * 1000 + 1e-9) / 1000


def thresholds(st: Stats, lang: str, q: float = 0.95) -> dict:
    """A `[lang.XX]` table from the statistics: the q / 1-q tails (see the module docstring)."""
    if st.docs < MIN_DOCS:
        raise UsageError(f"calibrate: need at least {MIN_DOCS} reference documents with words, "
                         f"got {st.docs}")
    lo = 1.0 - q
    cjk = lang in CJK_LANGS
    # most widespread first, then most frequent, then alphabetical: the same list every run
    ranked = sorted(st.doc_freq, key=lambda w: (-st.doc_freq[w], -st.freq[w], w))
    stop = ranked[:N_STOP_WORDS]
    gq: dict = {"min_alpha_words_ratio": _down(quantile(st.alpha, lo))}
    if not cjk and st.mean_word_length:
        # whole characters, as FineWeb-2 gives them: floor of the low tail, ceiling of the high
        gq["min_avg_word_length"] = math.floor(quantile(st.mean_word_length, lo))
        gq["max_avg_word_length"] = math.ceil(quantile(st.mean_word_length, q))
    return {
        "source": f"llmtk clean calibrate: {st.docs} reference documents, quantile {q}",
        "stop_words": stop,
        "gopher_quality": gq,
        "gopher_repetition": {
            "dup_line_frac": _up(quantile(st.dup_line_frac, q)),
            "top_n_grams": [[n, _up(quantile(st.top[n], q))] for n in TOP_N],
            "dup_n_grams": [[n, _up(quantile(st.dup[n], q))] for n in DUP_N],
        },
        "fineweb": {
            "line_punct_thr": _down(quantile(st.line_punct, lo)),
            "new_line_ratio": _up(quantile(st.new_line_ratio, q)),
        },
    }


_LANG = re.compile(r"^[a-z]{2,3}(?:[_-][A-Za-z]{2,4})?$")


def check_lang(lang: str) -> str:
    if not _LANG.match(lang):
        raise ConfigError("lang", f"expected a language code such as de or zh, got {lang!r}")
    return lang
