"""`llmtk inspect`: a corpus of known make-up, checked against its make-up and against what
`llmtk dedup` then removes; shard parts merged against one pass; the HTML report."""

import functools
import json
import random
import re
import shutil
import subprocess

import pytest

from tests.util import llmtk

# Word lists of three languages: documents are random draws, so no two are alike by chance.
EN = ("the of and to in is was for that with as on by at from this which be are an it or had "
      "not but have were they his their has one been all would when there more who some into "
      "river mountain village market winter summer harbour garden teacher children morning "
      "evening library history music science kitchen window friends journey weather").split()
DE = ("der die und in den von zu das mit sich des auf für ist im dem nicht ein eine als auch "
      "es an werden aus er hat dass sie nach wird bei einer um am sind noch wie einem über "
      "Fluss Berg Dorf Markt Winter Sommer Hafen Garten Lehrer Kinder Morgen Abend Bibliothek "
      "Geschichte Musik Wissenschaft Küche Fenster Freunde Reise Wetter").split()
FR = ("le de la et les des en un du une que est pour qui dans par plus pas au sur ne se ce il "
      "sont avec ont elle nous vous leur mais comme fait été aussi rivière montagne village "
      "marché hiver été port jardin professeur enfants matin soir bibliothèque histoire "
      "musique science cuisine fenêtre amis voyage temps").split()

N_EN, N_DE, N_FR = 160, 60, 40
N_EXACT, N_NEAR = 24, 20
N_HTML, N_MOJIBAKE, N_EMAIL_DOCS = 6, 5, 10
SOURCES = ("books", "web", "wiki")


def _words(rng: random.Random, vocab: list[str], n: int = 110) -> list[str]:
    return [rng.choice(vocab) for _ in range(n)]


@functools.cache
def corpus() -> tuple[list[dict], dict]:
    """The records and their make-up (what each count should be)."""
    rng = random.Random(7)
    docs: list[dict] = []
    langs = {"en": 0, "de": 0, "fr": 0}

    def add(text: str, lang: str) -> None:
        docs.append({"id": f"doc-{len(docs)}", "text": text,
                     "source": SOURCES[len(docs) % len(SOURCES)]})
        langs[lang] += 1

    for lang, vocab, n in (("en", EN, N_EN), ("de", DE, N_DE), ("fr", FR, N_FR)):
        for _ in range(n):
            add(" ".join(_words(rng, vocab)), lang)
    originals = list(range(len(docs)))
    rng.shuffle(originals)
    for i in originals[:N_EXACT]:  # exact up to case and spacing: dedup's normalised key
        add("  " + docs[i]["text"].upper() + "\n", _lang_of(i))
    for i in originals[N_EXACT:N_EXACT + N_NEAR]:  # one word in 110 changed: Jaccard ~0.9
        words = docs[i]["text"].split()
        words[55] = "zzyzx"
        add(" ".join(words), _lang_of(i))
    for _ in range(N_HTML):
        body = " ".join(_words(rng, EN, 60))
        add(f"<!DOCTYPE html><html><head><title>t</title></head><body><p>{body}</p>"
            f"</body></html>", "en")
    for _ in range(N_MOJIBAKE):
        text = " ".join(_words(rng, FR, 60)) + " café déjà élève"
        add(text.encode("utf-8").decode("cp1252", errors="replace"), "fr")
    for k in range(N_EMAIL_DOCS):
        extra = " and jane.roe@mail.example.org" if k == 0 else ""
        add(" ".join(_words(rng, EN, 60)) + f" write to user{k}@example.com{extra} today", "en")
    n = len(docs)
    makeup = {"documents": n, "exact": N_EXACT, "near": N_EXACT + N_NEAR,
              "languages": {k: v / n for k, v in langs.items()}, "html": N_HTML,
              "mojibake": N_MOJIBAKE, "email": N_EMAIL_DOCS + 1,
              "sources": {s: sum(d["source"] == s for d in docs) / n for s in SOURCES}}
    return docs, makeup


def _lang_of(i: int) -> str:
    return "en" if i < N_EN else "de" if i < N_EN + N_DE else "fr"


