"""Word tokens for the quality filters: close to datatrove's English tokenizer, CJK-aware.

datatrove counts words for Gopher/FineWeb with spaCy's rule-based English tokenizer, in which
punctuation marks are tokens of their own ("Hello," -> "Hello", ","), contractions split
("don't" -> "do", "n't") and URLs, e-mail addresses, numbers like 3.14 and abbreviations like
"e.g." stay whole. The thresholds (alpha-word share, hashes per word, n-gram character shares)
were tuned on those counts, so we reproduce them with one regular expression, which is also
~20x faster than running spaCy. In Korean text (and CJK text of no known language) every
ideograph, kana or hangul syllable is a token (`llmtk.text.segment` does the same), so an
article has as many "words" as characters and is never "too short"; Chinese and Japanese are
segmented into words (`llmtk.clean.cjk_words`). In the text of any other language a run of
CJK characters is a word like any other, as spaCy keeps it ("日本語のテキスト、です" is one
token there, and the "。" after it another).

Other languages are segmented as the tokenizer their FineWeb-2 thresholds were computed
with (datatrove's per-language spaCy tokenizers): hyphenated compounds stay whole in German,
Spanish, Dutch, ...; French keeps its prefixed compounds and elisions; see docs/clean.md.
The pattern is written for Python's backtracking engine: each alternative starts with the
test that fails fastest, and no quantified run can be split two ways (tokens.py's speed is
most of `llmtk clean`'s).
"""

import re

from llmtk.clean import cjk_words
from llmtk.clean.cjk_words import SEGMENTED_LANGS
from llmtk.text.segment import _CJK_CLASS, CJK_CHAR, is_cjk

# A word character that is not CJK.
_W = f"[^\\W{_CJK_CLASS}]"

_URL = r"(?:https?://|www\.)[^\s<>\"']*[^\s<>\"'.,;:!?)\]}]"  # trailing punct left out
# An address in groff's angle brackets (⟨a@b.org⟩) is one token: spaCy has no rule for ⟨ ⟩.
_EMAIL = r"⟨?[\w.+-]+@[\w-]+(?:\.[\w-]+)+⟩?"
_CONTRACTION = f"{_W}+?(?=n['’]t\\b)|n['’]t\\b"  # "do" + "n't"
_L = "[^\\W\\d_]"


def _join(hyphen_words: bool, hyphen_numbers: bool) -> str:
    """Inner marks that glue two word runs into one token (see `_REST`'s last word rule).

    `hyphen_words`: one "-" between a word character and a letter glues ("Root-Verzeichnis"),
    as spaCy's German, Spanish, Portuguese, Dutch, Nordic, ... tokenizers keep such compounds
    whole; English's (and Russian's, Polish's, ...) split them. `hyphen_numbers`: "3-4" stays
    whole, as in spaCy's Spanish, Portuguese, Dutch, ... tokenizers.
    """
    hyphen = "(?:--|[–—~])[-–—~]*" if hyphen_words else "[-–—~]+"
    digits = "[+*^]" if hyphen_numbers else "[-+*^]"
    return (
        # underscores before the mark stay inside ("__init__.py" -> "_", "_", "init__.py");
        # a mark must follow (a cheap test) before the costlier exclusions are tried
        "_*(?=[^\\s\\w])(?!"
        f"(?<=[^\\W_]){hyphen}(?={_L})|(?<={_L}),(?={_L})"
        f"|(?<=[^\\W_])[:<>=/](?={_L})"
        "|(?<=[a-z])\\.(?=[A-Z])"
        f"|(?<=\\d){digits}(?=\\d)"
        "|\\.\\.|…"
        "|['’](?:[sSdDmM]|re|RE|ve|VE|ll|LL)\\b"
        ")[^\\s\\w]+?(?=\\w)"
    )


