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

_URL = r"(?:https?://|www\.)[^\s<>\"']*[^\s<>\"'.,;:!?)\]}]"  # trailing punct left out
_EMAIL = r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"
_CONTRACTION = f"{_W}+?(?=n['’]t\\b)|n['’]t\\b"  # "do" + "n't"
_L = "[^\\W\\d_]"
_JOIN = (
    "(?!"
    f"(?<=[^\\W_])[-–—~]+(?={_L})|(?<={_L}),(?={_L})"
    f"|(?<=[^\\W_])[:<>=/](?={_L})"
    "|(?<=[a-z])\\.(?=[A-Z])"
    "|(?<=\\d)[-+*^](?=\\d)"
    "|\\.\\.|…"
    "|['’](?:[sSdDmM]|re|RE|ve|VE|ll|LL)\\b"
    ")[^\\s\\w]+?(?=\\w)"
)
# Word characters that may start or end a token: not "_", not CJK.
_WE = f"[^\\W_{_CJK_CLASS}]"
_CORE = f"{_WE}(?:{_W}*{_WE})?"
_REST = [
    r"(?<![\w+])C\+\+(?![\w+])",  # spaCy's exceptions
    r"(?<![\w/])(?i:and/or)(?![\w/])",
    r"(?<!\w)(?i:can)(?=(?i:not)\b)",  # "cannot" -> "can", "not"
    r"(?<![\w.])(?:Inc|Ltd|Corp|Co|etc|vs|Mr|Mrs|Dr|Jr|St)\.",  # abbreviations
    f"[{_CJK_CLASS}]",  # one CJK character
    r"(?:[^\W\d_]\.){2,}",  # abbreviations: e.g. U.S. A.B.C.
    r"(?<=\w)['’](?:[sSdDmM]|re|RE|ve|VE|ll|LL)\b",  # 's 're 've 'll 'd 'm
    # A run of word characters glued by inner marks, as spaCy keeps "os.path.join", "x=1",
    # "3.14" or "ref:`x" whole, except where its infix rules split: hyphens, commas and
    # / : < > = before a letter, between letters; "." between a lower and an upper case
    # letter; + - * ^ between digits; ellipses; and the 's 're 've 'll 'd 'm suffixes.
    # (underscores at either end are split off, as spaCy does)
    # A leading "-", "--", "/" or "." stays on the word, as spaCy keeps option names, paths
    # and roff requests ("--help", "-f", "/usr", ".SH") whole: none is one of its prefixes.
    f"(?:(?<![\\w/.-])(?:--?|/|\\.)(?=[^\\W_]))?{_CORE}(?:{_JOIN}{_CORE})*",
    r"\.\.\.+|…|--+",  # ellipsis and dashes stay together
    r"[^\w\s]|_",  # any other mark on its own
]
# The URL, e-mail and contraction alternatives are slow to try at every word, so each
# document uses the variant that has only the ones its text can match.
_VARIANTS: dict[tuple[bool, bool, bool, bool], re.Pattern] = {}

# Elided words of French, Italian and Catalan, kept with their apostrophe.
_ELISION = (
    r"(?<![\w'’])(?i:c|d|j|l|m|n|s|t|qu|jusqu|lorsqu|puisqu|quoiqu|dell|nell|all|dall|sull"
    r"|coll|dev|un|quest|quell|anch|com|dov|cos|tutt|sant)['’](?=[^\W\d_])"
)
ELISION_LANGS = frozenset({"fr", "it", "ca"})


def _pattern(url: bool, email: bool, nt: bool, elision: bool) -> re.Pattern:
    key = (url, email, nt, elision)
    if key not in _VARIANTS:
        parts = ([_URL] if url else []) + ([_EMAIL] if email else [])
        parts += ([_ELISION] if elision else []) + ([_CONTRACTION] if nt else []) + _REST
        _VARIANTS[key] = re.compile("|".join(parts))
    return _VARIANTS[key]


def tokens(text: str, lang: str | None = None) -> list[str]:
    """Word and punctuation tokens (see the module docstring)."""
    url = "://" in text or "www." in text
    elision = lang in ELISION_LANGS and ("'" in text or "’" in text)
    nt = not elision and ("n't" in text or "n’t" in text)
    return _pattern(url, "@" in text, nt, elision).findall(text)
