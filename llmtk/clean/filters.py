"""Heuristic quality filters: Gopher quality, Gopher repetition, C4 and FineWeb rules.

Defaults are the published thresholds as datatrove implements them (same numbers, same order
of checks, same arithmetic), so on English text the keep/drop decisions agree with datatrove.
Every drop has a stable reason such as `gopher.short_doc` or `c4.lorem_ipsum`.

Speed: a document is tokenized once (`DocText.words`) and the tokens, lines and n-gram hashes
are shared by all filters; the n-gram rules work on integer hashes with numpy instead of
joining strings. Language awareness: `DocText` segments by the document's language (jieba
and Sudachi words in Chinese and Japanese, llmtk.clean.tokens elsewhere) and `Profile` says
whether a CJK character is a word (other CJK text), which stop words to look for, and which
rules do not apply to a script (mean word length means nothing when every character is a
word).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from itertools import accumulate, compress, filterfalse
from operator import itemgetter, ne, sub

from llmtk.clean.cjk_words import SEGMENTED_LANGS
from llmtk.text.stopwords import stop_words

# (llmtk.clean.tokens and llmtk.clean.wrap are imported where a document first needs them:
# their regexes take ~15 ms to compile, a tenth of `llmtk clean`'s start-up, which a run
# without the filters, `--filters none`, need not pay)

CJK_LANGS = frozenset({"zh", "ja", "ko", "yue", "wuu"})

# Characters that make a token a "symbol word" (datatrove's PUNCTUATION_SET: ASCII punctuation,
# common CJK and typographic marks, control characters, sentence terminators of many scripts).
_PUNCT_CHARS = (
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
    "—”“„’´–…«»►％＄〈〉《》、。，；：？！．（）【】「」━∶～１"
    "｡؟۔।॥።፧։‼⁇⁈⁉﹒﹗"
    + "".join(chr(c) for r in ((0, 9), (11, 32), (127, 160)) for c in range(*r))
)
_PUNCT_SET = frozenset(_PUNCT_CHARS)
# Multi-character symbol tokens the tokenizer makes: runs of dots and dashes.
_SYMBOL_TOKENS = frozenset(_PUNCT_CHARS) | frozenset(
    [c * n for c in ".-" for n in range(2, 64)]
)
# Line endings that count as "ends with terminal punctuation" (FineWeb).
TERMINAL_PUNCT = tuple(".!?。！？｡．؟۔।॥።፧։‼⁇⁈⁉﹒﹗")
_SENT_END = frozenset(".!?。！？｡؟।॥")
_CLOSERS = "\"'”’»)]」』）"
_ALPHA = re.compile(r"[^\W\d_]")


def alpha_share(words: list[str]) -> float:
    """Gopher's alpha-word share: the fraction of words with at least one letter (0 for
    no words). The rule itself computes it faster from the words it already sorted."""
    return sum(map(bool, map(_ALPHA.search, words))) / len(words) if words else 0.0


class DocText:
    """One document's text with the pieces the filters share, computed at most once."""

    __slots__ = ("text", "lang", "cjk", "_words", "_lines", "_units", "line_breaks",
                 "_segmented")

    def __init__(self, text: str, lang: str | None = None, cjk: bool | None = None) -> None:
        self.text = text
        self.lang = lang  # picks the word segmentation (French elision, ...)
        self.cjk = cjk  # a CJK character is a word (Profile.char_words; None: tokens decides)
        self._words: list[str] | None = None
        # Chinese and Japanese lines already segmented: C4's rewrite keeps most lines, and
        # the rules after it need the new text's words (Sudachi is most of the rules' time)
        self._segmented: dict[str, list[str]] = {}
        self._lines: list[str] | None = None
        self._units: list | bool | None = None  # False: looked, not hard-wrapped
        # Line breaks as datatrove would count them after C4 joined the kept lines with one
        # "\n" each; we keep paragraph breaks in the text, so FineWeb must not count those.
        self.line_breaks: int | None = None

    @property
    def words(self) -> list[str]:
        if self._words is None:
            from llmtk.clean.tokens import tokens

            self._words = tokens(self.text, self.lang, self._segmented, self.cjk)
        return self._words

    @property
    def units(self) -> list[tuple[str, list[str]]] | None:
        """A hard-wrapped text's logical lines with their physical ones (llmtk.clean.wrap),
        blank lines included; None for any other text (its lines are its lines)."""
        if self._units is None:
            from llmtk.clean.wrap import MAX_WIDTH, MIN_LINES, paragraphs, width

            self._units = False
            breaks = self.text.count("\n")
            # A mean line longer than the widest wrap column: not wrapped (most web text)
            if breaks >= MIN_LINES and len(self.text) <= MAX_WIDTH * (breaks + 1):
                lines = self.text.split("\n")
                w = width(lines)
                if w is not None:
                    self._units = paragraphs(lines, w)
        return self._units or None

    @property
    def lines(self) -> list[str]:
        """The lines the line-based rules see: a hard-wrapped text's logical lines."""
        if self._lines is None:
            units = self.units
            self._lines = [t for t, _ in units] if units else self.text.splitlines()
        return self._lines

    def replace(self, text: str, line_breaks: int | None = None) -> None:
        self.text = text
        self._words = self._lines = self._units = None
        self.line_breaks = line_breaks


