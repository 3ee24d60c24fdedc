"""`llmtk eval` the way people evaluate: few-shot examples as lm-eval draws and
lays them out, chat models asked through the template they were fine-tuned with,
Hugging Face folders, and a baseline comparison that finds planted regressions.

A file of its own (pytest-xdist `--dist loadfile` runs it beside test_eval.py): one
small SFT run on made-up facts is shared by the tests that need a real model."""

import json
import os
import random

import pytest

from llmtk.errors import DataError
from llmtk.evaluate import evaluate_task, load_task
from llmtk.evaluate.prompts import Format, contexts
from tests.tolerance import loglik_bound
from tests.util import llmtk

ONE_THREAD = {"OMP_NUM_THREADS": "1"}
COLOURS = ["red", "green", "blue", "yellow", "black", "white", "pink", "brown"]


def write_jsonl(path, records):
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    return str(path)


def arc(i, question, answer, wrong):
    choices = [answer, *wrong]
    return {"id": f"q{i}", "question": question, "answerKey": "A",
            "choices": {"text": choices, "label": list("ABCD")[:len(choices)]}}


# ---------------------------------------------------------------- few-shot (lm-eval's rules)


def test_fewshot_examples_are_drawn_as_lm_evals_default_sampler_draws_them(tmp_path):
    """One Random(seed) per task, moved on item after item; from the task's own rows K + 1
    are drawn and the item dropped (then the first K kept); a separate pool is drawn K at
    a time. Each example: prompt, " ", answer, "\\n\\n"."""
    rows = [arc(i, f"Q{i}?", f"a{i}", [f"x{i}"]) for i in range(6)]
    task = load_task(write_jsonl(tmp_path / "t.jsonl", rows))
    got = contexts(task, Format(num_fewshot=2, seed=7))
    rnd = random.Random(7)
    for item, ctx in zip(task.items, got, strict=True):
        shots = [x for x in rnd.sample(task.pool, 3) if x != item][:2]
        assert item not in shots
        assert ctx == "".join(f"Question: {s.user}\nAnswer: {s.choices[0]}\n\n"
                              for s in shots) + item.context
    assert contexts(task, Format(num_fewshot=2, seed=7)) == got  # reproducible
    assert contexts(task, Format(num_fewshot=2, seed=8)) != got

    pool = load_task(write_jsonl(tmp_path / "dev.jsonl",
                                 [arc(i, f"D{i}?", f"d{i}", ["z"]) for i in range(3)]))
    rnd = random.Random(1234)
    for ctx in contexts(task, Format(num_fewshot=3, pool=pool)):
        shots = rnd.sample(pool.pool, 3)
        assert ctx.startswith("".join(f"Question: {s.user}\nAnswer: {s.choices[0]}\n\n"
                                      for s in shots))
    with pytest.raises(DataError, match="6 rows, too few for 6-shot examples"):
        contexts(task, Format(num_fewshot=6))


def test_chat_format_one_user_turn_or_multiturn_and_no_target_delimiter(tmp_path):
    rows = [arc(i, f"Q{i}?", f"a{i}", [f"x{i}"]) for i in range(2)]
    task = load_task(write_jsonl(tmp_path / "t.jsonl", rows))
    single = contexts(task, Format(num_fewshot=1, chat=True))
    # lm-eval's multiturn_to_singleturn: the example and the question in one user turn;
    # a chat model is asked the question itself, not "Question: ...\nAnswer:".
    assert single[0] == [{"role": "user", "content": "Q1? a1\n\nQ0?"}]
    multi = contexts(task, Format(num_fewshot=1, chat=True, multiturn=True))
    assert multi[0] == [{"role": "user", "content": "Q1?"},
                        {"role": "assistant", "content": "a1"},
                        {"role": "user", "content": "Q0?"}]

    class Recorder:
        requests = []

        def loglikelihood(self, requests):
            self.requests += requests
            return [(-1.0, False)] * len(requests)

    rec = Recorder()
    evaluate_task(task, rec, fmt=Format(chat=True))
    assert [k for _, k in rec.requests[:2]] == ["a0", "x0"]  # the reply itself, no " "
    evaluate_task(task, rec, fmt=Format())
    assert [k for _, k in rec.requests[-2:]] == [" a1", " x1"]


