"""The heuristic filters: each rule's reason, language awareness, and the fast n-gram paths
against a plain reimplementation of datatrove's definitions."""

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from llmtk.clean import CleanConfig
from llmtk.clean.filters import (
    C4,
    INT_NGRAMS_FROM,
    DocText,
    FineWeb,
    GopherQuality,
    GopherRepetition,
    Profile,
    _IntNGrams,
    _NGrams,
    ngrams,
)
from llmtk.clean.tokens import tokens

DATA = Path(__file__).parent / "data" / "clean"
ARTICLES = {
    d["lang"]: d["text"]
    for d in map(json.loads, (DATA / "articles.jsonl").read_text(encoding="utf-8").splitlines())
}
EN = Profile.for_lang("en")
GOOD = ARTICLES["en"]


def check(rule, text: str, profile: Profile = EN) -> str | None:
    # the words are the profile's language's, as in the pipeline
    return rule.check(DocText(text, profile.lang), profile)


def all_filters(text: str, profile: Profile) -> str | None:
    """The four rule sets with the language's thresholds (the built-in table's)."""
    stages, _ = CleanConfig().for_lang(profile.lang)
    d = DocText(text, profile.lang)
    for name in ("gopher_repetition", "gopher_quality", "c4", "fineweb"):
        reason = stages[name].check(d, profile)
        if reason:
            return reason
    return None


# -- the good articles pass every rule, in every language ----------------------------------


@pytest.mark.parametrize("lang", sorted(ARTICLES))
def test_normal_articles_pass_all_filters(lang):
    assert all_filters(ARTICLES[lang], Profile.for_lang(lang)) is None


@pytest.mark.parametrize("lang", ["zh", "ja"])
def test_cjk_words_are_words_not_space_runs(lang):
    text = ARTICLES[lang]
    assert len(text.split()) < 50  # split on spaces, this article would be "too short"
    words = DocText(text, lang).words  # jieba's, Sudachi's: fewer than its characters
    assert 100 < len(words) < len(tokens(text, "ko"))
    stages, _ = CleanConfig().for_lang(lang)
    assert check(stages["gopher_quality"], text, Profile.for_lang(lang)) is None


def test_cjk_rules_differ_from_latin_rules():
    # A Chinese word is 1-2 characters: English's mean word length (3-10) drops the article,
    # Chinese's (FineWeb-2's 1-5) keeps it; in Korean, every character is a word and the rule
    # is skipped.
    zh = Profile.for_lang("zh")
    assert check(GopherQuality(), ARTICLES["zh"], zh) == "gopher.mean_word_length"
    assert check(CleanConfig().for_lang("zh")[0]["gopher_quality"], ARTICLES["zh"], zh) is None
    assert check(GopherQuality(), ARTICLES["zh"], Profile.for_lang("ko")) is None


def test_stop_words_are_per_language():
    de = ARTICLES["de"]
    assert check(GopherQuality(), de, Profile.for_lang("de")) is None
    # German prose has hardly any English stop words
    assert check(GopherQuality(), de, EN) == "gopher.stop_words"


# -- Gopher quality ------------------------------------------------------------------------


def test_short_doc():
    assert check(GopherQuality(), "The cat sat on the mat with the hat.") == "gopher.short_doc"


def test_long_doc():
    assert check(GopherQuality(max_doc_words=100), GOOD) == "gopher.long_doc"


def test_mean_word_length_low_and_high():
    short = " ".join(["a b c to of the and be"] * 20)
    assert check(GopherQuality(), short) == "gopher.mean_word_length"
    long = " ".join(["incomprehensibilities and the counterrevolutionaries"] * 30)
    assert check(GopherQuality(), long) == "gopher.mean_word_length"


def test_hash_and_ellipsis_ratio():
    assert check(GopherQuality(), GOOD + " #tag" * 40) == "gopher.hash_ratio"
    assert check(GopherQuality(), GOOD + " wait..." * 40) == "gopher.ellipsis_ratio"


def test_bullet_and_ellipsis_lines():
    sentences = GOOD.replace("\n\n", " ").split(". ")
    bullets = "\n".join(f"- {s}" for s in sentences)
    assert check(GopherQuality(), bullets) == "gopher.bullet_lines"
    trailing = "\n".join(f"{s} and then…" for s in sentences)
    assert check(GopherQuality(), trailing) == "gopher.ellipsis_lines"


def test_alpha_words():
    numbers = GOOD + " " + " ".join(str(i) for i in range(200))
    assert check(GopherQuality(), numbers) == "gopher.alpha_words"


def test_stop_words():
    no_stop = " ".join(["apples oranges pears bananas grapes melons cherries plums"] * 10)
    assert check(GopherQuality(), no_stop) == "gopher.stop_words"


def test_rule_switched_off_with_none():
    assert check(GopherQuality(min_doc_words=None, min_stop_words=None), "Hello there, world.") \
        != "gopher.short_doc"


# -- Gopher repetition ---------------------------------------------------------------------


def test_duplicate_paragraphs_and_lines():
    assert check(GopherRepetition(), "\n\n".join(["Same paragraph here."] * 5 + [GOOD])) \
        == "gopher.dup_para_frac"
    big = ("A long paragraph that repeats. " * 30).strip()
    assert check(GopherRepetition(), f"{GOOD}\n\n{big}\n\n{big}") == "gopher.dup_para_char_frac"
    lines = GOOD.replace("\n\n", "\n") + "\n" + "\n".join(["Buy now."] * 10)
    assert check(GopherRepetition(dup_para_frac=None), lines) == "gopher.dup_line_frac"
    long_line = "This whole sentence is repeated on its own line, word for word, again. " * 6
    text = GOOD.replace("\n\n", "\n") + f"\n{long_line}\n{long_line}"
    assert check(GopherRepetition(dup_para_frac=None, dup_para_char_frac=None), text) \
        == "gopher.dup_line_char_frac"