@dataclass
class Profile:
    """How the rules adapt to a document's language."""

    lang: str = "en"
    cjk: bool = False
    stop_words: frozenset[str] | None = None

    @property
    def char_words(self) -> bool:
        """Every CJK character is a word (CJK text other than Chinese and Japanese)."""
        return self.cjk and self.lang not in SEGMENTED_LANGS

    @classmethod
    def for_lang(cls, lang: str | None, cjk_text: bool = False,
                 words: list[str] | None = None) -> Profile:
        """`words`: the stop words to use (a language table's), else the built-in list."""
        lang = lang or "en"
        cjk = lang in CJK_LANGS or cjk_text
        found = frozenset(words) if words is not None else stop_words(lang)
        return cls(lang=lang, cjk=cjk, stop_words=found)


# -- Gopher quality ------------------------------------------------------------------------


@dataclass(frozen=True)
class GopherQuality:
    enabled: bool = True
    min_doc_words: int | None = 50
    max_doc_words: int | None = 100_000
    min_avg_word_length: float | None = 3
    max_avg_word_length: float | None = 10
    max_symbol_word_ratio: float | None = 0.1
    max_bullet_lines_ratio: float | None = 0.9
    max_ellipsis_lines_ratio: float | None = 0.3
    min_alpha_words_ratio: float | None = 0.8
    min_stop_words: int | None = 2

    def check(self, d: DocText, p: Profile, vals: dict | None = None) -> str | None:
        text, words = d.text, d.words
        n_words = len(words)
        # Symbol tokens and words without a letter are among the tokens that are not all
        # letters, a fifth of them in prose: count over those only.
        rest = list(filterfalse(str.isalpha, words))
        symbols = list(filter(_SYMBOL_TOKENS.__contains__, rest))
        n_real = n_words - len(symbols)
        if vals is not None:
            vals["words"] = n_real
        if self.min_doc_words and n_real < self.min_doc_words:
            return "gopher.short_doc"
        if self.max_doc_words and n_real > self.max_doc_words:
            return "gopher.long_doc"
        # Where a CJK character is a word, mean word length is ~1 by construction: skip the
        # rule (Chinese and Japanese are segmented into words, and FineWeb-2 sets it for them).
        if not p.char_words and n_real:
            chars = sum(map(len, words)) - sum(map(len, symbols))
            mean = chars / n_real
            if vals is not None:
                vals["mean_word_length"] = round(mean, 4)
            if self.min_avg_word_length and mean < self.min_avg_word_length:
                return "gopher.mean_word_length"
            if self.max_avg_word_length and mean > self.max_avg_word_length:
                return "gopher.mean_word_length"
        if n_words == 0:
            return "gopher.short_doc"
        if self.max_symbol_word_ratio:
            if text.count("#") / n_words > self.max_symbol_word_ratio:
                return "gopher.hash_ratio"
            if (text.count("...") + text.count("…")) / n_words > self.max_symbol_word_ratio:
                return "gopher.ellipsis_ratio"
        lines = d.lines or [""]
        if self.max_bullet_lines_ratio:
            bullets = sum(1 for s in lines if s.lstrip().startswith(("•", "-")))
            if bullets / len(lines) > self.max_bullet_lines_ratio:
                return "gopher.bullet_lines"
        if self.max_ellipsis_lines_ratio:
            ends = sum(1 for s in lines if s.rstrip().endswith(("...", "…")))
            if ends / len(lines) > self.max_ellipsis_lines_ratio:
                return "gopher.ellipsis_lines"
        if self.min_alpha_words_ratio:
            alpha = (n_words - len(rest) + sum(map(bool, map(_ALPHA.search, rest)))) / n_words
            if vals is not None:
                vals["alpha_words"] = round(alpha, 4)
            if alpha < self.min_alpha_words_ratio:
                return "gopher.alpha_words"
        if self.min_stop_words and p.stop_words is not None:
            found = len(p.stop_words.intersection(words))
            if vals is not None:
                vals["stop_words"] = found
            if found < self.min_stop_words:
                return "gopher.stop_words"
        return None


