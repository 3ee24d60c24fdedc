"""`llmtk train --experts`: a mixture-of-experts model trains on CPU, logs its experts' load,
resumes bit-exactly (the balancing bias is checkpointed), and DDP and FSDP2 over 2 gloo
processes match one process (fp64, as tests/test_train_parallel.py compares layouts)."""

import json
import os
import shutil

import pytest

from tests.train_runs import losses, rows, run_train, train_corpus  # noqa: F401

MOE = ["--experts", "4", "--top-k", "2", "--expert-ffn-hidden", "64"]
FP64 = ["--dtype", "fp64"]
PARITY_REL = 1e-9  # tests/test_train_parallel.py: fp64 layouts agree far closer than this


@pytest.fixture(scope="module")
def moe_run(corpus, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("moe") / "run")
    run_train(corpus, out, *MOE, "--steps", "5", "--batch-size", "4", "--checkpoint-every",
              "3", "--router-bias-rate", "0.01")
    return out


def test_moe_model_trains_and_logs_its_experts_load(moe_run):
    config = json.load(open(os.path.join(moe_run, "config.json")))
    assert config["model"]["n_experts"] == 4 and config["model"]["top_k"] == 2
    steps = [r for r in rows(moe_run) if "loss" in r and "event" not in r]
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5]
    for r in steps:
        for layer in ("0", "1"):
            share = r[f"expert_load/{layer}"]
            assert len(share) == 4 and sum(share) == pytest.approx(1.0, abs=1e-3)
            assert r[f"expert_imbalance/{layer}"] == pytest.approx(4 * max(share), rel=1e-3)
        assert r["expert_imbalance"] >= 1.0
    assert steps[-1]["loss"] < steps[0]["loss"]


def _from_checkpoint(run: str, step: int, dest) -> str:
    """A new run folder holding only `run`'s checkpoint of `step` (to resume from it)."""
    name = f"step-{step:07d}"
    shutil.copytree(os.path.join(run, "checkpoints", name),
                    os.path.join(dest, "checkpoints", name))
    return str(dest)


def test_moe_resume_is_bit_exact_with_the_balancing_bias(corpus, tmp_path, moe_run):
    import torch

    ckpt = os.path.join(moe_run, "checkpoints", "step-0000003")
    state = torch.load(os.path.join(ckpt, "model.pt"), weights_only=True)
    bias = state.get("state_dict", state)["layers.0.mlp.expert_bias"]
    assert bias.abs().sum() > 0  # three steps of updates, kept in the checkpoint
    resumed = _from_checkpoint(moe_run, 3, tmp_path / "resumed")
    run_train(corpus, resumed, *MOE, "--steps", "5", "--batch-size", "4",
              "--router-bias-rate", "0.01")
    assert losses(resumed)[-2:] == losses(moe_run)[-2:]


def test_proportional_rule_resumes_bit_exactly(corpus, tmp_path):
    """--router-bias-rule proportional: recorded in the run's config, and a resume from
    step 3 continues with the checkpointed bias and the same rule, to the bit."""
    flags = [*MOE, "--steps", "5", "--batch-size", "4", "--router-bias-rate", "0.03",
             "--router-bias-rule", "proportional"]
    whole = str(tmp_path / "whole")
    run_train(corpus, whole, *flags, "--checkpoint-every", "3")
    assert json.load(open(os.path.join(whole, "config.json")))["model"][
        "router_bias_rule"] == "proportional"
    resumed = _from_checkpoint(whole, 3, tmp_path / "resumed")
    run_train(corpus, resumed, *flags)
    assert losses(resumed)[-2:] == losses(whole)[-2:]


@pytest.fixture(scope="module")
def moe_ref(corpus, tmp_path_factory):
    """One process, 2 micro-steps of 2 windows: the micro-batches each rank of a 2-process
    run sees (the auxiliary loss is per micro-batch, so the split matters to it)."""
    out = str(tmp_path_factory.mktemp("moe_ref") / "run")
    run_train(corpus, out, *MOE, *FP64, "--steps", "4", "--batch-size", "2",
              "--grad-accum", "2", "--router-aux-loss", "0.01", "--router-bias-rate", "0.01")
    return out


def _matches(ref, out):
    a, b = losses(ref), losses(out)
    assert [x[0] for x in a] == [x[0] for x in b]
    for (s, la, ga, lra, ta), (_, lb, gb, lrb, tb) in zip(a, b, strict=True):
        assert lb == pytest.approx(la, rel=PARITY_REL), s
        assert gb == pytest.approx(ga, rel=PARITY_REL), s
        assert (lra, ta) == (lrb, tb)
    # the same loads: the bias saw the same counts on every layout
    for ra, rb in zip(rows(ref), rows(out), strict=True):
        if "expert_load/0" in ra:
            assert ra["expert_load/0"] == rb["expert_load/0"]


@pytest.mark.integration
@pytest.mark.parametrize("layout", [
    ["--batch-size", "2", "--parallel", "ddp"],
    ["--batch-size", "1", "--grad-accum", "2", "--parallel", "fsdp"]],
    ids=["ddp", "fsdp2"])
def test_two_processes_match_one(corpus, tmp_path, moe_ref, layout):
    """DDP: each rank one of the reference's micro-batches. FSDP2: each rank's two
    micro-batches of one window; the balance loss is then over other micro-batches, so
    that run leaves it off, and its reference is the bias alone (dropless routing of a token
    does not depend on the others)."""
    out = str(tmp_path / "run")
    aux = ["--router-aux-loss", "0.01"] if "ddp" in layout else []
    ref = moe_ref
    if not aux:
        ref = str(tmp_path / "ref")
        run_train(corpus, ref, *MOE, *FP64, "--steps", "4", "--batch-size", "4",
                  "--router-bias-rate", "0.01")
    run_train(corpus, out, *MOE, *FP64, "--steps", "4", "--nproc-per-node", "2",
              "--router-bias-rate", "0.01", *aux, *layout)
    _matches(ref, out)


def test_hf_export_of_a_run_with_a_balancing_bias_is_refused_with_the_reason(moe_run,
                                                                              tmp_path):
    """Hugging Face's MoE routers hold no bias: exporting one that learnt a bias would
    route differently, so it is refused naming the bias and the flag, nothing written."""
    from tests.util import llmtk

    p = llmtk("train", "export", moe_run, "--hf", str(tmp_path / "hf"), in_process=True)
    err = p.stderr.decode()
    assert p.returncode == 2
    assert "expert_bias" in err and "--router-bias-rate 0" in err, err
    assert not (tmp_path / "hf").exists()


@pytest.mark.integration
def test_fsdp2_sharded_checkpoint_resumes_the_bias_bit_exactly(corpus, tmp_path):
    """The balancing bias is a buffer: DCP writes and reads it with the sharded weights."""
    fsdp = [*MOE, "--steps", "4", "--batch-size", "2", "--nproc-per-node", "2",
            "--parallel", "fsdp", "--router-bias-rate", "0.01"]
    out = str(tmp_path / "run")
    run_train(corpus, out, *fsdp, "--checkpoint-every", "2")
    resumed = _from_checkpoint(out, 2, tmp_path / "resumed")
    run_train(corpus, resumed, *fsdp)
    assert losses(resumed)[-2:] == losses(out)[-2:]
    assert [r["expert_load/1"] for r in rows(resumed) if "expert_load/1" in r] == \
        [r["expert_load/1"] for r in rows(out) if "expert_load/1" in r][-2:]
