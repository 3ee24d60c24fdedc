"""`llmtk clean` end to end, as a real process: reasons, rejects, options, config, workers."""

import hashlib
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.util import ROOT, llmtk, shell

DATA = Path(__file__).parent / "data" / "clean"
ARTICLES_FILE = DATA / "articles.jsonl"
ARTICLES = [json.loads(x) for x in ARTICLES_FILE.read_text(encoding="utf-8").splitlines()]


def jsonl(records) -> bytes:
    return b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in records)


def parse(out: bytes) -> list[dict]:
    return [json.loads(x) for x in out.decode().splitlines()]


def mixed_corpus(n: int, seed: int = 0) -> list[dict]:
    """Articles (kept), junk of several kinds (dropped), some with PII and escapes."""
    rng = random.Random(seed)
    junk = [
        "Buy now!",
        "click here click here click here click here click here click here " * 5,
        "\n".join(f"- item {i}" for i in range(60)),
        "Lorem ipsum dolor sit amet. " + ARTICLES[0]["text"],
        "1 2 3 4 5 6 7 8 9 " * 20,
    ]
    out = []
    for i in range(n):
        if rng.random() < 0.5:
            art = rng.choice(ARTICLES)
            text = art["text"]
            if rng.random() < 0.3:
                pii = f"Mail {i}@example.com or \x1b[1m13800138000\x1b[0m."
                text = text.replace("\n\n", f"\n\n{pii}\n\n", 1)
            out.append({"id": i, "text": text, "meta": {"k": i}})
        else:
            out.append({"id": i, "text": rng.choice(junk)})
    return out


def test_articles_in_every_language_are_kept_unchanged():
    r = llmtk("clean", ARTICLES_FILE, "-q")
    assert r.returncode == 0, r.stderr
    assert r.stdout == ARTICLES_FILE.read_bytes()  # nothing to fix: bytes pass through


def test_drop_reasons_in_rejects_and_stats(tmp_path):
    records = [
        {"id": "short", "text": "Too short to be a document."},
        {"id": "lorem", "text": ARTICLES[0]["text"] + "\nLorem ipsum dolor sit amet."},
        {"id": "ok", "text": ARTICLES[0]["text"]},
    ]
    rej, stats = tmp_path / "rej.jsonl", tmp_path / "stats.json"
    r = llmtk("clean", "--rejects", rej, "--stats", stats, "-q", input=jsonl(records))
    assert r.returncode == 0, r.stderr
    assert [d["id"] for d in parse(r.stdout)] == ["ok"]
    reasons = {d["id"]: d["llmtk"]["reason"] for d in parse(rej.read_bytes())}
    assert reasons == {"short": "gopher.short_doc", "lorem": "c4.lorem_ipsum"}
    r = llmtk("clean", "--rejects", rej, "--annotate", "-q", input=jsonl(records[:1]))
    (rejected,) = parse(rej.read_bytes())
    # "Too short to be a document." has 6 words (the full stop is not one)
    assert rejected["llmtk"]["lang"] == "en" and rejected["llmtk"]["gopher_quality"]["words"] == 6
    s = json.loads(stats.read_text())
    assert s["dropped"] == {"c4.lorem_ipsum": 1, "gopher.short_doc": 1}
    assert s["records_in"] == 3 and s["records_out"] == 1


def test_text_field_option():
    records = [{"body": ARTICLES[0]["text"] + "\nMail anna@example.com now.", "text": "x"}]
    r = llmtk("clean", "--text-field", "body", "-q", input=jsonl(records))
    (doc,) = parse(r.stdout)
    assert doc["text"] == "x" and "<EMAIL>" in doc["body"]


def test_mixed_script_chinese_is_kept_as_zh():
    text = "训练大模型时 Loss 曲线是判断模型收敛情况的重要依据"
    r = llmtk("clean", "--lang", "zh", "--filters", "none", "--annotate", "-q",
              input=jsonl([{"text": text}]))
    assert r.returncode == 0, r.stderr
    (doc,) = parse(r.stdout)
    assert doc["llmtk"]["lang"] == "zh"