# Word characters that may start or end a token: not "_", and not CJK in Korean text (where a
# CJK character is a token of its own).
_WE = "[^\\W_]"
_WE_NOT_CJK = f"[^\\W_{_CJK_CLASS}]"


def _core(we: str) -> str:
    # (written so that the engine never backtracks: runs without "_", joined by runs of "_")
    return f"{we}+(?:_+{we}+)*"

_REST = [
    # (each alternative starts with what fails fastest, a literal before a lookbehind: the
    # engine tries them in order at every token)
    r"C(?<![\w+]C)\+\+(?![\w+])",  # spaCy's exceptions
    r"[aA](?<![\w/][aA])(?i:nd/or)(?![\w/])",
    r"[cC](?<!\w[cC])(?i:an)(?=(?i:not)\b)",  # "cannot" -> "can", "not"
    # abbreviations (not "etc.", which spaCy splits as "etc", ".")
    r"(?=[ILCvMDJS])(?<![\w.])(?:Inc|Ltd|Corp|Co|vs|Mr|Mrs|Dr|Jr|St)\.",
    # abbreviations "e.g.", "U.S.", and one letter with a period, "x.", "C." (spaCy's
    # exceptions; not inside "a.b" or after a word or period)
    r"[^\W\d_]\.(?:(?:[^\W\d_]\.)+|(?<![\w.][^\W\d_]\.)(?![\w.]))",
    r"['’](?<=\w['’])(?:[sSdDmM]|re|RE|ve|VE|ll|LL)\b",  # 's 're 've 'll 'd 'm
    # A run of word characters glued by inner marks, as spaCy keeps "os.path.join", "x=1",
    # "3.14" or "ref:`x" whole, except where its infix rules split: hyphens, commas and
    # / : < > = before a letter, between letters; "." between a lower and an upper case
    # letter; + - * ^ between digits; ellipses; and the 's 're 've 'll 'd 'm suffixes.
    # (underscores at either end are split off, as spaCy does)
    # A leading "-", "--", "/" or "." stays on the word, as spaCy keeps option names, paths
    # and roff requests ("--help", "-f", "/usr", ".SH") whole: none is one of its prefixes.
    # Marks that are none of spaCy's prefixes or suffixes stay on the word they touch:
    # "\\n", "^C", "@0", "⟨https" before it; "dir/", "key=", "Kurz-", "html⟩" after it.
    "{WORD}",  # filled in by _pattern with the language's _join
    # Pairs spaCy keeps as one token (its emoticon list, and runs no affix rule splits).
    r"\):|\(:|\(=|=\)|:\)|:\(|\[:|:\]|''|\|\||//",
    r"\.\.+|…|--+",  # ellipsis and dashes stay together
    r"[^\w\s]|_",  # any other mark on its own
]
_WORD = ("(?:(?=[-/.\\\\^@⟨|~])(?<![\\w/.-])(?:--?|/|\\.|[\\\\^@⟨|~]+)(?=[^\\W_]))?"
         "{core}(?:{join}{core})*"
         "(?:[-/=\\\\⟩|^@~]+(?=[\\s.,;:!?)\\]}}\"']|$))?")

# The URL, e-mail and contraction alternatives are slow to try at every word, so each
# document uses the variant that has only the ones its text can match.
_VARIANTS: dict[tuple[bool, ...], re.Pattern] = {}

