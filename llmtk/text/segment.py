"""Script census and CJK-aware word segmentation.

Chinese and Japanese are not written with spaces, so "split on whitespace"
counts a whole paragraph as one word. Here a CJK ideograph, kana or hangul
syllable is its own unit and everything else splits into runs of word
characters. That is `dedup`'s unit (shingles); `clean` counts words so in Korean
and in CJK text of no known language (it segments Chinese and Japanese into
words, llmtk.clean.cjk_words).
"""

import re

# Han (CJK Unified Ideographs + Extension A + compatibility), Hiragana, Katakana
# (incl. phonetic extensions and half-width forms), Hangul syllables.
_CJK_CLASS = (
    "\u3040-\u309f\u30a0-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uf900-\ufaff\uff66-\uff9f\uac00-\ud7af"
)
CJK_CHAR = re.compile(f"[{_CJK_CLASS}]")
# One token: a single CJK character, or a run of other word characters.
_TOKEN = re.compile(f"[{_CJK_CLASS}]|[^\\W{_CJK_CLASS}]+")


def cjk_fraction(text: str, cjk_chars: int | None = None) -> float:
    """Share of the non-space characters that are CJK (0.0 for empty text).

    cjk_chars: the text's count of CJK_CHAR characters, when the caller has it already
    (dedup's batch normaliser counts them), to skip the scan."""
    if cjk_chars is None:
        cjk_chars = len(CJK_CHAR.findall(text))
    if not cjk_chars:
        return 0.0
    letters = len(text) - text.count(" ") - text.count("\n")
    return cjk_chars / letters if letters > 0 else 0.0


def is_cjk(text: str, threshold: float = 0.3, cjk_chars: int | None = None) -> bool:
    """True when enough of the text is CJK that words are not space-separated."""
    return cjk_fraction(text, cjk_chars) >= threshold


def words(text: str) -> list[str]:
    """Word-like units: each CJK character alone, other scripts by runs of word chars."""
    return _TOKEN.findall(text)


def word_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) in `text` of each unit that `words(text)` returns, in order."""
    return [m.span() for m in _TOKEN.finditer(text)]
