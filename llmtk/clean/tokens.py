"""Word tokens for the quality filters: close to datatrove's English tokenizer, CJK-aware.

datatrove counts words for Gopher/FineWeb with spaCy's rule-based English tokenizer, in which
punctuation marks are tokens of their own ("Hello," -> "Hello", ","), contractions split
("don't" -> "do", "n't") and URLs, e-mail addresses, numbers like 3.14 and abbreviations like
"e.g." stay whole. The thresholds (alpha-word share, hashes per word, n-gram character shares)
were tuned on those counts, so we reproduce them with one regular expression, which is also
~20x faster than running spaCy. For CJK text every ideograph, kana or hangul syllable is a
token (`llmtk.text.segment` does the same), so a Chinese article has as many "words" as
characters and is never "too short".
"""

import re

from llmtk.text.segment import _CJK_CLASS

# A word character that is not CJK.
_W = f"[^\\W{_CJK_CLASS}]"

_TOKEN = re.compile(
    "|".join(
        [
            r"(?:https?://|www\.)[^\s<>\"']*[^\s<>\"'.,;:!?)\]}]",  # URL, trailing punct left out
            r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+",  # e-mail address
            f"[{_CJK_CLASS}]",  # one CJK character
            r"(?:[^\W\d_]\.){2,}",  # abbreviations: e.g. U.S. A.B.C.
            f"{_W}+?(?=n['’]t\\b)",  # "do" of "don't"
            r"n['’]t\b",  # "n't"
            r"(?<=\w)['’](?:[sSdDmM]|re|RE|ve|VE|ll|LL)\b",  # 's 're 've 'll 'd 'm
            # words and numbers with inner . : = + , (between digits) - (before a digit)
            f"-?{_W}+(?:(?:[.:=+]|,(?=\\d)|-(?=\\d)){_W}+)*",
            r"\.\.\.+|…|--+",  # ellipsis and dashes stay together
            r"[^\w\s]",  # any other mark on its own
        ]
    )
)


def tokens(text: str) -> list[str]:
    """Word and punctuation tokens (see the module docstring)."""
    return _TOKEN.findall(text)
