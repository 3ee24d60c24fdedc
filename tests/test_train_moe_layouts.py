"""A mixture-of-experts model under pipeline parallelism (--pp: each stage's auxiliary
losses take their gradient in its own backward, llmtk.train.model.moe.carry_aux) and
under context parallelism (--cp: the balance loss's shares counted over the cp ranks,
moe.count_over), alone and with --ep and --tp, matches one process over 6 steps in fp64;
a pp 2 run SIGKILLed after step 4 resumes and redoes step 4 bit for bit."""

import pytest

from tests.train_runs import (
    events,
    rows,
    run_train,
    torchrun_with_faults,
    train_corpus,  # noqa: F401 (the corpus fixture)
)

# 4 blocks, all MoE: 4 experts, top-2, a shared expert, the balance loss and the bias
# (every part of the layer whose arithmetic depends on where its tokens are).
MOE = ["--layers", "4", "--experts", "4", "--top-k", "2", "--expert-ffn-hidden", "64",
       "--shared-experts", "1", "--router-aux-loss", "0.01", "--router-bias-rate", "0.01",
       "--dtype", "fp64", "--steps", "6"]
# Every layout below trains on micro-batches of one window, the four of a step in the
# same order as one process's 4 micro-steps (the balance loss is per micro-batch, so the
# split matters to it): one process and pp (the pipeline's 4 microbatches) --grad-accum
# 4; 2 data-parallel ranks --grad-accum 2; cp splits each window, not the step.
ONE = ["--batch-size", "1", "--grad-accum", "4"]
# fp64, as tests/test_train_ep.py compares layouts (its PARITY_REL). Without the
# auxiliary losses' gradient on stage 0 the pp 2 run is 5e-3 off by step 6, without the
# cp-wide shares the cp 2 run 9e-4 (measured): far outside this bound.
PARITY_REL = 1e-9


def _steps(out):
    return {r["step"]: r for r in rows(out) if "loss" in r and "event" not in r}


def _matches(ref, out):
    """Steps 1-6 within PARITY_REL of `ref` (loss, grad norm), lr and tokens exactly, and
    every MoE layer's load row identical: each stage and rank counted the same tokens."""
    a, b = _steps(ref), _steps(out)
    assert sorted(b) == list(range(1, 7))
    for s, r in b.items():
        assert r["loss"] == pytest.approx(a[s]["loss"], rel=PARITY_REL), s
        assert r["grad_norm"] == pytest.approx(a[s]["grad_norm"], rel=PARITY_REL), s
        assert (r["lr"], r["tokens"]) == (a[s]["lr"], a[s]["tokens"])
        for layer in range(4):  # from every stage, on rank 0's row
            assert r[f"expert_load/{layer}"] == a[s][f"expert_load/{layer}"], (s, layer)


@pytest.fixture(scope="module")
def one(corpus, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("moe_one") / "run")
    run_train(corpus, out, *MOE, *ONE)
    return out


@pytest.mark.integration
def test_pp2_matches_one_process_and_resumes_exactly_after_sigkill(corpus, tmp_path, one):
    """--pp 2 (1f1b, blocks 0-1 and 2-3): both ranks SIGKILLed after step 4, the restart
    resumes step 3's sharded checkpoint (each stage's experts, Adam moments and balancing
    bias) and redoes step 4 as the killed run did, bit for bit; the whole curve is the one
    process's."""
    out = str(tmp_path / "pp2")
    flags = [*MOE, *ONE, "--pp", "2", "--checkpoint-every", "3", "--no-async-checkpoint"]
    p = torchrun_with_faults(corpus, out, 2, {"kill_after": 4}, *flags)
    assert p.returncode != 0
    before = _steps(out)
    assert max(before) == 4
    run_train(corpus, out, *flags, "--nproc-per-node", "2")
    assert events(out, "resume")[0]["path"] == "checkpoints/step-0000003"
    after = _steps(out)
    for key in ("loss", "grad_norm", "expert_load/0", "expert_load/3"):
        assert after[4][key] == before[4][key], key
    _matches(one, out)


