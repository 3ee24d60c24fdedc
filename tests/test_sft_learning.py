"""Instruction fine-tuning learns (slow tests): full fine-tuning lifts
held-out exact match well above the base model's, and LoRA on top of it learns a new
instruction that the merged model scores as training measured.

A file of its own (helpers from tests/test_sft.py): these tests take most of the SFT
time, and pytest-xdist (`--dist loadfile`) can run them beside the rest of test_sft.py.
"""

import json

import pytest

from tests.test_sft import ONE_THREAD, rows, words, write_docstrings, write_jsonl
from tests.util import llmtk


@pytest.fixture(scope="module")
def learner_base(tmp_path_factory):
    """A 2 x 128 model pre-trained for a few steps, and synthetic instruction pairs over
    3-letter words: 400 "repeat"/"reverse" pairs to train on and 60 held out; 300 "upper"
    pairs and 60 held out (the task LoRA adds later)."""
    d = tmp_path_factory.mktemp("base")
    out = str(d / "base128")
    p = llmtk("train", "--data", write_docstrings(d / "docs.jsonl"), "--out", out,
              "--layers", "2", "--d-model", "128", "--heads", "4", "--seq-len", "63",
              "--warmup", "5", "--lr", "3e-3",
              "--steps", "20", "--batch-size", "8", "-q", **ONE_THREAD)
    assert p.returncode == 0, p.stderr.decode()[-2000:]

    def held(recs):
        return [{"id": f"h{i}", **r} for i, r in enumerate(recs)]

    rr, up = words(460, 0, ("repeat", "reverse")), words(360, 1, ("upper",))
    return {"run": out, "dir": d,
            "rr": write_jsonl(d / "rr.jsonl", rr[:400]),
            "rr_held": write_jsonl(d / "rr_held.jsonl", held(rr[400:])),
            "up": write_jsonl(d / "up.jsonl", up[:300]),
            "up_held": write_jsonl(d / "up_held.jsonl", held(up[300:]))}


# An example is 37-39 tokens, so a row of 41 holds one, as the base's 64 did (two fit in
# neither), and a prompt (35) with its answer fits: the padding of a 64-token row was a
# third of every step's compute. (RoPE: --init-from takes another sequence length.)
SFT_SEQ_LEN = "40"


def exact_match(run, step, task):
    vals = [r["value"] for r in rows(run) if r.get("event") == "eval" and r["task"] == task
            and r["metric"] == "exact_match" and r["step"] == step]
    assert len(vals) == 1
    return vals[0]


def eval_em(run, task_file):
    p = llmtk("eval", run, "--tasks", task_file, "--max-new-tokens", "5", "--json", "--no-log",
              "-q", **ONE_THREAD)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    (task,) = json.loads(p.stdout)["tasks"].values()
    return task["metrics"]["exact_match"]


@pytest.fixture(scope="module")
def full_ft(learner_base):
    """Full fine-tuning of the pre-trained model on the repeat/reverse pairs."""
    lb = learner_base
    out = str(lb["dir"] / "full")
    p = llmtk("train", "--sft", "--init-from", lb["run"], "--data", lb["rr"], "--out", out,
              "--seq-len", SFT_SEQ_LEN,
              "--steps", "800", "--batch-size", "16", "--warmup", "50", "--lr", "2e-3",
              "--weight-decay", "0", "--log-every", "100", "--eval-tasks", lb["rr_held"],
              "--eval-every", "400", "--eval-max-new-tokens", "5", "-q", 
              **ONE_THREAD)
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    return out


@pytest.mark.slow  # 800 steps of a 2 x 128 model: minutes on 2 busy cores
def test_full_fine_tuning_lifts_held_out_exact_match_well_above_the_base(learner_base,
                                                                        full_ft):
    base_em = eval_em(learner_base["run"], learner_base["rr_held"])
    tuned = exact_match(full_ft, 800, "rr_held")  # measured 1.000 (0.517 at step 400)
    assert base_em <= 0.05 and tuned >= base_em + 0.3, (base_em, tuned)


@pytest.mark.slow
def test_lora_learns_a_new_instruction_on_the_fine_tuned_model(learner_base, full_ft,
                                                                tmp_path):
    """LoRA (base frozen) on top of the repeat/reverse model, trained on "upper" pairs: its
    loss on the new instruction falls clearly, and the merged model `llmtk eval` loads
    scores what training measured with the adapters. (On these toy bases LoRA learns far
    more slowly than full fine-tuning, see docs/train.md; held-out exact match is reported,
    not required, here.)"""
    lb = learner_base
    before = eval_em(full_ft, lb["up_held"])
    out = str(tmp_path / "lora")
    p = llmtk("train", "--sft", "--init-from", full_ft, "--data", lb["up"], "--out", out,
              "--steps", "400", "--batch-size", "16", "--warmup", "20", "--lr", "3e-3",
              "--lora-rank", "16", "--weight-decay", "0",  # alpha: the rank (the default)
              "--log-every", "50", "--eval-tasks", lb["up_held"], "--eval-every", "400",
              "--eval-max-new-tokens", "5", "-q", **ONE_THREAD)
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    losses = [r["loss"] for r in rows(out) if "loss" in r and "event" not in r]
    assert losses[-1] <= 0.85 * losses[0], losses
    tuned = exact_match(out, 400, "up_held")
    assert tuned > before  # measured: 0.0 -> 0.533 (rank 8, lr 5e-3: 0.0; docs/train.md)
    assert eval_em(out, lb["up_held"]) == pytest.approx(tuned)
