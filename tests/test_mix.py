"""`llmtk mix`: shares, epochs, subsets, determinism, accounting, shards."""

import json
from collections import Counter

import orjson
import pytest

from llmtk.mix.plan import Source, natural_budget, parse_source, plan
from tests.util import llmtk


def write(path, prefix, n, size):
    rows = [{"id": f"{prefix}{i}", "text": f"{prefix}{i} " + "x" * (size + i % 5)}
            for i in range(n)]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


@pytest.fixture
def sources(tmp_path):
    big = write(tmp_path / "big.jsonl", "b", 400, 95)  # ~40k tokens
    small = write(tmp_path / "small.jsonl", "s", 30, 95)  # ~3k tokens
    return big, small


def tokens_of(line: bytes) -> int:
    return len(json.loads(line)["text"].encode()) + 1


def test_budget_split_by_weight_with_epochs_and_subsets(tmp_path, sources):
    big, small = sources
    report = tmp_path / "r.json"
    r = llmtk("mix", "-s", f"big={big}:0.75", "-s", f"small={small}:0.25", "--tokens", "20000",
              "--report", report, "--annotate", "-q")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    rep = json.loads(report.read_text())
    for name, share in (("big", 0.75), ("small", 0.25)):
        emitted = sum(len(x["text"].encode()) + 1 for x in rows if x["llmtk"]["source"] == name)
        assert rep["sources"][name]["emitted_tokens"] == emitted
        assert 0 <= emitted - 20000 * share < 110  # overshoot is less than one document
    # small: 5000 tokens from ~3.1k -> one full epoch of every doc, then a subset
    small_ids = Counter(x["id"] for x in rows if x["llmtk"]["source"] == "small")
    assert set(small_ids) == {f"s{i}" for i in range(30)} and max(small_ids.values()) == 2
    assert rep["sources"]["small"]["epochs"] == pytest.approx(5000 / rep["sources"]["small"]
                                                              ["tokens"], rel=1e-3)
    # big: 15000 of ~40k tokens -> a subset, every doc at most once, in file order
    big_ids = [x["id"] for x in rows if x["llmtk"]["source"] == "big"]
    assert len(big_ids) == len(set(big_ids)) < 400
    assert big_ids == sorted(big_ids, key=lambda s: int(s[1:]))
    # interleaved, not one source after the other
    first_half = [x["llmtk"]["source"] for x in rows[: len(rows) // 2]]
    assert 0.15 < first_half.count("small") / len(first_half) < 0.35


def test_accounting_adds_up(tmp_path, sources):
    big, small = sources
    stats = tmp_path / "s.json"
    rejects = tmp_path / "rej.jsonl"
    llmtk("mix", "-s", f"big={big}:1", "-s", f"small={small}:1", "--tokens", "8000",
          "--stats", stats, "--rejects", rejects, "-q", check=True)
    s = json.loads(stats.read_text())
    repeated = s["counts"].get("mix.repeated", 0)
    assert s["records_in"] == 430
    assert s["records_in"] == s["records_out"] - repeated + sum(s["dropped"].values())
    dropped = [json.loads(x) for x in rejects.read_bytes().splitlines()]
    assert len(dropped) == s["dropped"]["mix.not_sampled"]
    assert all(d["llmtk"] == {"reason": "mix.not_sampled", "source": "big"} for d in dropped)


def test_deterministic_by_seed(sources):
    big, small = sources
    args = ["mix", "-s", f"big={big}", "-s", f"small={small}", "--tokens", "6000", "-q"]
    a, b = llmtk(*args).stdout, llmtk(*args).stdout
    c = llmtk(*args, "--seed", "7").stdout
    assert a == b and a != c


def test_default_budget_uses_the_scarcest_source_once(sources):
    big, small = sources
    r = llmtk("mix", "-s", f"big={big}:0.5", "-s", f"small={small}:0.5", "-q", check=True)
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert sorted(x["id"] for x in rows if x["id"].startswith("s")) == sorted(
        f"s{i}" for i in range(30))


def test_shards_union_is_the_whole_mix(sources):
    big, small = sources
    args = ["mix", "-s", f"big={big}:2", "-s", f"small={small}:1", "--tokens", "12000", "-q"]
    whole = Counter(llmtk(*args, check=True).stdout.splitlines())
    parts = Counter()
    for k in range(3):
        parts.update(llmtk(*args, "--shard", f"{k}/3", check=True).stdout.splitlines())
    assert parts == whole


def test_too_small_source_is_refused_and_nothing_written(tmp_path, sources):
    big, small = sources
    out = tmp_path / "o.jsonl"
    r = llmtk("mix", "-s", f"big={big}:1", "-s", f"small={small}:1", "--tokens", "1M", "-o", out)
    assert r.returncode == 2 and b"--max-epochs" in r.stderr and not out.exists()
    assert llmtk("mix", "-s", "a=-").returncode == 2
    assert llmtk("mix", "-s", "nameonly").returncode == 2
    assert llmtk("mix", "-s", f"a={big}", "-s", f"a={small}").returncode == 2


def test_parse_source_and_plan_units(tmp_path):
    s = parse_source("web=/data/crawl:2024/*.jsonl.zst:0.7")
    assert (s.name, s.spec, s.weight) == ("web", "/data/crawl:2024/*.jsonl.zst", 0.7)
    assert parse_source("code=c.jsonl").weight == 1.0
    a, b = Source("a", "a", 3.0, doc_tokens=[10] * 30), Source("b", "b", 1.0, doc_tokens=[10] * 5)
    assert natural_budget([a, b]) == 200  # b's 50 tokens are a quarter of the budget
    plan([a, b], 400, 4, seed=0)
    assert (a.full_epochs, b.full_epochs) == (1, 2)
    assert a.subset is None and b.subset is None  # whole epochs, nothing left over
    plan([a, b], 500, 4, seed=0)  # a: 375 tokens = 1 epoch + 75 -> 8 documents of 10
    assert a.full_epochs == 1 and sum(a.subset) == 8


def test_file_shards_with_saved_counts_equal_the_single_run(tmp_path):
    src = tmp_path / "web"
    src.mkdir()
    for f in range(5):
        write(src / f"w{f}.jsonl", f"w{f}-", 40 + 10 * f, 60 + f)
    small = write(tmp_path / "small.jsonl", "s", 30, 95)
    args = ["mix", "-s", f"web={src}:2", "-s", f"small={small}:1", "--tokens", "12000",
            "--annotate", "-q"]
    whole = llmtk(*args, "--stats", tmp_path / "whole.json", check=True).stdout
    counts = tmp_path / "counts"
    for k in range(3):  # the counting pass, sharded: each task counts only its own files
        llmtk(*args, "--counts", counts, "--count-only", "--shard", f"{k}/3", check=True)
    assert len(list(counts.iterdir())) == 6
    parts, stats = [], []
    for k in range(3):
        st = tmp_path / f"s{k}.json"
        r = llmtk(*args, "--counts", counts, "--shard", f"{k}/3", "--stats", st)
        assert r.returncode == 0, r.stderr
        parts += r.stdout.splitlines()
        stats.append(st)
    assert sorted(parts) == sorted(whole.splitlines())
    r = llmtk("stats", "merge", *stats, check=True)
    merged, single = json.loads(r.stdout), json.loads((tmp_path / "whole.json").read_text())
    for s in (merged, single):
        s.pop("seconds")
    assert merged == single


def test_saved_counts_are_reused_not_recomputed(tmp_path, sources):
    big, small = sources
    args = ["mix", "-s", f"big={big}:2", "-s", f"small={small}:1", "--tokens", "6000", "-q"]
    counts = tmp_path / "counts"
    first = llmtk(*args, "--counts", counts, check=True).stdout
    for f in counts.iterdir():  # doctored counts: proof that they are read, not recomputed
        f.write_bytes(bytes(len(f.read_bytes())))
    r = llmtk(*args, "--counts", counts)
    assert r.returncode == 2 and b"no documents" in r.stderr
    for f in counts.iterdir():
        f.unlink()
    assert llmtk(*args, "--counts", counts, check=True).stdout == first
