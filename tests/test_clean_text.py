"""Language ID (model + script census), PII scrubbing, normalisation."""

import ipaddress
import json
import random
from pathlib import Path

import pytest

from llmtk.clean.normalize import Normalize
from llmtk.text.langid import LanguageId, census, decide_by_script, model_path
from llmtk.text.pii import luhn_ok, scrub, valid_card, valid_cn_id

DATA = Path(__file__).parent / "data" / "clean"
ARTICLES = {
    d["lang"]: d["text"]
    for d in map(json.loads, (DATA / "articles.jsonl").read_text(encoding="utf-8").splitlines())
}


@pytest.fixture(scope="module")
def lid():
    return LanguageId()


# -- language ID ---------------------------------------------------------------------------

MIXED_ZH = "训练大模型时 Loss 曲线是判断模型收敛情况的重要依据"


def test_model_ships_in_an_installed_package():
    assert model_path().endswith("lid.176.ftz")


def test_raw_model_is_fooled_by_mixed_script_but_we_are_not(lid):
    import fasttext_new

    raw = fasttext_new.load_model(model_path())
    assert raw.predict(MIXED_ZH)[0][0] != "__label__zh"  # the problem the census fixes
    lang, score = lid.predict(MIXED_ZH)
    assert lang == "zh" and score > 0.5


@pytest.mark.parametrize("lang", ["en", "de", "fr", "ru", "zh", "ja"])
def test_articles_identified(lid, lang):
    got, score = lid.predict(ARTICLES[lang])
    assert got == lang and score > 0.8


def test_whole_document_is_classified(lid):
    # The first 80 characters are English; the document is German.
    text = "Short English intro line here, then the real text follows below.\n" + ARTICLES["de"]
    assert lid.predict(text)[0] == "de"


def test_census_counts_scripts():
    c = census("日本語のテキスト abc Привет")
    assert c["han"] == 3 and c["kana"] == 5 and c["cyrillic"] == 6 and c["letters"] == 17
    assert decide_by_script(census("한국어 문장입니다")) == ("ko", 1.0)
    assert decide_by_script(census("plain English")) is None


@pytest.mark.parametrize("text", [
    "日本語のテキスト abc Привет ・ー゛ ｶﾞ 한국어 ᄀ ㄱ 𠮷野家 😀 ½ ² _ 3",  # astral letters too
    ARTICLES["ja"], ARTICLES["ru"], ARTICLES["zh"] + ARTICLES["de"],
])
def test_census_table_counts_as_the_regular_expressions_do(text):
    import re

    def count(ranges):  # the plain definition: characters in the script's ranges
        return len(re.findall(f"[{ranges}]", text))

    assert census(text) == {
        "letters": len(re.findall(r"[^\W\d_]", text)),
        "han": count("\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"),
        "kana": count("\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f"),
        "hangul": count("\uac00-\ud7af\u1100-\u11ff\u3130-\u318f"),
        "cyrillic": count("\u0400-\u04ff"),
    }


def test_no_letters_is_undetermined(lid):
    assert lid.predict("12345 --- 678") == ("und", 0.0)


def test_langid_pickles_without_its_model(lid):
    import pickle

    lid.predict("hello world")
    clone = pickle.loads(pickle.dumps(lid))
    assert clone._model is None and clone.predict(ARTICLES["en"])[0] == "en"
    assert clone._model is lid._model  # a --workers chunk reuses the process's loaded model


# -- PII -----------------------------------------------------------------------------------

_W = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)


def make_cn_id(rng: random.Random, valid: bool = True) -> str:
    body = f"{rng.randint(110000, 659999)}{rng.randint(1950, 2010)}" \
        f"{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}{rng.randint(0, 999):03d}"
    check = "10X98765432"[sum(int(c) * w for c, w in zip(body, _W, strict=True)) % 11]
    if not valid:
        check = "10X98765432"[("10X98765432".index(check) + 1) % 11]
    return body + check


def make_card(rng: random.Random, valid: bool = True) -> str:
    prefix = rng.choice(["4", "51", "55", "6011", "62", "37"])
    length = 15 if prefix == "37" else 16
    body = prefix + "".join(str(rng.randint(0, 9)) for _ in range(length - len(prefix) - 1))
    for d in "0123456789":
        if luhn_ok(body + d) == valid:
            return body + d
    raise AssertionError


