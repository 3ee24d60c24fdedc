"""`llmtk contam-check`: n-gram matches, per-item classes, drop/annotate, CJK, workers."""

import json

import orjson

from llmtk.contam.check import EvalIndex, build_items, classify, coverage
from tests.util import llmtk

Q1 = ("What is the capital of France and why did it become the centre of the kingdom "
      "in the middle ages")  # 19 words
Q2 = ("How many legs does a spider have according to the zoology textbook used in most "
      "schools today")  # 17 words
Q3 = "长江是亚洲最长的河流，全长约六千三百公里，流经中国十一个省级行政区，最后注入东海。"
EVAL = [{"id": "q1", "question": Q1, "answer": "Paris"},
        {"id": "q2", "question": Q2, "answer": "eight"},
        {"id": "q3", "question": Q3},
        {"id": "q4", "question": "too short to check"}]
TRAIN = [
    {"id": "d1", "text": "Quiz night! " + Q1.upper().replace(" THE ", " the ") + "? Paris."},
    {"id": "d2", "text": "Cooking pasta with tomatoes and basil makes a quick dinner for "
                         "friends and family members tonight."},
    {"id": "d3", "text": " ".join(Q2.split()[:13]) + " — and more."},  # 13 words: one n-gram
    {"id": "d4", "text": " ".join(Q2.split()[:12]) + " and nothing else."},  # 12: no match
    {"id": "d5", "text": "地理常识：" + Q3 + "这是课本上的内容。"},
]


def jsonl(rows):
    return b"".join(orjson.dumps(r) + b"\n" for r in rows)


def setup(tmp_path):
    ev, tr = tmp_path / "eval.jsonl", tmp_path / "train.jsonl"
    ev.write_bytes(jsonl(EVAL))
    tr.write_bytes(jsonl(TRAIN))
    return ev, tr


def test_report_and_exit_3_when_contamination_is_left_in(tmp_path):
    ev, tr = setup(tmp_path)
    report = tmp_path / "r.json"
    r = llmtk("contam-check", tr, "--eval", ev, "--eval-field", "question,answer",
              "--report", report, "-q")
    assert r.returncode == 3, r.stderr
    assert r.stdout == tr.read_bytes()  # passes through untouched
    rep = json.loads(report.read_text())
    items = {i["id"]: i for i in rep["items"]}
    assert rep["contaminated_docs"] == 3
    assert items["q1"]["class"] == "dirty" and items["q1"]["docs"] == ["d1"]
    assert items["q2"]["class"] == "partial" and items["q2"]["docs"] == ["d3"]
    assert items["q2"]["seen_ngrams"] == 1
    assert items["q3"]["class"] == "dirty" and items["q3"]["docs"] == ["d5"]
    assert items["q4"]["class"] == "too_short"
    assert rep["classes"] == {"dirty": 2, "partial": 1, "clean": 0, "too_short": 1}


def test_drop_sends_docs_to_rejects_with_eval_ids_and_exits_0(tmp_path):
    ev, tr = setup(tmp_path)
    rejects, stats = tmp_path / "rej.jsonl", tmp_path / "s.json"
    r = llmtk("contam-check", tr, "--eval", ev, "--eval-field", "question,answer", "--drop",
              "--rejects", rejects, "--stats", stats, "-q")
    assert r.returncode == 0, r.stderr
    kept = [json.loads(x)["id"] for x in r.stdout.splitlines()]
    assert kept == ["d2", "d4"]
    rej = {json.loads(x)["id"]: json.loads(x)["llmtk"] for x in rejects.read_bytes().splitlines()}
    assert rej["d1"] == {"reason": "contam.ngram", "eval_ids": ["q1"]}
    assert set(rej) == {"d1", "d3", "d5"}
    s = json.loads(stats.read_text())
    assert s["records_in"] == 5 and s["records_out"] == 2 and s["dropped"] == {"contam.ngram": 3}


def test_annotate_and_report_only(tmp_path):
    ev, tr = setup(tmp_path)
    r = llmtk("contam-check", tr, "--eval", ev, "--eval-field", "question", "--annotate", "-q")
    marks = [json.loads(x)["llmtk"]["contaminated"] for x in r.stdout.splitlines()]
    assert marks == [True, False, True, False, True]
    r = llmtk("contam-check", tr, "--eval", ev, "--eval-field", "question", "--report-only", "-q")
    assert r.returncode == 3 and r.stdout == b""


def test_workers_give_identical_output_and_report(tmp_path):
    ev, tr = setup(tmp_path)
    tr.write_bytes(jsonl(TRAIN * 60))
    outs = []
    for w in ("1", "2"):
        rep = tmp_path / f"r{w}.json"
        r = llmtk("contam-check", tr, "--eval", ev, "--eval-field", "question", "--annotate",
                  "--workers", w, "--report", rep, "-q")
        outs.append((r.stdout, rep.read_bytes()))
    assert outs[0] == outs[1]


def test_shorter_n_and_paLM_style_threshold():
    items = build_items([("a", "f", Q2)], 8)
    index = EvalIndex(items, 8)
    matched = index.match(" ".join(Q2.split()[:12]))  # 12 words hold five 8-grams
    assert len(matched) == 5
    index.record(matched, "doc")
    cov = coverage(items[0], 8)
    assert abs(cov - 12 / 17) < 1e-9
    assert classify(cov, True, dirty=0.7) == "dirty" and classify(cov, True) == "partial"