def test_limit_draws_the_same_items_for_the_same_seed_in_file_order(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [{"text": f"doc {i}"} for i in range(50)])
    a, b = load_task(path, limit=5, seed=3), load_task(path, limit=5, seed=3)
    ids = [it.id for it in a.items]
    assert ids == [it.id for it in b.items] and ids == sorted(ids, key=int)
    assert ids != [it.id for it in load_task(path, limit=5, seed=4).items]
    assert len(a.pool) == 50


# ---------------------------------------------------------------- a real chat model


@pytest.fixture(scope="module")
def facts(tmp_path_factory):
    """40 made-up facts ("What is the colour of the X?" -> one word) learnt by `train
    --sft` (a chat model asked in its own template), an ARC-layout file asking the same
    facts, and 8 facts contradicted by a second, short fine-tuning: the planted
    regressions."""
    d = tmp_path_factory.mktemp("facts")
    rnd = random.Random(7)
    syllables = ["ka", "lo", "mi", "zu", "te", "ra", "vo", "ni", "pe", "su", "do", "gi"]
    names = set()
    while len(names) < 40:
        names.add("".join(rnd.choice(syllables) for _ in range(3)))
    facts = [(n, rnd.choice(COLOURS)) for n in sorted(names)]

    def chat(n, c):
        return {"messages": [{"role": "user", "content": f"What is the colour of the {n}?"},
                             {"role": "assistant", "content": c}]}

    items = []
    for n, c in facts:
        choices = [c, *rnd.sample([x for x in COLOURS if x != c], 3)]
        rnd.shuffle(choices)
        items.append({"id": n, "question": f"What is the colour of the {n}?",
                      "choices": {"text": choices, "label": list("ABCD")},
                      "answerKey": "ABCD"[choices.index(c)]})
    # Contradicted by one of the item's own wrong choices, so the new belief is chosen.
    planted = {it["id"]: next(t for t in it["choices"]["text"] if t != c)
               for it, (_, c) in zip(items[:8], facts[:8], strict=True)}
    run = str(d / "sft")
    # What a tiny model learns moves by an item when its rounding changes (100 steps: fp32
    # 0.975 and 7 planted items lost, fp64 0.925 and 6), so the tests below judge a run in
    # fp64, which every CPU computes alike to far below any decision, trained long enough
    # that the same run in fp32 clears the same thresholds (150 steps: fp64 1.0, 8 of 8
    # lost, no other; fp32 1.0, 7 of 8, no other).
    common = ["--seq-len", "64", "--warmup", "5", "--val-fraction", "0", "--weight-decay",
              "0", "--dtype", "fp64", "-q"]
    p = llmtk("train", "--sft", "--data", write_jsonl(d / "sft.jsonl", [chat(*f) for f in facts]),
              "--out", run, "--layers", "1", "--d-model", "64", "--heads", "2",
              "--steps", "150", "--batch-size", "40", "--lr", "5e-3", *common, **ONE_THREAD)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    tuned = str(d / "contradicted")
    # Continued training on the same facts, 8 of them now contradicted.
    new = [chat(n, planted.get(n, c)) for n, c in facts]
    p = llmtk("train", "--sft", "--init-from", run, "--out", tuned, "--steps", "30",
              "--batch-size", "40", "--lr", "5e-3",
              "--data", write_jsonl(d / "new.jsonl", new), *common, **ONE_THREAD)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    return {"dir": d, "run": run, "tuned": tuned, "planted": planted,
            "arc": write_jsonl(d / "facts_arc.jsonl", items)}


def evaluate(*args):
    p = llmtk("eval", *args, "--json", "--no-log", "-q", in_process=True, **ONE_THREAD)
    return p.returncode, (json.loads(p.stdout) if p.stdout else None), p.stderr.decode()


def test_an_sft_model_is_asked_in_its_chat_format_and_knows_its_facts(facts):
    code, report, err = evaluate(facts["run"], "-t", facts["arc"])
    assert code == 0, err
    chat = report["tasks"]["facts_arc"]["metrics"]["acc"]
    code, report, err = evaluate(facts["run"], "-t", facts["arc"], "--no-chat-template")
    base = report["tasks"]["facts_arc"]["metrics"]["acc"]
    assert chat >= 0.9 and base < chat, (chat, base)  # fp64: 1.0 and 0.375 (fp32 1.0, 0.3)


