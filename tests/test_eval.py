"""`llmtk eval` and llmtk.evaluate: metric definitions (a stub scorer whose scores the test
controls, accuracies computed by hand per layout), bad cases and flips, the metrics-log
rows that plot-loss and diagnose read, and one real tiny-model run end to end."""

import json
import math
import os

import pytest

from llmtk.errors import DataError
from llmtk.evaluate import evaluate_task, load_task
from llmtk.evaluate.metrics import clean_answer, extract_flexible, extract_strict
from llmtk.evaluate.report import bad_cases, eval_records, evaluate_tasks, write_step


def write_jsonl(path, records):
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    return str(path)


class Stub:
    """Scores from a function of (context, continuation); generations from a table."""

    def __init__(self, ll=None, outputs=None, rolling=None):
        self.ll, self.outputs, self._rolling = ll, outputs or {}, rolling
        self.requests = []

    def loglikelihood(self, requests):
        self.requests += requests
        return [(self.ll(c, k), False) for c, k in requests]

    def generate(self, context, stop, max_new_tokens):
        return self.outputs[context], math.log(0.5)

    def rolling(self, texts, chat=False):
        return [self._rolling(t) for t in texts]


# ---------------------------------------------------------------- multiple choice


def test_hellaswag_acc_and_acc_norm_by_hand(tmp_path):
    # ll per continuation; acc takes the largest sum, acc_norm the largest sum / len(choice).
    lls = {" x": -2.0, " yyyy": -3.0,      # acc picks 0 (wrong), norm: -2 vs -0.75 -> 1 (right)
           " zz": -1.0, " ww": -4.0,       # both pick 0 (right)
           " qqq": -3.0, " r": -1.5,       # acc picks 1 (right), norm: -1 vs -1.5 -> 0 (wrong)
           " ss": -2.0, " tttttt": -3.0}   # acc 0 (wrong), norm: -1 vs -0.5 -> 1 (right)
    path = write_jsonl(tmp_path / "hs.jsonl", [
        {"ctx": "A man", "endings": ["x", "yyyy"], "label": 1, "activity_label": "Cooking"},
        {"ctx": "B [title] c", "endings": ["zz", "ww"], "label": "0"},
        {"ctx": "C", "endings": ["qqq", "r"], "label": 1},
        {"ctx": "D", "endings": ["ss", "tttttt"], "label": 1},
    ])
    task = load_task(path)
    assert task.layout == "hellaswag" and task.kind == "multiple_choice"
    stub = Stub(ll=lambda c, k: lls[k])
    res = evaluate_task(task, stub)
    assert res.metrics == {"acc": 2 / 4, "acc_norm": 3 / 4}
    # lm-eval's prompt: "{activity_label}: {ctx}", WikiHow markers cleaned, " " + ending.
    assert stub.requests[0] == ("Cooking: A man", " x")
    assert stub.requests[2] == ("B. c", " zz")
    assert [r["correct"] for r in res.items] == [False, True, True, False]


def test_arc_layout_maps_answer_key_to_its_label(tmp_path):
    path = write_jsonl(tmp_path / "arc.jsonl", [
        {"id": "q1", "question": "Sky?", "answerKey": "C",
         "choices": {"text": ["red", "green", "blue"], "label": ["A", "B", "C"]}},
        {"id": "q2", "question": "Two?", "answerKey": "1",
         "choices": {"text": ["2", "3"], "label": ["1", "2"]}},
    ])
    scores = {("Question: Sky?\nAnswer:", " blue"): -1.0, ("Question: Two?\nAnswer:", " 3"): -1.0}
    res = evaluate_task(load_task(path), Stub(ll=lambda c, k: scores.get((c, k), -5.0)))
    assert [r["gold"] for r in res.items] == [2, 0]
    assert [r["correct"] for r in res.items] == [True, False]  # q2: " 3" scored best, gold "2"
    assert res.metrics["acc"] == 0.5