def _write(path, docs) -> None:
    path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The corpus in three files (for --shard), and one pass's JSON and report."""
    tmp = tmp_path_factory.mktemp("inspect")
    docs, makeup = corpus()
    third = len(docs) // 3
    files = []
    for k, part in enumerate((docs[:third], docs[third:2 * third], docs[2 * third:])):
        files.append(tmp / f"part-{k}.jsonl")
        _write(files[-1], part)
    report = tmp / "report.html"
    r = llmtk("inspect", tmp, "--by", "source", "--json", "--report", report, check=True)
    return {"tmp": tmp, "files": files, "result": json.loads(r.stdout), "makeup": makeup,
            "report": report, "stderr": r.stderr.decode()}


def test_numbers_match_the_known_makeup(data):
    res, m = data["result"], data["makeup"]
    assert res["documents"] == m["documents"]
    assert res["exact_duplicate_fraction"] == pytest.approx(m["exact"] / m["documents"],
                                                            abs=1e-6)
    assert res["near_duplicate_fraction"] == pytest.approx(m["near"] / m["documents"],
                                                           abs=0.03)
    for lang, share in m["languages"].items():
        assert res["languages"].get(lang, 0.0) == pytest.approx(share, abs=0.03), lang
    assert res["html_documents"] == m["html"]
    assert res["mojibake_documents"] == m["mojibake"]
    assert res["broken"]["html"]["example"] == f"doc-{m['documents'] - 21}"  # the first page
    assert res["pii"]["email"] == m["email"]
    assert res["pii_documents"]["email"] == N_EMAIL_DOCS
    assert res["sources"] == {s: pytest.approx(v, abs=1e-6) for s, v in m["sources"].items()}
    assert res["duplicates"]["exact_is_estimate"] is False
    assert res["duplicates"]["near_is_estimate"] is False
    assert "exact + near duplicates" in data["stderr"] and "languages" in data["stderr"]


def test_duplicate_shares_agree_with_what_dedup_removes(data):
    rejects = data["tmp"] / "dups.jsonl"
    llmtk("dedup", *data["files"], "--rejects", rejects, "-q", "-o", data["tmp"] / "kept.jsonl",
          check=True)
    reasons = [json.loads(line)["llmtk"]["reason"] for line in rejects.read_text().splitlines()]
    n = data["result"]["documents"]
    exact = reasons.count("dedup.exact") / n
    assert data["result"]["exact_duplicate_fraction"] == pytest.approx(exact, abs=0.01)
    assert data["result"]["near_duplicate_fraction"] == pytest.approx(len(reasons) / n,
                                                                      abs=0.03)
    # Below the sample bound, inspect runs dedup's own decisions: the very same share.
    assert data["result"]["near_duplicate_fraction"] == pytest.approx(len(reasons) / n,
                                                                      abs=1e-6)


def test_shard_parts_merged_equal_one_pass(data):
    tmp = data["tmp"]
    parts = []
    for k in range(3):
        parts.append(tmp / f"p{k}.json")
        llmtk("inspect", *data["files"], "--by", "source", "--shard", f"{k}/3", "-o", parts[-1],
              "-q", check=True)
    merged = llmtk("inspect", "merge", *parts, "--json", "-q", check=True)
    assert json.loads(merged.stdout) == data["result"]
    # Every task of the array must be there.
    r = llmtk("inspect", "merge", parts[0], parts[2], "--json", "-q")
    assert r.returncode == 1 and b"missing task 1/3" in r.stderr
    # ... once, and made with the same options.
    r = llmtk("inspect", "merge", *parts, parts[1], "--json", "-q")
    assert r.returncode == 1 and b"task 1/3 again" in r.stderr
    other = tmp / "other.json"
    llmtk("inspect", *data["files"], "--shard", "1/3", "-o", other, "-q", check=True)
    r = llmtk("inspect", "merge", parts[0], other, parts[2], "--json", "-q")
    assert r.returncode == 1 and b"made with other options" in r.stderr


def _lookup(result: dict, key: str):
    """A data-key of the page ('languages.en', 'documents') in the JSON."""
    head, _, rest = key.partition(".")
    return result[head][rest] if rest else result[head]


def test_report_is_self_contained_and_equals_json(data):
    page = data["report"].read_text()
    assert not re.search(r"""(?:src|href)\s*=\s*["']?https?:""", page, re.I)
    assert "<script" not in page.lower()
    assert page.count("<svg") >= 5  # shares, languages (2), sources (2), lengths (3)
    values = re.findall(r'data-key="([^"]+)" data-value="([^"]*)"', page)
    keys = {k for k, _ in values}
    assert {"documents", "exact_duplicate_fraction", "near_duplicate_fraction",
            "html_documents", "mojibake_documents", "pii.email", "languages.en",
            "sources.web"} <= keys
    for key, value in values:
        assert json.loads(value.replace("&quot;", '"')) == _lookup(data["result"], key), key