# Elided words of French, Italian and Catalan, kept with their apostrophe.
_ELISION = (
    # (the guard first: a few letters and an apostrophe, cheaper than 27 alternatives)
    r"(?=[^\W\d_]{1,6}['’])(?<![\w'’])(?i:c|d|j|l|m|n|s|t|qu|jusqu|lorsqu|puisqu|quoiqu"
    r"|dell|nell|all|dall|sull|coll|dev|un|quest|quell|anch|com|dov|cos|tutt|sant)['’]"
    r"(?=[^\W\d_])"
)
ELISION_LANGS = frozenset({"fr", "it", "ca"})
# French hyphens, as spaCy's French tokenizer (FineWeb-2's for French) treats them: it
# splits hyphenated words as English does ("lecture-écriture" -> 3 tokens) except compounds
# with a common prefix ("sous-répertoire", "ci-dessous", "non-bloquant"), compound names
# ("Jean-Luc") and words with a digit ("ext4-fichier"), which stay whole, and an inverted
# pronoun or -ci/-là, which keeps its hyphen ("voulez-vous" -> "voulez", "-vous"). The
# prefix list is ours (common French prefixes), not spaCy's word list.
_FR_PREFIXES = (
    "anti|archi|arrière|au|auto|avant|bi|ci|co|contre|demi|ex|extra|hors|hyper|infra|inter"
    "|intra|macro|méga|mi|micro|mini|mono|multi|néo|non|outre|para|porte|post|pré|pro|pseudo"
    "|quasi|ré|re|semi|sous|super|supra|sur|télé|trans|tri|ultra|vice"
)
_FR_HYPHEN = (
    # the three whole-word forms, only where a word is followed by "-" and a letter
    "(?=[^\\W_]+-[^\\W\\d_])(?<![\\w-])(?:"
    f"(?i:{_FR_PREFIXES})(?:-[^\\W\\d_]+)+(?![\\w-])"
    "|(?:[A-ZÀ-ÖØ-Þ][a-zß-öø-ÿ]+-)+[A-ZÀ-ÖØ-Þ][a-zß-öø-ÿ]+(?![\\w-])"
    "|[^\\W\\d_]*\\d[^\\W_]*(?:-[^\\W\\d_]+)+(?![\\w-]))"
    "|-(?<=[^\\W\\d_]-)(?i:je|tu|ils?|elles?|on|nous|vous|moi|toi|lui|leur|eux|les?|la|y|en|ce"
    "|ci|là|t)(?![\\w])"
)
FRENCH_HYPHEN_LANGS = frozenset({"fr"})
# CJK languages counted a token per character (Chinese and Japanese are segmented first)
CJK_TOKEN_LANGS = frozenset({"ko", "yue", "wuu"})
# English without the apostrophe: spaCy splits "id", "im", "ive" as "i'd", "i'm", "i've".
_EN_I = r"[iI](?<![\w'’][iI])(?=(?:d|m|ve)\b)"
# Languages whose FineWeb-2 thresholds were computed with a spaCy tokenizer that keeps
# "Root-Verzeichnis", "sólo-lectura", "read-only" whole (checked with datatrove 0.10.1's
# tokenizer assignments and spaCy 3.8 on "read-only E-Mail x-y co-op"; see docs/clean.md).
# English, Russian, Polish, Czech, Turkish, Italian, ... split them, as the default does.
HYPHEN_WORD_LANGS = frozenset({"de", "es", "pt", "nl", "sv", "da", "nb", "fi", "hu", "el",
                               "ro", "ca", "sr"})
# ... and of those, the ones whose tokenizer keeps "3-4" whole too.
HYPHEN_NUMBER_LANGS = frozenset({"es", "pt", "nl", "sv", "da", "nb", "fi", "hu", "el", "ro",
                                 "lt"})


def _pattern(url: bool, email: bool, nt: bool, elision: bool, hyphen_words: bool = False,
             hyphen_numbers: bool = False, french: bool = False, english: bool = False,
             cjk: bool = False) -> re.Pattern:
    key = (url, email, nt, elision, hyphen_words, hyphen_numbers, french, english, cjk)
    if key not in _VARIANTS:
        # Where a CJK character is a token (Korean, CJK text of no known language), most
        # tokens are one: try it first.
        parts = [f"[{_CJK_CLASS}]"] if cjk else []
        parts += ([_URL] if url else []) + ([_EMAIL] if email else [])
        parts += ([_ELISION] if elision else []) + ([_CONTRACTION] if nt else [])
        parts += ([_FR_HYPHEN] if french else []) + ([_EN_I] if english else [])
        word = _WORD.format(core=_core(_WE_NOT_CJK if cjk else _WE),
                            join=_join(hyphen_words, hyphen_numbers))
        parts += [word if p == "{WORD}" else p for p in _REST]
        _VARIANTS[key] = re.compile("|".join(parts))
    return _VARIANTS[key]