# -- Gopher repetition -----------------------------------------------------------------------


def _find_duplicates(items: list[str]) -> tuple[int, int]:
    """(number of repeated items, their characters), counting each repeat after the first."""
    seen: set[str] = set()
    dup = dup_chars = 0
    for x in items:
        if x in seen:
            dup += 1
            dup_chars += len(x)
        else:
            seen.add(x)
    return dup, dup_chars


_PARA = re.compile(r"\n{2,}")
_LINES = re.compile(r"\n+")


@dataclass(frozen=True)
class GopherRepetition:
    enabled: bool = True
    dup_line_frac: float | None = 0.3
    dup_para_frac: float | None = 0.3
    dup_line_char_frac: float | None = 0.2
    dup_para_char_frac: float | None = 0.2
    top_n_grams: list[list[float]] = field(
        default_factory=lambda: [[2, 0.2], [3, 0.18], [4, 0.16]]
    )
    dup_n_grams: list[list[float]] = field(
        default_factory=lambda: [[5, 0.15], [6, 0.14], [7, 0.13], [8, 0.12], [9, 0.11], [10, 0.10]]
    )

    def check(self, d: DocText, p: Profile, vals: dict | None = None) -> str | None:
        text = d.text
        if not text:
            return "gopher.empty"
        n_chars = len(text)
        paragraphs = _PARA.split(text.strip())
        dup, dup_chars = _find_duplicates(paragraphs)
        if vals is not None:
            vals["dup_para_frac"] = round(dup / len(paragraphs), 4)
        if self.dup_para_frac and dup / len(paragraphs) > self.dup_para_frac:
            return "gopher.dup_para_frac"
        if self.dup_para_char_frac and dup_chars / n_chars > self.dup_para_char_frac:
            return "gopher.dup_para_char_frac"
        units = d.units
        lines = [t for t, _ in units if t] or [""] if units else _LINES.split(text)
        dup, dup_chars = _find_duplicates(lines)
        if vals is not None:
            vals["dup_line_frac"] = round(dup / len(lines), 4)
        if self.dup_line_frac and dup / len(lines) > self.dup_line_frac:
            return "gopher.dup_line_frac"
        if self.dup_line_char_frac and dup_chars / n_chars > self.dup_line_char_frac:
            return "gopher.dup_line_char_frac"
        words = d.words
        if not self.top_n_grams and not self.dup_n_grams:
            return None
        grams = ngrams(words)
        for n, frac in self.top_n_grams:
            n = int(n)
            if len(words) < n:
                continue
            if grams.top_chars(n) / n_chars > frac:
                return f"gopher.top_{n}_gram"
        if self.dup_n_grams:
            # Repeated n-grams for n >= n0 lie inside repeated n0-grams: one bound for all.
            n0 = int(min(n for n, _ in self.dup_n_grams))
            found = grams.repeats(n0)
            if found is None or grams.covered_chars(n0, found[1]) / n_chars <= min(
                f for _, f in self.dup_n_grams
            ):
                return None
        for n, frac in self.dup_n_grams:
            n = int(n)
            if grams.dup_exceeds(n, frac, n_chars):
                return f"gopher.dup_{n}_gram"
        return None