def test_mmlu_scores_the_letters_after_the_listed_choices(tmp_path):
    path = write_jsonl(tmp_path / "mmlu.jsonl", [
        {"question": "1+1?", "choices": ["1", "2", "3", "4"], "answer": 1, "subject": "math"},
        {"question": "2+2?", "choices": ["4", "5", "6", "7"], "answer": 0, "subject": "math"},
        {"question": "3+3?", "choices": ["5", "6", "7", "8"], "answer": 1, "subject": "math"},
    ])
    stub = Stub(ll=lambda c, k: -1.0 if k == " B" else -2.0)  # always answers B
    res = evaluate_task(load_task(path), stub)
    ctx = stub.requests[0][0]
    assert ctx == ("The following are multiple choice questions (with answers) about math.\n\n"
                   "1+1?\nA. 1\nB. 2\nC. 3\nD. 4\nAnswer:")
    assert {k for _, k in stub.requests} == {" A", " B", " C", " D"}
    assert res.metrics == {"acc": 2 / 3, "acc_norm": 2 / 3}


def test_ties_go_to_the_first_choice_like_numpy_argmax(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [{"ctx": "c", "endings": ["aa", "bb"], "label": 1}])
    res = evaluate_task(load_task(path), Stub(ll=lambda c, k: -1.0))
    assert res.items[0]["pred"] == 0 and res.metrics["acc"] == 0.0


# ---------------------------------------------------------------- generation, perplexity


def test_gsm8k_strict_and_flexible_exact_match(tmp_path):
    path = write_jsonl(tmp_path / "gsm8k.jsonl", [
        {"question": "q1", "answer": "work\n#### 1,234"},
        {"question": "q2", "answer": "work\n#### 72"},
        {"question": "q3", "answer": "work\n#### 6"},
    ])
    outputs = {"Question: q1\nAnswer:": " so 1,234 in all.\n#### 1,234",
               "Question: q2\nAnswer:": " The answer is 72.",
               "Question: q3\nAnswer:": " 6 at first, #### 5"}
    task = load_task(path)
    assert task.layout == "gsm8k" and task.items[0].answer == "1234"
    res = evaluate_task(task, Stub(outputs=outputs))
    assert res.metrics == {"exact_match": 1 / 3, "exact_match_flexible": 2 / 3}
    assert extract_strict("x #### -3.5") == "-3.5"
    assert extract_flexible("a 1 b $2,000.") == "$2,000."
    assert clean_answer("$2,000.") == "2000"