def test_report_in_a_headless_browser(data):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium)")
    # The flags keep a root, offline Chromium from reaching for the network and a GPU;
    # --enable-logging=stderr prints the page's console messages, where an error would show.
    dom = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                          "--disable-background-networking", "--disable-component-update",
                          "--no-first-run", "--disable-sync", "--enable-logging=stderr",
                          "--v=0", "--dump-dom", data["report"].as_uri()],
                         capture_output=True, timeout=120, text=True)
    assert dom.returncode == 0, dom.stderr
    assert "CONSOLE" not in dom.stderr and "Uncaught" not in dom.stderr, dom.stderr
    assert dom.stdout.count("<svg") >= 5  # every plot is in the rendered page
    shown = re.findall(r'data-key="([^"]+)" data-value="([^"]*)"', dom.stdout)
    assert len(shown) >= 8
    for key, value in shown:  # what the browser shows is what --json says
        assert json.loads(value.replace("&quot;", '"')) == _lookup(data["result"], key), key


def test_bad_options_are_usage_errors(tmp_path):
    f = tmp_path / "a.jsonl"
    _write(f, [{"text": "x"}])
    r = llmtk("inspect", f, "--sample", "1.5")
    assert r.returncode == 2 and b"--sample" in r.stderr
    r = llmtk("inspect", "merge", f)
    assert r.returncode == 1 and b"not an inspect part" in r.stderr


def _batches(texts, size=100):
    import numpy as np

    from llmtk.dedup.config import DedupConfig
    from llmtk.dedup.minhash import MinHasher

    hasher = MinHasher(DedupConfig())
    for s in range(0, len(texts), size):
        chunk = texts[s:s + size]
        yield hasher.batch(chunk), np.arange(s, s + len(chunk), dtype=np.uint64), \
            [f"t{i}" for i in range(s, s + len(chunk))]