def test_bad_usage(tmp_path):
    ev, tr = setup(tmp_path)
    assert llmtk("contam-check", tr).returncode == 2  # --eval is required
    assert llmtk("contam-check", tr, "--eval", ev, "--drop", "--report-only").returncode == 2
    assert llmtk("contam-check", tr, "--eval", tmp_path / "none.jsonl").returncode == 2
    r = llmtk("contam-check", tr, "--eval", ev, "--eval-field", "nope")
    assert r.returncode == 1 and b"eval.jsonl:1: none of the fields nope" in r.stderr


def test_mask_replaces_only_the_matched_words(tmp_path):
    ev, tr = setup(tmp_path)
    stats = tmp_path / "s.json"
    r = llmtk("contam-check", tr, "--eval", ev, "--eval-field", "question", "--mask", "<EVAL>",
              "--stats", stats, "-q")
    assert r.returncode == 0, r.stderr
    out = {d["id"]: d["text"] for d in map(json.loads, r.stdout.splitlines())}
    assert out["d1"] == "Quiz night! <EVAL>? Paris."
    assert out["d3"] == "<EVAL> — and more."
    assert out["d5"] == "地理常识：<EVAL>。这是课本上的内容。"
    assert out["d2"] == TRAIN[1]["text"] and out["d4"] == TRAIN[3]["text"]
    s = json.loads(stats.read_text())
    assert s["records_out"] == 5 and s["counts"]["contam.masked_runs"] == 3
    # the masked stream is clean now
    again = tmp_path / "masked.jsonl"
    again.write_bytes(r.stdout)
    assert llmtk("contam-check", again, "--eval", ev, "--eval-field", "question",
                 "-q").returncode == 0
    assert llmtk("contam-check", tr, "--eval", ev, "--mask", "X", "--drop").returncode == 2


def test_report_only_with_o_is_refused_and_leaves_the_file(tmp_path):
    ev, train = setup(tmp_path)
    keep = tmp_path / "keep.jsonl"
    keep.write_bytes(b'{"text": "precious"}\n')
    r = llmtk("contam-check", train, "-e", ev, "--report-only", "-o", keep)
    assert r.returncode == 2 and b"--report-only" in r.stderr
    assert keep.read_bytes() == b'{"text": "precious"}\n'


def test_eval_set_that_is_also_the_output_is_refused_before_reading(tmp_path):
    x = tmp_path / "x.jsonl"
    x.write_bytes(jsonl(TRAIN))
    before = x.read_bytes()
    r = llmtk("contam-check", "-e", x, x, "--drop", "-o", x)
    assert r.returncode == 2 and b"is also an input" in r.stderr
    assert x.read_bytes() == before


def test_file_shards_and_merged_report_equal_the_single_run(tmp_path):
    ev = tmp_path / "eval.jsonl"
    ev.write_bytes(jsonl(EVAL))
    d = tmp_path / "train"
    d.mkdir()
    # Q1's n-grams are spread over three files: each shard sees a part of the item.
    words = Q1.split()
    rows = [{"id": f"a{i}", "text": " ".join(words[i:i + 13])} for i in range(0, 7, 3)]
    files = [rows[:1] + TRAIN[1:3], rows[1:2] + TRAIN[3:4], rows[2:] + TRAIN[4:], TRAIN[1:2]]
    for f, recs in enumerate(files):
        (d / f"t{f}.jsonl").write_bytes(jsonl(recs))
    common = ["contam-check", d, "--eval", ev, "--eval-field", "question,answer", "--annotate",
              "-q"]
    single = llmtk(*common, "--report", tmp_path / "r.json", "--stats", tmp_path / "s.json")
    assert single.returncode == 3, single.stderr
    out, reports, stats = b"", [], []
    for k in range(3):
        rep, st = tmp_path / f"r{k}.json", tmp_path / f"s{k}.json"
        r = llmtk(*common, "--shard", f"{k}/3", "--report", rep, "--stats", st)
        assert r.returncode in (0, 3), r.stderr
        out += r.stdout
        reports.append(rep)
        stats.append(st)
    assert out == single.stdout
    shard_q1 = [next(i for i in json.loads(p.read_text())["items"] if i["id"] == "q1")
                for p in reports]
    assert all(i["class"] != "dirty" for i in shard_q1)  # no shard alone sees all of q1
    merged = json.loads(llmtk("stats", "merge", *reversed(reports), check=True).stdout)
    assert merged == json.loads((tmp_path / "r.json").read_text())
    assert next(i for i in merged["items"] if i["id"] == "q1")["class"] == "dirty"
    ms = json.loads(llmtk("stats", "merge", *stats, check=True).stdout)
    ss = json.loads((tmp_path / "s.json").read_text())
    ms.pop("seconds"), ss.pop("seconds")
    assert ms == ss
    r = llmtk("stats", "merge", *reports[:2])
    assert r.returncode == 2 and b"missing [2]" in r.stderr


def test_seen_runs_coverage_matches_the_per_word_rule():
    import numpy as np

    from llmtk.contam.report import covered_words, seen_runs

    rng = np.random.default_rng(0)
    for _ in range(200):
        n, words = int(rng.integers(3, 9)), int(rng.integers(8, 40))
        seen = rng.random(words - n + 1) < rng.random()
        item = build_items([("x", "s", " ".join(f"w{i}" for i in range(words)))], n)[0]
        item.seen = seen
        assert covered_words(seen_runs(seen), words, n) / words == coverage(item, n)