@pytest.mark.integration
def test_cp2_ep2_matches_one_process(corpus, tmp_path, one):
    """--cp 2 --ep 2 on 2 processes (dp_shard 1 x cp 2, the ep group the cp pair): each
    rank routes its half of every window and sends the tokens to the rank of their
    experts; the balance loss counts the whole micro-batch's shares (one all-reduce over
    cp per MoE layer), as one process counts them. (--cp 2 alone: the same within 2.7e-15,
    measured by hand.)"""
    out = str(tmp_path / "cp2ep2")
    run_train(corpus, out, *MOE, *ONE, "--nproc-per-node", "2", "--cp", "2", "--ep", "2")
    _matches(one, out)


@pytest.mark.integration
@pytest.mark.slow  # 4-process runs
@pytest.mark.parametrize("args", [
    ["--pp", "2", "--ep", "2", "--grad-accum", "2", "--pp-schedule", "interleaved-1f1b",
     "--pp-layers", "1,1,1,1"],
    ["--pp", "2", "--tp", "2"],
    ["--cp", "2", "--ep", "2", "--tp", "2"]],
    ids=["pp2-ep2-interleaved", "pp2-tp2", "cp2-ep2-tp2"])
def test_four_process_moe_layouts_match_one_process(corpus, tmp_path, one, args):
    """pp 2 x dp_shard 2 with --ep 2, interleaved (two stages of one block per rank, each
    carrying its own auxiliary losses); pp 2 x tp 2 (the residual stream between stages
    sequence-sharded); cp 2 x tp 2 with --ep 2 over the cp ranks."""
    out = str(tmp_path / "run")
    run_train(corpus, out, *MOE, *ONE, "--nproc-per-node", "4", *args)
    _matches(one, out)


LORA = ["--lora-rank", "4", "--lora-alpha", "8", "--lora-targets", "q,v,experts"]


@pytest.mark.integration
def test_lora_on_routed_experts_under_ep2_tp2_matches_one_process(corpus, tmp_path):
    """--lora-targets experts (an adapter per routed expert, the base frozen) under --ep 2
    --tp 2 on 4 processes: each rank holds its 2 experts' adapters (Shard(0) over ep, as
    the experts), split over tp along the experts' hidden width where they touch it and
    whole elsewhere (placement.EXPERT_ADAPTER_DIM; a whole one's gradient a partial sum
    over tp), their gradients scaled by 1/ep as the experts' are. The losses, grad norms
    and loads are one process's, and `train export` folds the sharded adapters into the
    experts as it does one process's. (Without the Partial marks a --tp 2 run is 1.5e-2
    off by step 6.)"""
    import torch

    from tests.util import llmtk

    ref, out = str(tmp_path / "one"), str(tmp_path / "ep2tp2")
    run_train(corpus, ref, *MOE, *ONE, *LORA)
    run_train(corpus, out, *MOE, *LORA, "--batch-size", "1", "--grad-accum", "2",
              "--nproc-per-node", "4", "--ep", "2", "--tp", "2")
    _matches(ref, out)
    got = {}
    for name, run in (("one", ref), ("ep2tp2", out)):
        p = llmtk("train", "export", run, "-o", str(tmp_path / f"{name}.pt"), in_process=True)
        assert p.returncode == 0, p.stderr
        got[name] = torch.load(tmp_path / f"{name}.pt", weights_only=True)["state_dict"]
    assert got["ep2tp2"].keys() == got["one"].keys()
    assert not any(".lora_" in k for k in got["one"]) and "layers.0.mlp.experts.w2" in got["one"]
    # the same adapters (within PARITY_REL), each B·A formed in fp32 by both: at most an
    # fp32 ulp of these deltas (< 1) apart, 1.2e-7
    assert all(torch.allclose(got["ep2tp2"][k], v, rtol=0, atol=1e-6)
               for k, v in got["one"].items())