def test_template_and_delimiter_are_exactly_what_the_sft_run_trained_on(facts):
    """The tokens scored for a choice are the tokens of the same conversation as SFT
    encoded it, and the continuation scored is exactly its trained span (the reply
    without the end-of-text token), from the template the checkpoint recorded."""
    import torch

    from llmtk.evaluate.scoring import ModelScorer
    from llmtk.train import load_model
    from llmtk.train.checkpoint import files as C

    m = load_model(facts["run"])
    assert C.load_state(m.source)["chat_template"] == {"name": "llmtk"}
    task = load_task(facts["arc"])
    scorer = ModelScorer(m.model, m.tokenizer, prompt_ids=m.chat.prompt)
    item, ctx = task.items[0], contexts(task, Format(chat=True))[0]
    prompt = scorer.context_ids(ctx)
    header_end = m.tokenizer.encode("\n")  # the template's newline after <|assistant|>
    assert scorer._split_trailing_space(prompt) == (prompt[:-1], header_end)
    for choice in item.choices:
        scored = m.tokenizer.encode(Format(chat=True).delimiter + choice)
        trained_ids, trained = m.chat.encode([{"role": "user", "content": item.user},
                                              {"role": "assistant", "content": choice}])
        assert prompt + scored + [m.tokenizer.eos_id] == trained_ids
        assert trained == [False] * len(prompt) + [True] * (len(scored) + 1)
        # The log-likelihood is of those tokens: the reply, plus (as lm-eval moves a
        # context's trailing whitespace into the continuation) the header's newline.
        (ll, _), = scorer.loglikelihood([(ctx, choice)])
        # the scorer's batch forward and one plain forward: other summation orders
        n = len(trained_ids) - len(prompt)
        bound = loglik_bound(m.model, torch.tensor([trained_ids[:-1]]), n, ll)
        assert ll == pytest.approx(_logprob(m.model, trained_ids[:-1], len(prompt) - 1),
                                   abs=bound)


def test_batches_sorted_by_length_answer_in_request_order(facts):
    """Requests of many lengths (3-shot contexts) scored longest first in batches of 5
    give what one at a time gives, in the order asked."""
    import torch

    from llmtk.evaluate.scoring import ModelScorer
    from llmtk.train import load_model

    m = load_model(facts["run"])
    task = load_task(facts["arc"], limit=12)
    reqs = [(ctx, " " + c) for it, ctx in zip(task.items, contexts(
        task, Format(num_fewshot=3)), strict=True) for c in it.choices]
    assert len({len(c) for c, _ in reqs}) > 3, reqs
    scorer = ModelScorer(m.model, m.tokenizer, batch_size=1)
    one = scorer.loglikelihood(reqs)
    batched = ModelScorer(m.model, m.tokenizer, batch_size=5).loglikelihood(reqs)
    assert [g for _, g in one] == [g for _, g in batched]
    # padded batches of 5 and single rows sum in other orders: within the rounding bound
    # of the longest request (its chain and the largest logit magnitudes of them all)
    ids = [(scorer.context_ids(c) + m.tokenizer.encode(x))[-m.model.cfg.seq_len:]
           for c, x in reqs]
    width = max(map(len, ids))
    batch = torch.tensor([row + [m.tokenizer.eos_id] * (width - len(row)) for row in ids])
    n = max(len(m.tokenizer.encode(x)) + 1 for _, x in reqs)  # (+1: a moved space)
    bound = loglik_bound(m.model, batch, n, max(abs(a) for a, _ in one))
    assert max(abs(a - b) for (a, _), (b, _) in zip(one, batched, strict=True)) <= bound


def _logprob(model, ids, start):
    """Summed log p(ids[i] | ids[:i]) for i >= start, by one plain forward pass."""
    import torch

    with torch.no_grad():
        logits, _ = model(torch.tensor([ids[:-1]]))
    lp = torch.log_softmax(logits[0].float(), dim=-1)
    return sum(lp[i - 1, ids[i]].item() for i in range(start, len(ids)))