def test_prompt_response_and_chat_layouts_compare_the_whole_answer(tmp_path):
    p1 = write_jsonl(tmp_path / "pr.jsonl", [{"prompt": "reverse abc", "response": "cba"},
                                            {"instruction": "upper", "input": "ab",
                                             "output": "AB"}])
    p2 = write_jsonl(tmp_path / "chat.jsonl", [{"messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}])
    t1 = load_task(p1)
    assert t1.items[1].prompt == "upper\n\nab"
    res = evaluate_task(t1, Stub(outputs={"reverse abc": " cba ", "upper\n\nab": "ab"}))
    assert res.metrics == {"exact_match": 0.5}
    t2 = load_task(p2)
    assert t2.items[0].messages == [{"role": "user", "content": "hi"}]
    assert evaluate_task(t2, Stub(outputs={"hi": "hello"})).metrics == {"exact_match": 1.0}


def test_perplexity_and_bits_per_byte(tmp_path):
    path = write_jsonl(tmp_path / "ppl.jsonl", [{"text": "abcd"}, {"text": "éf"}])  # 4 + 3 bytes
    # 1 bit per byte exactly; 2 tokens per text.
    res = evaluate_task(load_task(path),
                        Stub(rolling=lambda t: (-math.log(2) * len(t.encode()), 2)))
    assert res.metrics["bits_per_byte"] == pytest.approx(1.0)
    assert res.metrics["perplexity"] == pytest.approx(math.exp(7 * math.log(2) / 4))


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("records,message", [
    ([{"ctx": "c", "endings": ["a"], "label": 3}], "bad.jsonl:1: the answer index 3"),
    ([{"text": "ok"}, {"ctx": "c", "endings": ["a"], "label": 0}],
     "bad.jsonl:2: a hellaswag record in a text task"),
    ([{"foo": 1}], "bad.jsonl:1: no known task layout"),
    ([{"question": "q", "answerKey": "Z", "choices": {"text": ["a"], "label": ["A"]}}],
     "bad.jsonl:1: bad arc record"),
])
def test_bad_task_records_name_file_and_line(tmp_path, records, message):
    path = write_jsonl(tmp_path / "bad.jsonl", records)
    with pytest.raises(DataError, match=message.replace(".", r"\.")):
        load_task(path)


# ---------------------------------------------------------------- bad cases, flips, records


def _mc_task(tmp_path):
    return load_task(write_jsonl(tmp_path / "mc.jsonl", [
        {"id": f"i{k}", "ctx": f"c{k}", "endings": ["a", "b"], "label": 0} for k in range(4)]))


def test_bad_cases_are_the_confident_wrong_and_the_flipped(tmp_path):
    task = _mc_task(tmp_path)
    run = str(tmp_path / "run")
    # step 10: all right. step 20: i1 wrong (flipped, barely), i2 wrong (confidently).
    right = Stub(ll=lambda c, k: -1.0 if k == " a" else -3.0)
    s10 = write_step(run, 10, evaluate_task(task, right), n_bad=1)
    assert s10["flipped"] == 0 and s10["previous_step"] is None

    def later(c, k):
        if c == "c1":
            return -1.0 if k == " b" else -1.1
        if c == "c2":
            return -1.0 if k == " b" else -9.0
        return -1.0 if k == " a" else -3.0

    res = evaluate_task(task, Stub(ll=later))
    s20 = write_step(run, 20, res, n_bad=1)
    assert s20["flipped"] == 2 and s20["previous_step"] == 10
    with open(os.path.join(run, "eval", "20", "mc.bad.jsonl")) as f:
        bad = [json.loads(line) for line in f]
    # n_bad=1: the most confident wrong (i2), plus up to 1 flipped (i2 again, then none more).
    assert [(b["id"], b["why"]) for b in bad] == [("i2", ["confident_wrong", "flipped"])]
    assert bad[0]["expected"] == "a" and bad[0]["answer"] == "b" and bad[0]["prompt"] == "c2"
    assert bad[0]["scores"] == [-9.0, -1.0] and bad[0]["step"] == 20
    cases = bad_cases(res, {"i0": True, "i1": True, "i2": False, "i3": True}, 1)
    assert [(c["id"], c["why"]) for c in cases] == [("i2", ["confident_wrong"]),
                                                    ("i1", ["flipped"])]
    rows = eval_records(s20)
    assert [(r["step"], r["event"], r["task"], r["metric"], r["value"]) for r in rows] == [
        (20, "eval", "mc", "acc", 0.5), (20, "eval", "mc", "acc_norm", 0.5)]


def test_diagnose_sees_a_task_getting_worse_while_the_loss_improves(tmp_path):
    from llmtk.curves.detect import diagnose
    from llmtk.curves.logs import load_run

    task = _mc_task(tmp_path)
    run = str(tmp_path / "run")
    log = tmp_path / "run" / "metrics.jsonl"
    os.makedirs(run)
    rows = [{"step": s, "loss": 3.0 - s / 100} for s in range(1, 101)]
    with open(log, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    good = Stub(ll=lambda c, k: -1.0 if k == " a" else -3.0)
    bad = Stub(ll=lambda c, k: -1.0 if (k == " a") == (c == "c0") else -3.0)  # 1 of 4 right
    with open(log, "a") as f:
        for step, stub in ((50, good), (100, bad)):
            evaluate_tasks([task], stub, run_dir=run, step=step,
                           log=lambda r, f=f: f.write(json.dumps(r) + "\n"))
    r = load_run(str(log))
    assert r.series("eval/mc/acc") == ([50.0, 100.0], [1.0, 0.25])
    found = [f for f in diagnose(r) if f.kind == "eval_regression"]
    assert len(found) == 2  # acc and acc_norm
    assert "mc/acc got worse since its best at step 50 (1 -> 0.25" in found[0].summary
    assert "while the training loss fell" in found[0].summary


# ---------------------------------------------------------------- a real tiny model, end to end


def _all_layouts(d):
    return [
        write_jsonl(d / "hs.jsonl", [{"ctx": f"The {w} is", "endings": ["red", "a big dog"],
                                      "label": k % 2} for k, w in enumerate(["sky", "cat"])]),
        write_jsonl(d / "arc.jsonl", [{"id": "a1", "question": "What is it?", "answerKey": "B",
                                       "choices": {"text": ["x", "y"], "label": ["A", "B"]}}]),
        write_jsonl(d / "mmlu.jsonl", [{"question": "2+2?", "choices": ["3", "4"], "answer": 1}]),
        write_jsonl(d / "gsm8k.jsonl", [{"question": "1+1?", "answer": "so\n#### 2"}]),
        write_jsonl(d / "pairs.jsonl", [{"prompt": "reverse ab", "response": "ba"}]),
        write_jsonl(d / "held.jsonl", [{"text": "Return the number of items."}]),
    ]


def test_train_eval_tasks_and_llmtk_eval_agree_on_a_real_model(tmp_path):
    """`train --eval-tasks` scores every layout at each --eval-every step (files, log rows);
    `llmtk eval` on the same checkpoint reproduces the numbers; plot-loss draws them."""
    from tests.util import llmtk

    tasks = _all_layouts(tmp_path)
    docs = write_jsonl(tmp_path / "docs.jsonl",
                       [{"text": (json.__doc__ or "") + str(k)} for k in range(20)])
    out = str(tmp_path / "run")
    args = ["train", "--data", docs, "--out", out, "--layers", "1", "--d-model", "32",
            "--heads", "2", "--seq-len", "32", "--steps", "4", "--batch-size", "2",
            "--warmup", "1", "--log-every", "1", "--eval-every", "2",
            "--eval-max-new-tokens", "4", "-q", "--checkpoint-every", "2"]
    for t in tasks:
        args += ["--eval-tasks", t]
    p = llmtk(*args, OMP_NUM_THREADS="1")
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    with open(os.path.join(out, "metrics.jsonl")) as f:
        evals = [r for r in map(json.loads, f) if r.get("event") == "eval"]
    names = ["hs", "arc", "mmlu", "gsm8k", "pairs", "held"]
    assert {(r["step"], r["task"]) for r in evals} == {(s, n) for s in (2, 4) for n in names}
    at4 = {(r["task"], r["metric"]): r["value"] for r in evals if r["step"] == 4}
    assert set(at4) == {("hs", "acc"), ("hs", "acc_norm"), ("arc", "acc"), ("arc", "acc_norm"),
                        ("mmlu", "acc"), ("mmlu", "acc_norm"), ("gsm8k", "exact_match"),
                        ("gsm8k", "exact_match_flexible"), ("pairs", "exact_match"),
                        ("held", "perplexity"), ("held", "bits_per_byte")}
    for step in (2, 4):
        for n in names:
            assert os.path.exists(os.path.join(out, "eval", str(step), f"{n}.bad.jsonl"))
    with open(os.path.join(out, "eval", "4", "hs.bad.jsonl")) as f:
        for case in map(json.loads, f):
            assert {"prompt", "expected", "answer", "scores", "why"} <= set(case)

    cli = ["eval", os.path.join(out, "checkpoints", "step-0000004"), "--json", "--no-log",
           "--max-new-tokens", "4", "-q"]
    for t in tasks:
        cli += ["--tasks", t]
    p = llmtk(*cli, OMP_NUM_THREADS="1")
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    report = json.loads(p.stdout)
    assert report["step"] == 4 and set(report["tasks"]) == set(names)
    got = {(n, m): v for n, t in report["tasks"].items() for m, v in t["metrics"].items()}
    assert got.keys() == at4.keys()
    for key, value in at4.items():
        assert got[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key
    assert report["tasks"]["hs"]["previous_step"] == 2 and report["tasks"]["hs"]["items"] == 2

    svg = str(tmp_path / "eval.svg")
    p = llmtk("plot-loss", out, "--metric", "loss", "--metric", "eval/held/perplexity",
              "-o", svg)
    assert p.returncode == 0, p.stderr.decode()
    with open(svg) as f:
        assert "eval/held/perplexity" in f.read()


def test_llmtk_eval_rejects_a_bad_task_file_before_loading_the_model(tmp_path):
    from tests.util import llmtk

    bad = write_jsonl(tmp_path / "bad.jsonl", [{"ctx": "c", "endings": ["a"], "label": 0},
                                               {"ctx": "c", "endings": ["a"], "label": 5}])
    p = llmtk("eval", str(tmp_path / "nothing-here"), "--tasks", bad, in_process=True)
    assert p.returncode == 1
    assert p.stderr.decode().strip() == (f"llmtk: error: {bad}:2: the answer index 5 is not one "
                                         "of the 1 choices")


def _eval_rows(log):
    with open(log) as f:
        return [r for r in map(json.loads, f) if r.get("event") == "eval"]


def test_llmtk_eval_logs_each_step_task_and_metric_once(tmp_path, capfd, monkeypatch):
    """Re-running `llmtk eval` on the same checkpoint (or on one `train --eval-tasks` already
    scored) adds no second row for the step: plot-loss would draw both."""
    import torch

    from llmtk.train.checkpoint.checkpointer import Checkpointer
    from llmtk.train.model.gpt import GPT, ModelConfig
    from tests.util import InProcess

    cli = InProcess()
    run = tmp_path / "run"
    torch.manual_seed(1)
    cfg = ModelConfig(vocab_size=257, seq_len=32, n_layer=1, d_model=32, n_head=2)
    state = {"step": 5, "model_config": cfg.to_dict(), "train_config": {"tokenizer": "bytes"},
             "tokenizer": "bytes-v1"}
    Checkpointer(str(run / "checkpoints")).save(5, state, GPT(cfg))
    log = run / "metrics.jsonl"
    log.write_text(json.dumps({"step": 5, "loss": 5.5}) + "\n")
    arc = write_jsonl(tmp_path / "arc.jsonl", [
        {"question": "Sky?", "choices": ["red", "blue"], "answer": 1},
        {"question": "Two?", "choices": ["2", "3"], "answer": 0}])
    held = write_jsonl(tmp_path / "held.jsonl", [{"text": "Return the number of items."}])
    monkeypatch.setenv("COLUMNS", "80")
    for _ in range(2):
        r = cli("eval", run, "--tasks", arc, "--tasks", held, "--device", "cpu")
        assert r.exit_code == 0, r.output
        assert "arc (2 items): acc" in r.output and " items/s" in r.output  # the summary
        # At 80 columns a long path folds in its column, whole, and is never cut with "…".
        last = "".join(line.split("│")[-2].strip() for line in r.stdout.splitlines()
                       if line.count("│") > 2)
        assert "…" not in r.stdout and os.path.relpath(run / "eval" / "5" / "arc.bad.jsonl") in last
    rows = _eval_rows(log)
    keys = [(r["step"], r["task"], r["metric"]) for r in rows]
    assert sorted(keys) == [(5, "arc", "acc"), (5, "arc", "acc_norm"),
                            (5, "held", "bits_per_byte"), (5, "held", "perplexity")]
    # A different result for a logged step (here: fewer items) is not logged over it;
    # the terminal says so, and the task can be logged under another name.
    r = cli("eval", run, "--tasks", arc, "--limit", "1", "--device", "cpu")
    assert r.exit_code == 0 and "already logged" in r.output and "NAME=FILE" in r.output
    assert len(_eval_rows(log)) == 4
    r = cli("eval", run, "--tasks", f"arc1={arc}", "--limit", "1", "--device", "cpu", "-q")
    assert r.exit_code == 0 and r.output == ""
    assert {r["task"] for r in _eval_rows(log)} == {"arc", "held", "arc1"}
    assert len(_eval_rows(log)) == 6


def test_mcnemar_exact_p_values_by_hand():
    """Two-sided exact McNemar: 2 * P(Binomial(b + c, 1/2) <= min(b, c)), capped at 1."""
    from llmtk.evaluate.compare import mcnemar_p

    assert mcnemar_p(0, 5) == 2 / 32
    assert mcnemar_p(9, 1) == 2 * (1 + 10) / 1024
    assert mcnemar_p(3, 3) == 1.0 and mcnemar_p(0, 0) == 1.0


def test_task_spec_name_is_split_off_unless_the_path_exists(tmp_path):
    from llmtk.evaluate.tasks import split_spec

    odd = tmp_path / "a=b.jsonl"
    odd.write_text("")
    assert split_spec("arc=data/arc.jsonl") == ("arc", "data/arc.jsonl")
    assert split_spec("data/arc.jsonl") == (None, "data/arc.jsonl")
    assert split_spec(str(odd)) == (None, str(odd))