def test_lang_filter_and_min_score(tmp_path):
    rej = tmp_path / "rej.jsonl"
    r = llmtk("clean", ARTICLES_FILE, "--lang", "en,zh", "--rejects", rej, "-q")
    assert [d["lang"] for d in parse(r.stdout)] == ["en", "zh"]
    assert {d["llmtk"]["reason"] for d in parse(rej.read_bytes())} == {"lang.unwanted"}
    r = llmtk("clean", ARTICLES_FILE, "--lang", "en", "--min-lang-score", "1.0", "-q",
              "--rejects", rej)
    assert parse(r.stdout) == []
    rejected = parse(rej.read_bytes())
    assert "lang.low_score" in {d["llmtk"]["reason"] for d in rejected}
    # without --annotate too, a reject says what language ID found (issue 34)
    low = [d for d in rejected if d["llmtk"]["reason"] == "lang.low_score"]
    assert all(d["llmtk"]["lang"] == "en" and 0 < d["llmtk"]["lang_score"] < 1.0 for d in low)
    unwanted = [d for d in rejected if d["llmtk"]["reason"] == "lang.unwanted"]
    assert all(d["llmtk"]["lang"] == d["lang"] != "en" for d in unwanted)
    assert {d["lang"] for d in rejected} == {d["lang"] for d in ARTICLES}


def test_pii_scrubbed_and_counted(tmp_path):
    text = ARTICLES[0]["text"] + "\nWrite to anna@example.com or call +1 415-555-0132 today."
    stats = tmp_path / "s.json"
    r = llmtk("clean", "--stats", stats, "-q", input=jsonl([{"text": text}]))
    (doc,) = parse(r.stdout)
    assert "Write to <EMAIL> or call <PHONE> today." in doc["text"]
    counts = json.loads(stats.read_text())["counts"]
    assert counts["pii.EMAIL"] == 1 and counts["pii.PHONE"] == 1
    r = llmtk("clean", "--no-pii", "-q", input=jsonl([{"text": text}]))
    assert "anna@example.com" in parse(r.stdout)[0]["text"]


@pytest.mark.parametrize("path", [("--filters", "none", "--no-langid"), ("--profile", "code")])
def test_pii_leaves_technical_text_and_code_alone_and_counts_each_kind(tmp_path, path):
    """Issue 34: both roads (prose and --profile code) leave never-personal constructs of
    technical text and code as they are, still replace real personal data, and count what
    they replaced per kind in --stats."""
    from tests.test_clean_text import NEVER_PERSONAL

    keep = [{"text": f"In the manual, {c} is what it means here."} for c in NEVER_PERSONAL]
    keep.append({"text": "namespace a { A::B x; } // see section 3.3.2.1., zlib 1.2.0.1"})
    # words enough around the numbers that the code rules keep it (code.numeric_table)
    pii = ("Write to the maintainer at li.wei@qq.com or call her office on +49 30 12345678\n"
           "or the other one on +1 (415) 555-2671; the card on file is\n"
           "4111 1111 1111 1111, her resident ID is 11010519491231002X,\nand she logs in "
           "from 93.184.216.34 and\n2a00:1450:4001:811::200e at home.")
    stats = tmp_path / "s.json"
    r = llmtk("clean", "-", *path, "-q", "--stats", stats, input=jsonl([*keep, {"text": pii}]),
              in_process=True)
    assert r.returncode == 0, r.stderr
    out = parse(r.stdout)
    assert [d["text"] for d in out[:-1]] == [d["text"] for d in keep]
    assert out[-1]["text"] == (
        "Write to the maintainer at <EMAIL> or call her office on <PHONE>\nor the other one "
        "on <PHONE>; the card on file is\n<CARD>, her resident ID is <ID_NUMBER>,\nand she "
        "logs in from <IP> and\n<IP> at home.")
    counts = json.loads(stats.read_text())["counts"]
    assert {k: v for k, v in counts.items() if k.startswith("pii.")} == {
        "pii.EMAIL": 1, "pii.PHONE": 2, "pii.CARD": 1, "pii.ID_NUMBER": 1, "pii.IP": 2}


def test_ansi_and_mojibake_cleaned():
    text = ARTICLES[0]["text"].replace("old town", "\x1b[32mold\x1b[0m cafÃ© town", 1)
    r = llmtk("clean", "-q", input=jsonl([{"text": text}]))
    (doc,) = parse(r.stdout)
    assert "old café town" in doc["text"] and "\x1b" not in doc["text"]