def test_top_and_duplicate_ngrams():
    assert check(GopherRepetition(), GOOD + " big data" * 60) == "gopher.top_2_gram"
    phrase = "the quick brown fox jumps over the lazy dog near the river bank today"
    text = GOOD + " " + " ".join([phrase] * 6)
    assert check(GopherRepetition(top_n_grams=[]), text).startswith("gopher.dup_")
    assert check(GopherRepetition(top_n_grams=[], dup_n_grams=[[5, 0.15]]), text) \
        == "gopher.dup_5_gram"
    assert check(GopherRepetition(top_n_grams=[], dup_n_grams=[[10, 0.1]]), text) \
        == "gopher.dup_10_gram"


def test_empty_text():
    assert check(GopherRepetition(), "") == "gopher.empty"


# datatrove's definitions, written plainly (join the words, Counter.most_common, scan)
def ref_top(words, n):
    grams = [" ".join(words[i:i + n]) for i in range(len(words) - n + 1)]
    gram, count = Counter(grams).most_common(1)[0]
    return len(gram) * count


def ref_dup(words, n):
    seen, total, i = set(), 0, 0
    while i < len(words) - n + 1:
        gram = tuple(words[i:i + n])
        if gram in seen:
            total += sum(map(len, gram))
            i += n
        else:
            seen.add(gram)
            i += 1
    return total


@pytest.mark.parametrize("kind", [_NGrams, _IntNGrams])
@pytest.mark.parametrize("seed", range(40))
def test_fast_ngram_rules_match_the_plain_definitions(seed, kind):
    rng = random.Random(seed)
    vocab = ["a", "bb", "ccc", "the", "river", "x", "yy", "longerword"][: rng.randint(2, 8)]
    words = [rng.choice(vocab) for _ in range(rng.randint(5, 200))]
    if seed % 4 == 0:  # some documents without any repeat, where the rules stop early
        words = [f"w{i}" for i in range(rng.randint(5, 200))]
    chars = sum(map(len, words)) + len(words) - 1
    for n in (2, 3, 4):
        assert kind(words).top_chars(n) == ref_top(words, n)
    g = kind(words)
    for n in range(5, 11):
        exact = ref_dup(words, n)
        assert g.dup_chars(n) == exact
        for frac in (0.0, 0.05, 0.1, 0.2, 0.5):
            assert g.dup_exceeds(n, frac, chars) == (exact / chars > frac), (n, frac)


def test_long_documents_use_the_integer_ngrams():
    assert isinstance(ngrams(["w"] * INT_NGRAMS_FROM), _IntNGrams)
    assert type(ngrams(["w"] * (INT_NGRAMS_FROM - 1))) is _NGrams


# -- C4 ------------------------------------------------------------------------------------


def test_c4_doc_level_reasons():
    assert check(C4(), GOOD + "\nLorem ipsum dolor sit amet, consectetur.") == "c4.lorem_ipsum"
    assert check(C4(), GOOD + "\nThe config is {a: 1} in this example.") == "c4.curly_bracket"
    assert check(C4(), "One short line.\nAnother one here.") == "c4.too_few_sentences"


def test_c4_rewrites_lines_like_c4():
    text = "Menu\n" + GOOD + "\nPlease enable JavaScript to view the comments here."
    d = DocText(text)
    assert C4().check(d, EN) is None
    assert "Menu" not in d.text and "JavaScript" not in d.text
    assert d.text.startswith("The river") and "\n\nIn the nineteenth" in d.text
    d2 = DocText(text)
    assert C4(rewrite=False).check(d2, EN) is None and d2.text == text


def test_c4_cjk_lines_count_characters():
    d = DocText(ARTICLES["zh"])
    assert C4().check(d, Profile.for_lang("zh")) is None


# -- FineWeb -------------------------------------------------------------------------------


def test_fineweb_reasons():
    no_punct = "\n".join(f"Heading number {i} without a full stop" for i in range(20))
    assert check(FineWeb(), no_punct) == "fineweb.line_punct_ratio"
    short = "\n".join(["Yes.", "No.", "Maybe so.", GOOD.replace("\n\n", " ")] + ["Ok."] * 5)
    assert check(FineWeb(), short) == "fineweb.short_line_ratio"
    dup = GOOD + "\nThis exact line appears twice in the text.\nThis exact line appears twice " \
        "in the text."
    assert check(FineWeb(), dup) == "fineweb.char_dup_ratio"
    listy = "\n".join(f"Internationalization{i:03d} considerations." for i in range(40))
    assert check(FineWeb(), listy) == "fineweb.list_ratio"
    assert check(FineWeb(), "\n \n") == "fineweb.empty"


def test_every_threshold_can_be_switched_off():
    # `false` in the TOML config becomes None: a switched-off rule never fires or fails.
    from dataclasses import fields, replace

    junk = "x\n" * 30 + "{ lorem ipsum"
    for rule in (GopherQuality(), GopherRepetition(), C4(), FineWeb()):
        off = {}
        for f in fields(rule):
            value = getattr(rule, f.name)
            if f.name not in ("enabled", "rewrite") and not isinstance(value, bool):
                off[f.name] = None if not isinstance(value, list) else []
            elif isinstance(value, bool) and f.name.startswith("filter_"):
                off[f.name] = False
        rule = replace(rule, **off)  # the stage configs are frozen
        assert rule.check(DocText(junk), EN) is None, type(rule).__name__
