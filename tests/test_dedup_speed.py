"""The fast paths of the dedup signature pass give exactly what the definitions give.

Normaliser.batch (a per-code-point table in numpy) must equal Normaliser(text) for
every text, str.split must equal the token regex where it is used, and a batch's
signatures must not depend on which documents share the batch.
"""

import re

import numpy as np
import pytest

from llmtk.dedup.config import NORMALISE_STEPS, DedupConfig
from llmtk.dedup.minhash import MinHasher
from llmtk.dedup.normalise import Normaliser
from llmtk.dedup.table import HashTable, _first_per_slot
from llmtk.text.segment import CJK_CHAR, is_cjk, words

EVERY = "".join(map(chr, range(0x110000)))  # all code points, lone surrogates included

SAMPLES = [
    "", " ", "\n\n", "a", "Hello, World! 1999", "  leading and trailing  \t\n",
    "don't stop—ever…  ok", "Ünïcödé ÇA VA? Straße İstanbul ΣΟΦΟΣ", "١٢٣ ٤٥ digits ８９",
    "我们今天去公园散步，天气很好。", "これはテストです・カタカナ゛゜", "한국어 텍스트 입니다",
    "mixed 中文 with English terms, v2.0", "・・・゛゛", "emoji 🙂🙂 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𠀀𠀁",
    "tab\tsep\x1cfile\x1dgroup\u3000ideographic\u00a0nbsp\u2028line", "_under_score_ __x__",
    "lone \ud800 surrogate \udfff", "a\u0301e\u0300 combining", "x" * 3000,
]


def chunks_of_every(step: int = 4099) -> list[str]:
    """All of Unicode cut into pieces (odd length, so the cuts fall everywhere)."""
    return [EVERY[i : i + step] for i in range(0, len(EVERY), step)]


def test_regex_space_is_str_isspace():
    # The table takes its SPACE bit from re's \s; str.split() uses str.isspace.
    assert [m.start() for m in re.finditer(r"\s", EVERY)] == [
        i for i, c in enumerate(EVERY) if c.isspace()
    ]


def test_lowercasing_neither_adds_nor_removes_cjk():
    # Normaliser.batch tells "no CJK" from the lowercased text; is_cjk reads the original.
    for i, c in enumerate(EVERY):
        low = c.lower()
        if CJK_CHAR.match(c):
            assert low == c, hex(i)
        elif low != c:
            assert not CJK_CHAR.search(low), hex(i)


@pytest.mark.parametrize("steps", [
    NORMALISE_STEPS, (), ("lowercase",), ("whitespace",), ("punctuation",), ("digits",),
    ("lowercase", "digits"), ("whitespace", "punctuation"), ("punctuation", "digits"),
    ("lowercase", "whitespace", "digits"),
])
def test_batch_normalise_equals_the_definition(steps):
    norm = Normaliser(steps)
    for texts in (SAMPLES, chunks_of_every(), [EVERY], []):
        got, cjk = norm.batch(texts)
        assert got == [norm(t) for t in texts]
        lowered = [t.lower() for t in texts] if "lowercase" in steps else texts
        assert cjk.tolist() == [len(CJK_CHAR.findall(t)) for t in lowered]


def test_split_equals_words_without_cjk():
    norm = Normaliser(NORMALISE_STEPS)
    texts = [t for t in SAMPLES + chunks_of_every() if not CJK_CHAR.search(t.lower())]
    for t in texts:
        normed = norm(t)
        assert normed.split() == words(normed)
        assert not is_cjk(t)


def test_signatures_do_not_depend_on_the_batch():
    # Mixed batches (char-unit, short, word documents) against one document at a time.
    for config in (DedupConfig(), DedupConfig(unit="char", ngram=3), DedupConfig(ngram=1),
                   DedupConfig(normalise=("lowercase",))):
        hasher = MinHasher(config)
        texts = SAMPLES + ["the quick brown fox jumps over the lazy dog " * k for k in (1, 9)]
        whole = hasher.batch(texts)
        for i, t in enumerate(texts):
            one = hasher.batch([t])
            assert one.exact[0] == whole.exact[i]
            assert np.array_equal(one.bands[0], whole.bands[i])
            assert one.shingles[0] == whole.shingles[i] == len(hasher.shingles(t))
            assert np.array_equal(one.low[0], whole.low[i])
            sig = hasher.signatures([hasher.shingles(t)])
            assert np.array_equal((sig[0] & np.uint64(0xFF)).astype(np.uint8), whole.low[i])


def test_signature_of_a_document_longer_than_a_block():
    hasher = MinHasher(DedupConfig(unit="word", ngram=1))
    x = np.arange(1, 10_000, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    sig = hasher.signatures([x[:3], x, x[5:6]])
    brute = [(np.multiply.outer(part, hasher.a) + hasher.b).min(axis=0)
             for part in (x[:3], x, x[5:6])]
    assert np.array_equal(sig, np.stack(brute))


def test_first_per_slot_equals_unique():
    rng = np.random.default_rng(7)
    for n in (1, 3, 1000, 50_000):
        slots = rng.integers(0, max(2, n // 3), n)
        where = np.sort(rng.choice(10 * n, n, replace=False))
        want_slots, first = np.unique(slots, return_index=True)
        got_slots, got_where = _first_per_slot(slots, where)
        assert np.array_equal(got_slots, want_slots)
        assert np.array_equal(got_where, where[first])


def test_hash_table_growth_keeps_every_key():
    table = HashTable(16)
    keys = (np.arange(1, 200_001, dtype=np.uint64) * np.uint64(0xBF58476D1CE4E5B9)) | np.uint64(1)
    keys = np.unique(keys)
    for lo in range(0, len(keys), 30_000):
        table.insert_new(keys[lo : lo + 30_000], np.arange(lo, lo + len(keys[lo : lo + 30_000])))
    assert np.array_equal(table.get(keys), np.arange(len(keys)))


def test_cjk_share_from_a_count_equals_is_cjk():
    texts = SAMPLES + chunks_of_every(997) + [
        "中文中abcdefg", "中文abcdefgh", "中文中 abcdefg\n", "中" + " " * 5, "\n\n中\n",
        "日本語のテキスト with some English words in it, quite a few of them really",
    ]
    for t in texts:
        assert is_cjk(t, cjk_chars=len(CJK_CHAR.findall(t))) == is_cjk(t), t[:40]
    norm = Normaliser(NORMALISE_STEPS)
    _, counts = norm.batch(texts)
    assert counts.tolist() == [len(CJK_CHAR.findall(t)) for t in texts]


def test_batch_normalise_in_groups(monkeypatch):
    import llmtk.dedup.normalise as normalise

    norm = Normaliser(NORMALISE_STEPS)
    want = [norm(t) for t in SAMPLES]
    monkeypatch.setattr(normalise, "BATCH_CHARS", 50)  # most documents alone, some together
    got, counts = norm.batch(SAMPLES)
    assert got == want
    assert counts.tolist() == [len(CJK_CHAR.findall(t.lower())) for t in SAMPLES]
