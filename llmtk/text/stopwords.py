"""Per-language stop words for the Gopher "has at least 2 stop words" rule.

English is Gopher's own list (Rae et al. 2021, as datatrove uses it). The others are each
language's most frequent function words, kept short like Gopher's so that the rule only
catches text that is not running prose (lists of names, keyword spam, tables). Chinese and
Japanese lists hold single characters because `llmtk.clean.tokens` makes each CJK character a
token. Matching is case-sensitive, as in datatrove.
"""

STOP_WORDS: dict[str, frozenset[str]] = {
    "en": frozenset(["the", "be", "to", "of", "and", "that", "have", "with"]),
    "de": frozenset(["der", "die", "und", "in", "den", "von", "zu", "das", "mit", "sich", "des",
                     "ist", "nicht", "ein", "eine"]),
    "fr": frozenset(["le", "la", "les", "de", "des", "et", "un", "une", "du", "est", "que",
                     "en", "pour", "dans", "qui"]),
    "es": frozenset(["el", "la", "de", "que", "y", "en", "los", "las", "del", "un", "una",
                     "por", "con", "para", "es"]),
    "it": frozenset(["il", "di", "che", "la", "e", "un", "una", "per", "in", "non", "del",
                     "della", "sono", "con", "è"]),
    "ru": frozenset(["и", "в", "не", "на", "что", "с", "по", "это", "как", "к", "из", "для",
                     "он", "но", "от"]),
    "zh": frozenset(["的", "了", "是", "在", "和", "有", "我", "不", "这", "也", "就", "人",
                     "们", "中", "上"]),
    "ja": frozenset(["の", "に", "は", "を", "た", "が", "で", "て", "と", "し", "れ", "さ",
                     "な", "い", "る"]),
}


def stop_words(lang: str) -> frozenset[str] | None:
    """The list for `lang`, or None when we have none (the rule is then skipped)."""
    return STOP_WORDS.get(lang)