# English units after a number are split off ("10MB" -> "10", "MB"), as spaCy's suffix rule
# does with its list of units (spacy/lang/char_classes.py, spaCy 3.8), and so are "am" and
# "pm" after an hour ("10am"), its English exceptions: a space goes between them before the
# text is tokenized (one scan of the text, 6% of the tokenizer's time on English text; a
# cheaper test first saved nothing measurable).
_UNITS = (
    "km|km²|km³|m|m²|m³|dm|dm²|dm³|cm|cm²|cm³|mm|mm²|mm³|ha|µm|nm|yd|in|ft|kg|g|mg|µg|t|lb"
    "|oz|m/s|km/h|kmh|mph|hPa|Pa|mbar|mb|MB|kb|KB|gb|GB|tb|TB|T|G|M|K"
    "|км|км²|км³|м|м²|м³|дм|дм²|дм³|см|см²|см³|мм|мм²|мм³|нм|кг|г|мг|м/с|км/ч|кПа|Па|мбар"
    "|Кб|КБ|кб|Мб|МБ|мб|Гб|ГБ|гб|Тб|ТБ|тб"
)
_NUMBER_UNIT = re.compile(f"(\\d)({_UNITS}|am|pm)(?![\\w/])")
_HOURS = frozenset(str(h) for h in range(1, 13))
# Zero-width space, word joiner and BOM: the default pipeline's normalisation removes them
# (llmtk.clean.normalize); without it, a word they touch stays one word, as in spaCy.
_INVISIBLE = str.maketrans("", "", "\u200b\u2060\ufeff")


def _space_units(m: re.Match) -> str:
    if m[2] in ("am", "pm"):  # only after an hour that is a token of its own
        text, end = m.string, m.end(1)
        start = end - 2 if end >= 2 and text[end - 2].isdigit() else end - 1
        before = text[start - 1] if start else " "
        if text[start:end] not in _HOURS or before.isalnum() or before in "._":
            return m[0]
    return f"{m[1]} {m[2]}"


def tokens(text: str, lang: str | None = None, cache: dict | None = None,
           cjk: bool | None = None) -> list[str]:
    """Word and punctuation tokens (see the module docstring). `cache`: the segmented lines
    of Chinese and Japanese text, kept by the caller for the next text (`cjk_words.words`).
    `cjk`: whether a CJK character is a token of its own, as the caller decided it for the
    document (filters.Profile.char_words); None: Korean, or CJK text of no known language."""
    if lang in SEGMENTED_LANGS:
        return cjk_words.words(text, lang, cache)
    if "\u200b" in text or "\u2060" in text or "\ufeff" in text:
        text = text.translate(_INVISIBLE)
    # CJK characters are tokens of their own in Korean, and in CJK text of no known language
    # (the filters then judge it by their CJK figures); elsewhere they make words like letters
    if cjk is None:
        cjk = lang in CJK_TOKEN_LANGS or (lang is None and CJK_CHAR.search(text) is not None
                                          and is_cjk(text))
    url = "://" in text or "www." in text
    elision = lang in ELISION_LANGS and ("'" in text or "’" in text)
    nt = not elision and ("n't" in text or "n’t" in text)
    french = lang in FRENCH_HYPHEN_LANGS and "-" in text
    english = lang in (None, "en")
    if english:
        text = _NUMBER_UNIT.sub(_space_units, text)
    return _pattern(url, "@" in text, nt, elision, lang in HYPHEN_WORD_LANGS,
                    lang in HYPHEN_NUMBER_LANGS, french, english, cjk).findall(text)