def test_a_hugging_face_folder_is_evaluated_like_the_run_it_came_from(facts, tmp_path):
    """Exported with `train export --hf`: the same scores without a template; with a
    chat template in its tokenizer_config.json it is asked through it by default."""
    from llmtk.train.model.hf import export_hf

    hf = tmp_path / "hf"
    export_hf(facts["run"], str(hf))
    _, run_plain, _ = evaluate(facts["run"], "-t", facts["arc"], "--no-chat-template")
    code, hf_plain, err = evaluate(f"hf:{hf}", "-t", facts["arc"])  # no template: plain
    assert code == 0, err
    assert hf_plain["tasks"]["facts_arc"]["metrics"] == run_plain["tasks"]["facts_arc"]["metrics"]
    assert hf_plain["step"] == 0 and os.path.exists(hf / "eval" / "0" / "facts_arc.bad.jsonl")
    conf = json.loads((hf / "tokenizer_config.json").read_text())
    conf["chat_template"] = (  # llmtk's template, written as Jinja
        "{% for m in messages %}{{ '<|' + m.role + '|>\\n' + m.content + '\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}")
    (hf / "tokenizer_config.json").write_text(json.dumps(conf))
    _, run_chat, _ = evaluate(facts["run"], "-t", facts["arc"])
    _, hf_chat, _ = evaluate(str(hf), "-t", facts["arc"], "--out", str(tmp_path / "o"))
    assert hf_chat["tasks"]["facts_arc"]["metrics"] == run_chat["tasks"]["facts_arc"]["metrics"]
    assert os.path.exists(tmp_path / "o" / "eval" / "0" / "facts_arc.bad.jsonl")


def test_a_baseline_comparison_finds_the_planted_regressions(facts):
    """Fine-tuning on contradicting facts makes those items wrong: against the model
    before it, they are the lost items, the accuracy delta's interval is below zero,
    and --fail-on-regression exits 3."""
    code, report, err = evaluate(facts["tuned"], "-t", facts["arc"], "--baseline",
                                 facts["run"], "--fail-on-regression", "0.05")
    assert code == 3, err
    assert "llmtk eval: facts_arc: acc" in err and "worse than the baseline by more than 0.05" \
        in err
    versus = report["tasks"]["facts_arc"]["baseline"]
    lost = set(versus["lost"])
    # A tiny model: fine-tuning may also disturb a neighbour or two, and keep a planted
    # item it had wrong before (fp64: 8 of the 8 planted items lost and no other; the same
    # run in fp32: 7 and none).
    planted = set(facts["planted"])
    assert len(lost & planted) >= 6 and len(lost - planted) <= 2, (lost, versus["gained"])
    acc = versus["metrics"]["acc"]
    assert acc["delta"] < -0.05 and acc["ci"][1] < 0 and acc["lost"] == len(lost)
    assert acc["mcnemar_p"] < 0.05
    with open(report["tasks"]["facts_arc"]["bad_cases"]) as f:
        flagged = {r["id"] for r in map(json.loads, f) if "lost_vs_baseline" in r["why"]}
    assert flagged == lost
    code, _, err = evaluate(facts["tuned"], "-t", facts["arc"], "--baseline", facts["run"],
                            "--fail-on-regression", "0.9")
    assert code == 0, err


def test_the_lm_eval_recipe_in_the_docs_is_the_one_the_benchmark_runs():
    """docs/eval.md's task YAML is benchmarks/eval_vs_lmeval.py's, which runs it against
    lm-eval 0.4.13 (the benchmark is how the recipe is tested: lm-eval is no test
    dependency)."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("eval_vs_lmeval",
                                                  root / "benchmarks" / "eval_vs_lmeval.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    docs = (root / "docs" / "eval.md").read_text()
    shown = docs.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert shown == bench.TASK_YAML.format(
        task="my_arc", test="/abs/path/test.jsonl", train="/abs/path/train.jsonl",
        fewshot_split="train", prompt=bench.PLAIN_PROMPT)
    for needed in ("accelerate", "test_split", "HF_DATASETS_OFFLINE=1", "HF_HUB_OFFLINE=1",
                   "--apply_chat_template"):
        assert needed in docs