class _NGrams:
    """Word n-grams of one document as tuples, for the repetition rules.

    Tuples of already-hashed strings are cheap to build with zip and to count with C-level
    Counter/dict/set, which beats both joining strings (datatrove) and numpy (per-call
    overhead on the many short documents of a real crawl). The expensive exact left-to-right
    scan of the duplicate-n-gram rule runs only when a cheap upper bound says it could fire.
    """

    def __init__(self, words: list[str]) -> None:
        self.words = words
        self._cum: list[int] | None = None
        self.no_repeats_from: int | None = None  # n from which no n-gram repeats

    def grams(self, n: int) -> list[tuple[str, ...]]:
        w = self.words
        return list(zip(*(w[i:] for i in range(n)), strict=False))

    @property
    def cum(self) -> list[int]:
        """cum[i] = characters in words[:i]."""
        if self._cum is None:
            self._cum = [0, *accumulate(map(len, self.words))]
        return self._cum

    def top_chars(self, n: int) -> int:
        """Characters of the most frequent n-gram (joined with spaces) times its count."""
        counts = Counter(self.grams(n))
        # max() keeps the first of equal counts, in first-seen order, like most_common(1)
        gram, count = max(counts.items(), key=itemgetter(1))
        return (sum(map(len, gram)) + n - 1) * count

    def repeats(self, n: int) -> tuple[list[tuple[str, ...]], list[bool]] | None:
        """(n-grams, is-a-repeat-of-an-earlier-position flags), or None without repeats."""
        m = len(self.words) - n + 1
        if m <= 0 or (self.no_repeats_from is not None and n >= self.no_repeats_from):
            return None
        grams = self.grams(n)
        # reversed, so that each n-gram keeps its first position
        first = dict(zip(reversed(grams), range(m - 1, -1, -1), strict=True))
        if len(first) == m:
            self.no_repeats_from = n  # a repeated n-gram would contain a repeated (n-1)-gram
            return None
        return grams, list(map(ne, map(first.__getitem__, grams), range(m)))

    def covered_chars(self, n: int, repeat: list[bool]) -> int:
        """Characters of the words inside at least one repeated n-gram (C-level calls only)."""
        padded = [0] * (n - 1) + repeat + [0] * (n - 1)
        prefix = [0, *accumulate(padded)]
        n_words = len(self.words)
        cover = map(sub, prefix[n : n + n_words], prefix[:n_words])
        return sum(compress(map(len, self.words), cover))

    def dup_exceeds(self, n: int, frac: float, n_chars: int) -> bool:
        """datatrove's rule: repeated n-gram characters / n_chars > frac?

        The exact count scans left to right, counts an n-gram seen before and skips over
        it. The n-grams it counts are repeats and do not overlap, so they fit inside the
        words covered by repeated n-grams; only when that bound is over the limit do we scan.
        """
        found = self.repeats(n)
        if found is None:
            return False
        grams, repeat = found
        if self.covered_chars(n, repeat) / n_chars <= frac:
            return False
        return self.dup_chars(n, found) / n_chars > frac

    def dup_chars(self, n: int, found=None) -> int:
        """datatrove's count: scan left to right, count the characters of an n-gram seen
        before and skip over it (the repeats it counts do not overlap)."""
        found = found or self.repeats(n)
        if found is None:
            return 0
        grams, repeat = found
        return _skipping_repeats(grams, repeat.index(True), self.cum, n)


def _skipping_repeats(grams: list, start: int, cum, n: int) -> int:
    """Characters of the n-grams seen before, scanning from `start` (the first repeat:
    every position before it is visited) and skipping over each repeat counted."""
    seen = set(grams[:start])
    total, i, m = 0, start, len(grams)
    while i < m:
        g = grams[i]
        if g in seen:
            total += cum[i + n] - cum[i]
            i += n
        else:
            seen.add(g)
            i += 1
    return total