def test_near_sample_past_its_bound_merges_like_one_pass_and_estimates():
    """Past the bound the sample is coordinated by the first MinHash value: exact copies
    stay together, the halves merged keep the one pass's sample, and the share is close
    to dedup's over everything."""
    import numpy as np

    from llmtk.dedup.config import DedupConfig
    from llmtk.inspect.dups import NearSample

    docs, _ = corpus()
    texts = [d["text"] for d in docs] * 3  # every text 3 times: 2/3 are exact duplicates
    config = DedupConfig()
    whole, one, first, second = (NearSample(config, limit) for limit in (10**6, 256, 256, 256))
    for k, (batch, identity, ids) in enumerate(_batches(texts)):
        whole.add(batch, identity, ids)
        one.add(batch, identity, ids)
        (first if k < len(texts) // 200 else second).add(batch, identity, ids)
    first.merge(second)
    truth, sampled = whole.decide(), one.decide()
    assert truth["rate"] == 1.0 and truth["sampled"] == len(texts)
    assert one.shift > 0 and sampled["sampled"] <= 256
    assert first.decide() == sampled
    share = (sampled["exact_removed"] + sampled["near_only_weighted"]) / sampled["sampled"]
    assert share == pytest.approx(truth["removed"] / truth["sampled"], abs=0.05)
    # Exact copies are sampled together: each sampled text is there a multiple of 3 times.
    _, counts = np.unique(one.exact, return_counts=True)
    assert (counts % 3 == 0).all()


@pytest.mark.parametrize("verify", [0.5, 0.0])
def test_signer_reuses_signatures_of_exact_duplicates_and_equals_dedup(verify):
    """Signer.batch gives MinHasher.batch's arrays exactly, for exact duplicates inside a
    batch and across batches, after evictions (a bound of 7 texts), for empty, short and
    CJK texts (whose key does not fix their signature), with and without --verify bytes."""
    import numpy as np

    from llmtk.dedup.config import DedupConfig
    from llmtk.dedup.minhash import MinHasher
    from llmtk.inspect.dups import Signer

    docs, _ = corpus()
    pool = [d["text"] for d in docs[:40]] + [
        "", " ", "a b", "Hello, World!", "hello world", "训练大模型时 Loss 曲线是判断模型收敛情况",
        # one normalised text each, two signatures: the unit follows the raw length
        "・・・・abc def", "abc def", "中文 abc!!!!!!!!!!!!!!!!!!!!", "中文 abc"]
    rng = random.Random(3)
    texts = [rng.choice(pool) for _ in range(400)]
    config = DedupConfig(verify=verify)
    hasher, reusing, tiny = MinHasher(config), Signer(config), Signer(config, limit=7)
    for s in range(0, len(texts), 37):
        chunk = texts[s:s + 37]
        want = hasher.batch(chunk)
        for got in (reusing.batch(chunk), tiny.batch(chunk)):
            for name in ("exact", "bands", "shingles", "first"):
                assert np.array_equal(getattr(got, name), getattr(want, name)), name
                assert getattr(got, name).dtype == getattr(want, name).dtype
            assert (got.low is None) == (want.low is None)
            assert want.low is None or np.array_equal(got.low, want.low)
    # One signature per normalised text without CJK ("" and " ", "Hello, World!" and
    # "hello world", "abc def" twice); none kept for texts with CJK characters.
    assert len(reusing.slot_of) == len(pool) - 3 - 3
    assert len(tiny.slot_of) == 7


def test_secret_scans_find_what_their_slower_forms_find():
    """scrub_secrets returns early when its one scan finds nothing: that scan must find
    every text in which the joint scan or the keyword scan finds something; and the
    keywords present are those a test per keyword finds."""
    from llmtk.text import secrets

    joints = ['"AKIA12" + "34"', "'ab' 'cd'", '"ab" . "cd"', '"ab" .. "cd"', '"ab" & "cd"',
              '"ab"\n  "cd"', '"ab" +\\\n "cd"', "x = 'a=' + 'b'"]
    others = ["plain prose", '"Hello " + "world"', "'a' b 'c'", '"ab", "cd"', "", "it's 'x'"]
    texts = [f"see {k} here" for k in secrets._keywords(None)] + joints + others
    for only in (None, frozenset({"PASSWORD"}), frozenset({"AWS_KEY", "JWT"})):
        for text in texts:
            found = (secrets._JOINT.search(text) is not None
                     or secrets._any_keyword(only).search(text) is not None)
            assert (secrets._anything(only).search(text) is not None) == found, (only, text)
    assert all(secrets._JOINT.search(t) for t in joints)
    assert not any(secrets._anything(None).search(t) for t in others)
    # present_keywords (one scan, keywords tested at their anchors) = a test per keyword:
    # keywords inside keywords, at the very start, overlapping, in every rule selection.
    rng = random.Random(5)
    words = [*secrets._keywords(None), "a", "ss", "w", "_", " ", "PASSWORD=", "sk-", "hooks"]
    texts += ["assword=", "PWD=x", "pwd", "ASSWORD=ASSW", "xoxox", "sk_live_sk_test_"]
    texts += ["".join(rng.choice(words) for _ in range(rng.randrange(1, 6))) for _ in range(300)]
    for only in (None, frozenset({"PASSWORD"}), frozenset({"AWS_KEY", "JWT"})):
        for text in texts:
            want = {k for k in secrets._keywords(only) if k in text}
            assert secrets.present_keywords(text, only) == want, (only, text)


def test_control_characters_found_as_the_regex_finds_them():
    from llmtk.inspect import checks

    texts = [chr(c) for c in range(0x200)] + [f"a{chr(c)}b\n\tc\r" for c in range(0x100)] + [
        "", "plain\ttext\r\n", "caf\u00e9\x07", "\ud800 lone surrogate", "x" * 50 + "\x1f"]
    for t in texts:
        assert checks.has_control(t) == (checks._CONTROL.search(t) is not None), repr(t)


def test_distinct_sketch_is_exact_below_k_and_merges_like_one_pass():
    import numpy as np

    from llmtk.inspect.sketch import Distinct

    rng = np.random.default_rng(0)
    keys = rng.integers(1, 2**64, size=5000, dtype=np.uint64)  # uniform, as xxh3 keys are
    keys = np.concatenate([keys, keys[:1000]])  # 5,000 distinct among 6,000
    small, one, a, b = Distinct(10**4), Distinct(256), Distinct(256), Distinct(256)
    for s in range(0, len(keys), 500):
        small.add(keys[s:s + 500])
        one.add(keys[s:s + 500])
        (a if s < 3000 else b).add(keys[s:s + 500])
    a.merge(b)
    assert small.exact and small.count() == 5000
    assert not one.exact and np.array_equal(a.kept, one.kept) and a.count() == one.count()
    assert one.count() == pytest.approx(5000, rel=0.2)  # standard error 1/sqrt(254) = 6%


def test_several_scripts_is_more_than_one_script():
    from llmtk.inspect import checks

    latin, cyrillic, greek, han = "word " * 12, "слово " * 12, "λέξη " * 12, "漢字" * 6
    texts = ["", "plain ascii " * 20, "café naïve Straße " * 5, latin + cyrillic,
             latin + "слово", cyrillic + greek, han + latin, han + "ab", cyrillic,
             "x" * 9 + "й" * 10, "x" * 10 + "й" * 10]
    got = [checks.several_scripts(t) for t in texts]
    assert got == [len(checks.scripts(t)) > 1 for t in texts]
    assert got == [False, False, False, True, False, True, True, False, False, False, True]


def test_quality_and_languages_agree_with_clean(data):
    """--quality: the share each default clean rule would drop, as `clean --dry-run` counts
    it; and the languages as clean counts them."""
    stats = data["tmp"] / "clean.stats.json"
    llmtk("clean", *data["files"], "--dry-run", "--stats", stats, "-q", "-o",
          data["tmp"] / "cleaned.jsonl", check=True)
    counts = json.loads(stats.read_text())["counts"]
    r = llmtk("inspect", *data["files"], "--quality", "--json", "-q", check=True)
    res = json.loads(r.stdout)
    n = res["documents"]
    would = {k.removeprefix("would_drop."): v / n for k, v in counts.items()
             if k.startswith("would_drop.")}
    assert would and res["quality"]["would_drop"] == pytest.approx(would, abs=1e-6)
    assert res["quality"]["would_keep"] == pytest.approx(1 - sum(would.values()), abs=1e-6)
    langs = {k.removeprefix("lang."): v / n for k, v in counts.items() if k.startswith("lang.")}
    assert res["languages"] == pytest.approx(langs, abs=1e-6)


def test_source_values_and_samples(data):
    from llmtk.inspect.scan import source_value

    assert source_value({"url": "https://www.Example.com:8080/a?b"}, "url") == "example.com"
    assert source_value({"site": "http://user@docs.python.org/3/"}, "site") == "docs.python.org"
    assert source_value({}, "source") == "(none)"
    assert source_value({"source": ["a", 1]}, "source") == '["a",1]'
    first = json.loads(llmtk("inspect", *data["files"], "--sample", "100", "--json", "-q",
                             check=True).stdout)
    assert first["documents"] == 100
    half = json.loads(llmtk("inspect", *data["files"], "--sample", "0.5", "--by", "lang",
                            "--json", "-q", check=True).stdout)
    assert abs(half["documents"] - data["result"]["documents"] / 2) < 40
    assert set(half["sources"]) == set(half["languages"])  # no lang field: detected ones


def test_web_archives_count_by_host(tmp_path):
    """A WARC goes through the same reader as for every data tool: responses become
    documents with their url, counted by host with --by url."""
    from tests.warc_fixtures import members, page, record

    body = "<p>" + " ".join(_words(random.Random(1), EN, 120)) + "</p>"
    other = "<p>" + " ".join(_words(random.Random(2), EN, 120)) + "</p>"
    recs = [record("response", "https://www.example.org/a", page("A", body).encode()),
            record("response", "https://example.org/b", page("A", body).encode()),
            record("response", "http://news.example.com/c", page("C", other).encode())]
    warc = tmp_path / "crawl.warc.gz"
    warc.write_bytes(members(recs)[0])
    res = json.loads(llmtk("inspect", warc, "--by", "url", "--json", "-q", check=True).stdout)
    assert res["documents"] == 3
    assert res["sources"] == {"example.org": pytest.approx(2 / 3, abs=1e-6),
                              "news.example.com": pytest.approx(1 / 3, abs=1e-6)}
    assert res["exact_duplicate_fraction"] == pytest.approx(1 / 3, abs=1e-6)
    # Web pages by design, not HTML left in text: read by their main text, as clean does.
    assert res["web_pages"] == 3 and res["html_documents"] == 0
    assert res["languages"] == {"en": 1.0}