def test_dry_run_keeps_everything_and_annotates_reasons(tmp_path):
    records = [{"id": 1, "text": "Too short."}, {"id": 2, "text": ARTICLES[0]["text"]}]
    stats = tmp_path / "s.json"
    r = llmtk("clean", "--dry-run", "--annotate", "--stats", stats, "-q", input=jsonl(records))
    docs = parse(r.stdout)
    assert [d["id"] for d in docs] == [1, 2]
    assert docs[0]["text"] == "Too short."
    assert docs[0]["llmtk"]["reason"] == "gopher.short_doc"
    assert "reason" not in docs[1]["llmtk"] and docs[1]["llmtk"]["lang"] == "en"
    assert docs[1]["llmtk"]["gopher_quality"]["stop_words"] >= 2
    s = json.loads(stats.read_text())
    assert s["dropped"] == {} and s["counts"]["would_drop.gopher.short_doc"] == 1


def test_workers_give_identical_bytes(tmp_path):
    data = tmp_path / "in.jsonl"
    data.write_bytes(jsonl(mixed_corpus(700)))
    outs = []
    for w in ("1", "2", "3"):
        rej = tmp_path / f"rej{w}.jsonl"
        r = llmtk("clean", data, "--workers", w, "--rejects", rej, "-q")
        assert r.returncode == 0, r.stderr
        outs.append((hashlib.sha256(r.stdout).hexdigest(), rej.read_bytes()))
    assert outs[0] == outs[1] == outs[2]
    kept = parse(llmtk("clean", data, "-q").stdout)
    assert 0 < len(kept) < 700
    assert all("\x1b" not in d["text"] and "@example.com" not in d["text"] for d in kept)


def test_print_config_round_trips(tmp_path):
    r = llmtk("clean", "--print-config")
    assert r.returncode == 0 and b"[gopher_quality]" in r.stdout
    assert b"min_doc_words = 50" in r.stdout and b"dup_line_frac = 0.3" in r.stdout
    cfg = tmp_path / "c.toml"
    cfg.write_bytes(r.stdout.replace(b"min_doc_words = 50", b"min_doc_words = 5"))
    r2 = llmtk("clean", "--config", cfg, "--print-config")
    assert b"min_doc_words = 5\n" in r2.stdout
    r3 = llmtk("clean", "--config", cfg, "--filters", "gopher_quality", "--no-langid", "-q",
               "--rejects", tmp_path / "rej.jsonl",
               input=jsonl([{"text": "The cat and the dog sat with me."}]))
    assert len(parse(r3.stdout)) == 1  # 9 words pass min_doc_words = 5


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--filters", "gopher,c4"], b"--filters"),
        (["--unicode", "nfd"], b"--unicode"),
        (["--min-lang-score", "2"], b"--min-lang-score"),
        (["--lang", "en", "--no-langid"], b"--lang"),
        (["--quality-model", "/nonexistent.bin"], b"--quality-model"),
    ],
)
def test_bad_options_exit_2_with_one_line(args, needle):
    r = llmtk("clean", *args, input=b"")
    assert r.returncode == 2
    assert needle in r.stderr and b"Traceback" not in r.stderr


def test_an_unknown_language_code_is_a_usage_error_with_the_code_meant(tmp_path):
    # Nothing is read: the input would fail with exit 1.
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"{not json\n")
    r = llmtk("clean", bad, "--lang", "de,english,zh_Hant,xx")
    assert r.returncode == 2 and r.stdout == b""
    assert r.stderr.decode().splitlines() == [
        "llmtk: error: --lang: unknown language code(s) english (did you mean en?), xx, "
        "zh_Hant (did you mean zh?); the language ID model's codes (ISO 639, e.g. en,de,zh) are "
        "listed in docs/clean.md"]