class _IntNGrams(_NGrams):
    """The same rules for long documents, on integer n-gram ids with numpy.

    An n-gram's id is the position of its first occurrence, so ids are exact (no hashing)
    and "is a repeat" is `id != position`. Ids of n-grams come from those of (n-1)-grams:
    the pair (id of the (n-1)-gram at i, id of the word at i+n-1) names the n-gram at i, and
    one stable sort of the pairs finds each one's first position. On a Japanese manual page
    (every character a token, thousands of them) this is ~10x the tuple version; on short
    documents numpy's per-call cost loses, hence `ngrams()` picks by length.
    """

    def __init__(self, words: list[str]) -> None:
        import numpy as np

        super().__init__(words)
        # a word's id: the position of its first occurrence (C-level: setdefault keeps it)
        first: dict[str, int] = {}
        self._word_ids = np.fromiter(map(first.setdefault, words, range(len(words))),
                                     np.int64, len(words))
        self._ids: dict[int, object] = {1: self._word_ids}
        self._cum_np = None

    def ids(self, n: int):
        """ids[i]: first position of the n-gram that starts at word i (len(words)-n+1)."""
        import numpy as np

        if n not in self._ids:
            prev = self.ids(n - 1)
            m = len(self.words) - n + 1
            key = prev[:m] * len(self.words) + self._word_ids[n - 1 :]
            order = np.argsort(key, kind="stable")
            sorted_key = key[order]
            starts = np.empty(m, bool)
            starts[:1] = True
            np.not_equal(sorted_key[1:], sorted_key[:-1], out=starts[1:])
            # the first (smallest, stable sort) position of each run of equal keys
            group_first = order[starts]
            ids = np.empty(m, np.int64)
            ids[order] = group_first[np.cumsum(starts) - 1]
            self._ids[n] = ids
        return self._ids[n]

    @property
    def cum_np(self):
        import numpy as np

        if self._cum_np is None:
            self._cum_np = np.asarray(self.cum, np.int64)
        return self._cum_np

    def top_chars(self, n: int) -> int:
        import numpy as np

        ids = self.ids(n)
        counts = np.bincount(ids, minlength=len(ids))
        p = int(np.argmax(counts))  # the first of equal counts = the first seen n-gram
        cum = self.cum
        return (cum[p + n] - cum[p] + n - 1) * int(counts[p])

    def repeats(self, n: int):
        import numpy as np

        m = len(self.words) - n + 1
        if m <= 0 or (self.no_repeats_from is not None and n >= self.no_repeats_from):
            return None
        ids = self.ids(n)
        repeat = ids != np.arange(m)
        if not repeat.any():
            self.no_repeats_from = n
            return None
        return ids, repeat

    def covered_chars(self, n: int, repeat) -> int:
        import numpy as np

        n_words = len(self.words)
        prefix = np.zeros(len(repeat) + 2 * n - 1, np.int64)
        np.cumsum(repeat, out=prefix[n : n + len(repeat)])
        prefix[n + len(repeat) :] = prefix[n + len(repeat) - 1]
        # word j lies in a repeated n-gram iff one starts in [j-n+1, j]
        cover = prefix[n : n + n_words] - prefix[:n_words] > 0
        lengths = np.diff(self.cum_np)
        return int(lengths[cover].sum())

    def dup_chars(self, n: int, found=None) -> int:
        found = found or self.repeats(n)
        if found is None:
            return 0
        ids, repeat = found
        return _skipping_repeats(ids.tolist(), int(repeat.argmax()), self.cum, n)


# From this many words on the numpy n-grams are faster than tuples (measured on the man
# pages and the shared corpus: 0.7x at 100 words, even at 200-400, 6x past 5,000).
INT_NGRAMS_FROM = 400


def ngrams(words: list[str]) -> _NGrams:
    """The n-gram helper that is faster for a document of this length (same answers)."""
    return _IntNGrams(words) if len(words) >= INT_NGRAMS_FROM else _NGrams(words)


# -- C4 ------------------------------------------------------------------------------------


def _on(threshold) -> bool:
    """A threshold is off when set to false (None) in the config, or -1 (datatrove's way)."""
    return threshold is not None and threshold != -1

_CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
_C4_END = (".", "?", "!", '"', "'", "。", "！", "？")
_POLICY = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies",
           "use cookies")


def _sentences(toks: list[str]) -> int:
    """Sentences in a line, given its tokens (`tokens(line, cjk=True)`: a CJK sentence mark
    ends one wherever it stands): tokens that end one (. ! ? 。) followed by one that does
    not."""
    n = 0
    for i, t in enumerate(toks):
        if t in _SENT_END and (i + 1 == len(toks) or toks[i + 1] not in _SENT_END):
            n += 1
    if toks and toks[-1] not in _SENT_END and not (n and toks[-1] in ('"', "'", ")")):
        n += 1
    return max(n, 1) if toks else 0