def make_positive(rng: random.Random) -> tuple[str, str]:
    kind = rng.choice(["EMAIL", "PHONE", "ID_NUMBER", "CARD", "IP"])
    if kind == "EMAIL":
        user = rng.choice(["anna", "li.wei", "j_smith", "x+tag"]) + str(rng.randint(1, 99))
        return kind, f"{user}@{rng.choice(['example.com', 'mail.example.org', 'qq.com'])}"
    if kind == "PHONE":
        fmt = rng.choice([
            lambda: f"1{rng.choice('3456789')}{rng.randint(0, 9)}{rng.randint(10**7, 10**8 - 1)}",
            lambda: f"+86 13{rng.randint(0, 9)} {rng.randint(1000, 9999)} "
            f"{rng.randint(1000, 9999)}",
            lambda: f"+1 {rng.randint(200, 999)}-{rng.randint(200, 999)}-{rng.randint(1000, 9999)}",
            lambda: f"({rng.randint(200, 999)}) {rng.randint(200, 999)}-{rng.randint(1000, 9999)}",
            lambda: f"+44 20 {rng.randint(1000, 9999)} {rng.randint(1000, 9999)}",
        ])
        return kind, fmt()
    if kind == "ID_NUMBER":
        return kind, make_cn_id(rng)
    if kind == "CARD":
        card = make_card(rng)
        if rng.random() < 0.5 and len(card) == 16:
            card = " ".join(card[i:i + 4] for i in range(0, 16, 4))
        return kind, card
    if rng.random() < 0.7:  # a public address: private and reserved ones are nobody's
        while not ipaddress.ip_address(ip := ".".join(
                str(rng.randint(32, 254)) for _ in range(4))).is_global or int(
                ip.split(".")[0]) >= 224:
            pass
        return kind, ip
    return kind, rng.choice(["2a00:1450:4001:811::200e", "2606:2800:220:1:248:1893:25c8:1946",
                             "2a02:8108:1a40:3e00:9c1f:2bff:fe4d:7a10"])


def test_pii_recall_on_generated_positives():
    rng = random.Random(7)
    found = total = 0
    for _ in range(400):
        kind, value = make_positive(rng)
        text, counts = scrub(f"Contact: {value}, thanks.")
        total += 1
        if text == f"Contact: <{kind}>, thanks." and counts == {kind: 1}:
            found += 1
    assert found / total >= 0.98, found / total


def test_pii_precision_on_checksum_failing_and_lookalike_numbers():
    rng = random.Random(8)
    negatives = []
    for _ in range(150):
        negatives.append(make_cn_id(rng, valid=False))
        negatives.append(make_card(rng, valid=False))
    negatives += [
        "999.1.1.1", "1.2.3.4.5", "01.02.2024", "3.14159", "10:30:45", "2024-01-02",
        "ISBN 978-3-16-148410-0", "version 2.7.18", "1999", "std::vector", "x@y",
        "12345678901234567", "order #123456789",
    ]
    wrongly = [n for n in negatives if scrub(f"Value {n} here.")[1]]
    assert len(wrongly) / len(negatives) <= 0.01, wrongly


def test_checksums():
    assert valid_cn_id("11010519491231002X")
    assert not valid_cn_id("110105194912310021")
    assert not valid_cn_id("110105194913310028")  # month 13
    assert valid_card("4111 1111 1111 1111") and not valid_card("4111 1111 1111 1112")


def test_pii_kinds_can_be_limited():
    text, counts = scrub("a@example.com 93.184.216.34", frozenset({"IP"}))
    assert text == "a@example.com <IP>" and counts == {"IP": 1}


# Issue 34: technical text and code hold many things shaped like addresses and phone numbers
# that are nobody's personal data (scope operators and reST "::", versions and section
# numbers, signed decimals, loopback/private/documentation/multicast addresses).
NEVER_PERSONAL = [
    "might be::", "in C::", "A::B x;", "Cafe::Bead", "dead::beef", "section 3.3.2.1.",
    "zlib 1.2.0.1", "release 4.19.0.2", "+3.140000", "+000000120", "127.0.0.1", "10.0.0.5",
    "192.168.1.1", "192.0.2.1", "2001:db8::1", "fe80::1", "std::vector<int>", "fmt::Debug",
    "::1", "fd00::1", "ff02::1", "224.0.0.251", "255.255.255.0", "100.64.0.1",
    "linux-2.6.35.5/include", "rfc4880:5.2.3.16", "4.6.0.152-fe9c", "2.39.90.1",
    "Standards-Version: 4.6.1.0", "1.0.0.127.in-addr.arpa", "+1.0000000", "+48.8566",
    "+20 000 000", "+1234567890", "15000000000", "-1.19099999999", "252.227-7013",
    "fuzz.com/testcase/5390364397928448", "4044404959645932768", "+10000-12-31",
    "101.102.103.104", "123.45.67.89", "pkg==1.2.3.4", "pip install numpy>=1.26.4.1",
    "requests~=2.31.0.1", "pkg==93.184.216.34", "pkg >= 185.199.108.153",
    "gem 'x', '~> 93.184.216.34'",
]
# Real-shaped personal data in several countries' formats, which must still go.
REAL_SHAPED = [
    ("PHONE", "+1 415-555-2671"), ("PHONE", "(415) 555-2671"), ("PHONE", "415.555.2671"),
    ("PHONE", "+44 20 7946 0958"), ("PHONE", "+49 30 12345678"),
    ("PHONE", "+33 1 23 45 67 89"), ("PHONE", "+86 138 0013 8000"), ("PHONE", "13912345678"),
    ("PHONE", "+91 98765 43210"), ("PHONE", "+55 11 91234-5678"), ("PHONE", "+81 3-1234-5678"),
    ("PHONE", "+7 912 345-67-89"), ("PHONE", "+34 612 34 56 78"), ("PHONE", "+14155552671"),
    ("IP", "93.184.216.34"), ("IP", "185.199.108.153"), ("IP", "2a00:1450:4001:811::200e"),
    ("IP", "2a02:8108:1a40:3e00:9c1f:2bff:fe4d:7a10"), ("CARD", "4111 1111 1111 1111"),
    ("CARD", "3782 822463 10005"), ("CARD", "5555555555554444"),
    ("ID_NUMBER", "11010519491231002X"), ("EMAIL", "li.wei@qq.com"),
]