def test_bad_config_file_exit_2(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[gopher_quality]\nmin_doc_wrds = 3\n")
    r = llmtk("clean", "--config", cfg, input=b"")
    assert r.returncode == 2 and b"gopher_quality.min_doc_wrds" in r.stderr


def test_bad_input_line_reports_file_and_line(tmp_path):
    data = tmp_path / "bad.jsonl"
    data.write_bytes(jsonl(ARTICLES[:1]) + b"{not json\n")
    r = llmtk("clean", data)
    assert r.returncode == 1 and f"{data}:2".encode() in r.stderr


@pytest.mark.integration
def test_head_closes_pipe_quietly():
    r = shell(f"cat {ARTICLES_FILE} {ARTICLES_FILE} | llmtk clean -q | head -1")
    assert r.returncode == 0 and r.stdout.count(b"\n") == 1 and r.stderr == b""


def test_help_does_not_import_heavy_modules():
    code = ("import sys, llmtk.cli; from typer.main import get_command; "
            "get_command(llmtk.cli.app); "
            "print(sorted(m for m in ('fasttext', 'fasttext_new', 'ftfy', 'numpy', 'opencc') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == b"[]"


def test_train_quality_then_filter(tmp_path):
    rng = random.Random(3)
    good_words = "the river town museum history water farmers bridge herons council".split()
    bad_words = "buy cheap free click casino winner prize offer discount now".split()

    def docs(words, n):
        return [{"text": " ".join(rng.choice(words) for _ in range(30))} for _ in range(n)]

    pos, neg = tmp_path / "pos.jsonl", tmp_path / "neg.jsonl"
    pos.write_bytes(jsonl(docs(good_words, 150)))
    neg.write_bytes(jsonl(docs(bad_words, 150)))
    model = tmp_path / "q.bin"
    r = llmtk("clean", "train-quality", "--positive", pos, "--negative", neg, "-o", model,
              "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["test"] == 30 and report["precision"] >= 0.9 and report["recall"] >= 0.9
    assert model.exists()

    test = docs(good_words, 5) + docs(bad_words, 5)
    r = llmtk("clean", "--quality-model", model, "--min-quality", "0.5", "--filters", "none",
              "--no-langid", "--annotate", "-q", input=jsonl(test))
    kept = parse(r.stdout)
    assert len(kept) == 5 and all(d["llmtk"]["quality"] >= 0.5 for d in kept)
    assert all(set(d["text"].split()) <= set(good_words) for d in kept)
    # the model is a standard fastText file: the C++ predict-only package reads it too
    import fasttext

    assert fasttext.load_model(str(model)).predict("cheap casino prize")[0][0] == "__label__other"


def test_pii_scrubs_what_is_written_even_with_duplicate_text_keys(tmp_path):
    # Two "text" keys: JSON parsers keep the last; the first must not pass through unscrubbed.
    line = (b'{"id": "x", "text": "Mail me at jane.doe@example.com today, friend.", '
            b'"text": "Write to the office for the full report on this topic, please."}\n')
    r = llmtk("clean", "--pii", "--no-langid", "--filters", "none", "-q", input=line)
    assert r.returncode == 0, r.stderr
    (rec,) = parse(r.stdout)
    assert b"@example" not in r.stdout and r.stdout.count(b'"text"') == 1
    assert rec["id"] == "x" and rec["text"].startswith("Write to ")


def test_repeated_key_check_reads_escaped_keys_and_ignores_nested_ones():
    from llmtk.io.record import repeats_key

    assert repeats_key(b'{"text": "a", "text": "b"}', "text")
    assert repeats_key(b'{"te\\u0078t": "a", "text": "b"}', "text")  # an escaped spelling
    assert not repeats_key(b'{"text": "a", "meta": {"text": "b"}}', "text")  # nested
    assert not repeats_key(b'{"text": "say \\"text\\" and \\u00e9"}', "text")
    assert not repeats_key(b'{"type": "text", "text": "a"}', "text")  # a value, once a key


def test_file_shards_concatenate_to_the_single_run_and_stats_merge(tmp_path):
    d = tmp_path / "crawl"
    d.mkdir()
    corpus = mixed_corpus(90, seed=3)
    for f, (a, b) in enumerate([(0, 10), (10, 40), (40, 45), (45, 90)]):
        (d / f"c{f}.jsonl").write_bytes(jsonl(corpus[a:b]))
    args = ["clean", d, "-q"]
    single = llmtk(*args, "--rejects", tmp_path / "rej.jsonl", "--stats", tmp_path / "s.json",
                   check=True)
    out, rej, stats = b"", b"", []
    for k in range(3):
        st = tmp_path / f"s{k}.json"
        llmtk(*args, "--shard", f"{k}/3", "-o", tmp_path / f"o{k}.jsonl", "--rejects",
              tmp_path / f"r{k}.jsonl", "--stats", st, check=True)
        out += (tmp_path / f"o{k}.jsonl").read_bytes()
        rej += (tmp_path / f"r{k}.jsonl").read_bytes()
        stats.append(st)
        assert (tmp_path / f"o{k}.jsonl.done").exists()
    assert out == single.stdout and rej == (tmp_path / "rej.jsonl").read_bytes()
    merged = json.loads(llmtk("stats", "merge", *stats, check=True).stdout)
    whole = json.loads((tmp_path / "s.json").read_text())
    merged.pop("seconds"), whole.pop("seconds")
    assert merged == whole


# ------------------------------------------------------------------ the stages, one list


def test_a_new_stage_joins_clean_by_the_list_alone(tmp_path):
    """A stage written in its own module and added to PIPELINE gets its TOML section, its
    options with their defaults, its validation, its place in the run and its reasons."""
    module = tmp_path / "shout.py"
    module.write_text('''
from dataclasses import dataclass

from llmtk.clean.stages.base import Flag, Stage
from llmtk.errors import ConfigError


@dataclass(frozen=True)
class Shout:
    word: str = ""  # empty: stage off
    times: int = 1


class ShoutStage(Stage):
    name = "shout"
    config = Shout
    help = "keep documents that hold a word often enough"
    reasons = ("shout.quiet",)
    flags = (Flag("word", ("--shout-word",), "A word kept documents must hold."),
             Flag("times", ("--shout-times",), "How often."))

    @classmethod
    def validate(cls, cfg):
        if cfg.times < 1:
            raise ConfigError("shout.times", "expected 1 or more")

    @classmethod
    def on(cls, cfg, whole):
        return bool(cfg.word)

    def check(self, work):
        return None if work.text.count(self.cfg.word) >= self.cfg.times else "shout.quiet"
''')
    main = ("import sys; sys.path.insert(0, sys.argv.pop(1))\n"
            "import llmtk.clean.stages as s, shout\n"
            "s.PIPELINE = (*s.PIPELINE[:-2], shout.ShoutStage, *s.PIPELINE[-2:])\n"
            "from llmtk.cli import main; sys.argv[0] = 'llmtk'; main()\n")

    def run(*args, input=b""):
        return subprocess.run([sys.executable, "-c", main, str(tmp_path), "clean", *args],
                              input=input, cwd=ROOT, capture_output=True, env={
                                  **__import__("os").environ, "COLUMNS": "200"})

    help = " ".join(run("--help").stdout.decode().split())
    assert "--shout-times N How often. [default: 1]" in help
    assert "[shout]\nword = \"\"\ntimes = 1\n" in run("--print-config").stdout.decode()
    bad = run("--shout-word", "cat", "--shout-times", "0")
    assert bad.returncode == 2 and bad.stderr.decode().strip() == \
        "llmtk: error: --shout-times: expected 1 or more"
    docs = [{"text": a["text"] + (" cat cat" if i % 2 else "")} for i, a in
            enumerate(ARTICLES[:4])]
    stats = tmp_path / "stats.json"
    r = run("--shout-word", "cat", "--shout-times", "2", "--no-langid", "--no-pii",
            "--filters", "none", "--stats", stats, "-q", input=jsonl(docs))
    assert r.returncode == 0, r.stderr
    assert [d["text"] for d in parse(r.stdout)] == [docs[1]["text"], docs[3]["text"]]
    assert json.loads(stats.read_text())["dropped"] == {"shout.quiet": 2}


def test_every_reason_clean_gives_is_a_stages_and_documented(tmp_path):
    """The reasons each stage declares are the ones it gives, and docs/clean.md names them
    (N and LANG stand for a number and a language)."""
    import re

    from llmtk.clean.stages import PIPELINE

    declared = {r: s.name for s in PIPELINE for r in s.reasons}
    patterns = [re.compile(re.escape(r).replace("LANG", "[a-z]+").replace("N", r"\d+"))
                for r in declared]
    docs_page = (ROOT / "docs" / "clean.md").read_text()
    undocumented = [p.pattern for p in patterns if not p.search(docs_page)]
    assert not undocumented, undocumented
    stats = tmp_path / "stats.json"
    records = mixed_corpus(200) + [{"text": "<html><body><nav>menu</nav></body></html>"},
                                   {"text": " \n", "path": "a.py"}, {"text": "\x1b[0m"}]
    for profile in ("web", "auto"):
        r = llmtk("clean", "--profile", profile, "--lang", "en", "--stats", stats, "-q",
                  input=jsonl(records))
        assert r.returncode == 0, r.stderr
        given = json.loads(stats.read_text())["dropped"]
        assert len(given) >= 4
        for reason in given:
            assert any(p.fullmatch(reason) for p in patterns), reason
