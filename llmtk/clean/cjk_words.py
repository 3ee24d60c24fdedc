"""Chinese and Japanese words as FineWeb-2 counted them: jieba and Sudachi.

FineWeb-2's per-language thresholds (thresholds.toml) were measured with datatrove's word
tokenizer for each language: for Chinese (`cmn_Hani`) spaCy's Chinese tokenizer with the
jieba segmenter, for Japanese (`jpn_Jpan`) spaCy's Japanese tokenizer, which is SudachiPy in
split mode A with SudachiDict-core; datatrove strips each token and drops the blank ones.
A statistic counted per character (a word per ideograph or kana) is on another scale: a mark
every ten characters is 1 in 11 per character, 1 in 6 per jieba word. So the word-based rules
count these words in these two languages (docs/clean.md, "One verdict across languages").

Both dictionaries come in the wheels (no download at run time); the modules are imported and
the dictionaries loaded on first use, once per process.
"""

from __future__ import annotations

import functools
import re

# The languages segmented here; other CJK text (Korean, Cantonese, or CJK text without a
# language) keeps a word per character.
SEGMENTED_LANGS = frozenset({"zh", "ja"})

# rjieba (jieba-rs) is jieba's algorithm and dictionary in Rust, 13x the Python package's
# speed as used here (benchmarks/clean_cjk_speed.py), with one difference: jieba's HMM step
# splits a non-Han run that is not in the dictionary into alphanumeric runs and the rest
# ("redhat.com" -> "redhat" "." "com", "pg_dump" -> "pg" "_" "dump"), where jieba-rs keeps
# it whole. We split it as jieba does (its finalseg.re_skip); the dictionary's own words with
# such marks (jieba's blocks hold only + # & . _ % -) stay whole. With this,
# the tokens are the Python package's on all 6,683 Chinese documents of the parallel corpora
# and the shared corpus, and spaCy-zh's with jieba (datatrove 0.10.1's) on the 135 compared.
_JIEBA_SKIP = re.compile(r"([a-zA-Z0-9]+(?:\.\d+)?%?)")
_JIEBA_DICT_MARKED = frozenset({"AT&T", "c#", "C#", "c++", "C++"})
_HAN = re.compile("[\u4e00-\u9fd5]")  # jieba's Han range

# Sudachi refuses an input over 49,149 bytes; datatrove cuts at 40,000 bytes. We segment a
# line at a time (`words`), and cut only a line longer than this.
_SUDACHI_CHUNK = 12_000  # characters: at most 48,000 bytes of 4-byte characters


@functools.cache
def _jieba():
    import rjieba

    return rjieba.cut


@functools.cache
def _sudachi():
    from sudachipy import Dictionary, SplitMode

    return Dictionary(dict="core").tokenizer(mode=SplitMode.A)


def chinese(text: str) -> list[str]:
    """jieba's words (HMM on, as spaCy calls it), without the whitespace tokens."""
    out: list[str] = []
    for t in _jieba()(text):
        t = t.strip()
        if not t:
            continue
        if (len(t) > 1 and t not in _JIEBA_DICT_MARKED and not _HAN.search(t)
                and not _JIEBA_SKIP.fullmatch(t)):
            out.extend(x for x in _JIEBA_SKIP.split(t) if x)
        else:
            out.append(t)
    return out


def _chunks(text: str) -> list[str]:
    """The text cut into pieces of at most _SUDACHI_CHUNK characters (Sudachi's input limit;
    `words` gives it one line at a time, so only a line that long is cut)."""
    return [text[i:i + _SUDACHI_CHUNK] for i in range(0, len(text), _SUDACHI_CHUNK)]


def japanese(text: str) -> list[str]:
    """Sudachi's mode-A words (spaCy-ja's), without the whitespace tokens."""
    tok = _sudachi()
    out: list[str] = []
    for piece in _chunks(text):
        for m in tok.tokenize(piece):
            s = m.surface().strip()
            if s:
                out.append(s)
    return out


def words(text: str, lang: str, cache: dict[str, list[str]] | None = None) -> list[str]:
    """The words of a text in one of SEGMENTED_LANGS, segmented a line at a time.

    Neither segmenter makes a word across a line break, so the words are the whole text's
    (checked on the three corpora's 2,196 Chinese and Japanese pages). Line by line, a
    text that keeps most of its lines (C4's rewrite) costs only its new lines again: `cache`
    maps a stripped line to its words (Sudachi analyses ~1 MB/s, most of the rules' time).
    """
    out: list[str] = []
    for line in text.split("\n"):
        line = line.strip()
        if not line:
            continue
        found = cache.get(line) if cache is not None else None
        if found is None:
            # Sudachi's words at a line's ends depend on what is beyond them (its lattice
            # runs from the start of the input to its end): between two line breaks, as in
            # the text, they are the words the whole text has (all 1,174 Japanese pages)
            found = chinese(line) if lang == "zh" else japanese(f"\n{line}\n")
            if cache is not None:
                cache[line] = found
        out.extend(found)
    return out