def test_pii_leaves_never_personal_constructs_alone():
    altered = [c for c in NEVER_PERSONAL
               if scrub(f"As the manual says, {c} is what we mean here.")[1]]
    assert altered == []


def test_pii_still_finds_real_shaped_data_of_several_countries():
    missed = [(kind, v) for kind, v in REAL_SHAPED
              if scrub(f"Contact: {v}, thanks.") != (f"Contact: <{kind}>, thanks.", {kind: 1})]
    assert missed == []


def test_public_address_after_a_version_word_is_a_version():
    assert scrub("upgrade to version 93.184.216.34 now")[1] == {}
    assert scrub("connect to 93.184.216.34 now") == ("connect to <IP> now", {"IP": 1})
    assert scrub("ip=93.184.216.34") == ("ip=<IP>", {"IP": 1})


# -- normalisation -------------------------------------------------------------------------


def test_ansi_escapes_and_controls_removed():
    n = Normalize()
    assert n("\x1b[1;31mError:\x1b[0m disk \x1b]0;title\x07full\x00\x07 now") == \
        "Error: disk full now"


def test_mojibake_fixed():
    n = Normalize()
    assert n("The cafÃ© was â€œniceâ€\x9d.") == "The café was “nice”."
    assert n("Le café est déjà là.") == "Le café est déjà là."  # correct text untouched


def test_mojibake_is_judged_on_the_lines_that_hint_at_it():
    """ftfy's test runs on each line with a lead-and-continuation pair: French spacing
    (`é` before a no-break space) is such a pair and stays; damage on a later line is found
    past it, and the whole text is repaired."""
    n = Normalize(whitespace=False)
    french = "Un thé\xa0?\nOui, à la carte."
    assert n(french) == french
    damaged = french + "\nLa journÃ©e fut â€œbelleâ€\x9d.\nFin."
    assert n(damaged) == french + "\nLa journée fut “belle”.\nFin."


def test_whitespace_and_line_endings():
    n = Normalize()
    assert n("  one\r\ntwo  \u00a0three   four\r\n\n\n\n\nfive \t") == \
        "one\ntwo three four\n\nfive"


def test_width_folding_and_unicode_forms():
    assert Normalize()("ＡＢＣ１２３，。") == "ABC123，。"  # CJK punctuation is kept
    assert Normalize(fold_width="all")("ＡＢ，！") == "AB,!"
    assert Normalize(unicode="NFKC")("ﬁne ①") == "fine 1"
    assert Normalize()("e\u0301") == "é"  # NFC composes


def test_the_run_regexes_match_the_runs_a_plus_matches():
    """normalize's character runs, written `[x][x]*` for speed, match where `[x]+` does."""
    import re

    from llmtk.clean import normalize

    rng = random.Random(35)
    alphabet = "ab \x01\x1f\x7f\x9f\u200b\ufeff\u2060\uff01\uff10\uff21\uff5e\uff5f\uff0f"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 9)))
             for _ in range(5000)]
    for fast in (normalize._CONTROL, *normalize._WIDE.values()):
        first = fast.pattern[:fast.pattern.index("]") + 1]
        assert fast.pattern == first + first + "*"
        plain = re.compile(first + "+")
        for text in texts:
            assert fast.sub(lambda m: f"<{m.group()}>", text) == \
                plain.sub(lambda m: f"<{m.group()}>", text)


def test_zh_conversion_with_opencc():
    assert Normalize(zh_convert="t2s")("漢字轉換") == "汉字转换"