@dataclass(frozen=True)
class C4:
    enabled: bool = True
    rewrite: bool = True  # keep only the lines that pass the line rules, as C4 does
    remove_citations: bool = True
    filter_no_terminal_punct: bool = True
    min_num_sentences: int = 5
    min_words_per_line: int = 3
    max_word_length: int = 1000
    filter_lorem_ipsum: bool = True
    filter_javascript: bool = True
    filter_curly_bracket: bool = True
    filter_policy: bool = True

    def check(self, d: DocText, p: Profile, vals: dict | None = None) -> str | None:
        from llmtk.clean.tokens import tokens

        n_sent = 0
        kept: list[str] = []
        n_kept = 0
        gap = False  # a blank line since the last kept line: keep the paragraph break
        # A hard-wrapped text is judged a paragraph at a time, and keeps its line breaks.
        units = d.units or ((line, None) for line in d.lines)
        for line, block in units:
            line = line.strip()
            if not line:
                gap = True
                continue
            # Words per line: whitespace-separated, or tokens for CJK (no spaces there).
            words = tokens(line, cjk=True) if p.cjk else line.split()
            if _on(self.max_word_length) and any(len(w) > self.max_word_length for w in words):
                continue
            if self.remove_citations and "[" in line:
                line = _CITATION.sub("", line)
            if self.filter_no_terminal_punct and (
                not line.endswith(_C4_END) or line.endswith("...")
            ):
                continue
            if _on(self.min_words_per_line) and len(words) < self.min_words_per_line:
                continue
            low = line.lower()
            if self.filter_lorem_ipsum and "lorem ipsum" in low:
                return "c4.lorem_ipsum"
            if self.filter_javascript and "javascript" in low:
                continue
            if self.filter_curly_bracket and "{" in line:
                return "c4.curly_bracket"
            if self.filter_policy and any(x in low for x in _POLICY):
                continue
            if _on(self.min_num_sentences) and n_sent < self.min_num_sentences:
                n_sent += _sentences(tokens(line, cjk=True))
            if gap and kept:
                kept.append("")
            gap = False
            if block is not None:
                line = "\n".join(_CITATION.sub("", b.strip()) if self.remove_citations
                                 and "[" in b else b.strip() for b in block)
            kept.append(line)
            n_kept += 1
        if vals is not None:
            vals["sentences"] = n_sent
        if _on(self.min_num_sentences) and n_sent < self.min_num_sentences:
            return "c4.too_few_sentences"
        if self.rewrite:
            new = "\n".join(kept)
            if new != d.text:
                d.replace(new, line_breaks=max(n_kept - 1, 0))
        return None


# -- FineWeb -------------------------------------------------------------------------------


@dataclass(frozen=True)
class FineWeb:
    enabled: bool = True
    line_punct_thr: float = 0.12
    line_punct_exclude_zero: bool = False
    short_line_thr: float = 0.67
    short_line_length: int = 30
    short_line_length_cjk: int = 15  # a CJK character carries ~2-3 Latin characters' worth
    char_duplicates_ratio: float = 0.01
    new_line_ratio: float = 0.3

    def check(self, d: DocText, p: Profile, vals: dict | None = None) -> str | None:
        text = d.text
        units = d.units
        if units:
            # a paragraph of prose often ends its last sentence inside quotes or brackets
            lines = [t for t, _ in units if t]
            ends = [t.rstrip(_CLOSERS) for t in lines]
        else:
            ends = lines = [line for line in text.split("\n") if line.strip()]
        if not lines:
            return "fineweb.empty"
        ratio = sum(1 for line in ends if line.endswith(TERMINAL_PUNCT)) / len(lines)
        if vals is not None:
            vals["line_punct_ratio"] = round(ratio, 4)
        if _on(self.line_punct_thr) and ratio < self.line_punct_thr and not (
            ratio == 0 and self.line_punct_exclude_zero
        ):
            return "fineweb.line_punct_ratio"
        short = (self.short_line_length_cjk if p.cjk else self.short_line_length) or 0
        ratio = sum(1 for line in lines if len(line) <= short) / len(lines)
        if _on(self.short_line_thr) and ratio > self.short_line_thr:
            return "fineweb.short_line_ratio"
        dup_chars = _find_duplicates(lines)[1]
        if _on(self.char_duplicates_ratio) and (
            dup_chars / max(len(text) - text.count("\n"), 1) > self.char_duplicates_ratio
        ):
            return "fineweb.char_dup_ratio"
        n_words = len(d.words)
        breaks = text.count("\n") if d.line_breaks is None else d.line_breaks
        if _on(self.new_line_ratio) and (n_words == 0 or breaks / n_words > self.new_line_ratio):
            return "fineweb.list_ratio"
        return None
