"""`llmtk train --ep`: a mixture-of-experts model's experts split over expert-parallel
ranks (llmtk/train/layout/expert_parallel.py) match one process over 20 steps, alone and
under tensor parallelism (and MoE under tp alone); an ep2 run killed with SIGKILL resumes
bit-exactly, and its DCP checkpoint resumes in one process on the same curve."""

import json
import os
import shutil

import pytest

from tests.train_runs import (
    events,
    losses,
    rows,
    run_train,
    torchrun_with_faults,
    train_corpus,  # noqa: F401 (the corpus fixture)
)

# 4 experts, top-2, one shared expert, the balance loss and the bias: every part of the
# layer that crosses ranks (the shared expert and the router under tp, the bias's counts)
MOE = ["--experts", "4", "--top-k", "2", "--expert-ffn-hidden", "64", "--shared-experts", "1",
       "--router-aux-loss", "0.01", "--router-bias-rate", "0.01"]
FP64 = ["--dtype", "fp64"]
# Each rank of a 2-way data-parallel run trains on one micro-batch of 2 windows: one
# process sees the same micro-batches as 2 micro-steps (the balance loss is per
# micro-batch, so the split matters to it).
ONE = ["--batch-size", "2", "--grad-accum", "2"]
STEPS = ["--steps", "20", "--checkpoint-every", "10", "--no-async-checkpoint"]
# Layouts are compared in fp64, as tests/test_train_parallel.py compares them (its
# PARITY_REL argument: fp32 rounding amplified x170 over 20 steps, in fp64 still 10^4 times
# inside 1e-9). Dropless routing sends every token to the same experts in every layout and
# adds each token's expert outputs in the same (expert) order; what differs is where the
# experts' weight gradients are summed over tokens (one matmul over both ranks' tokens
# instead of two accumulated ones, a reduce-scatter; under tp two half sums of each hidden
# layer). In fp32 (issue 41's goal, 1e-5 over 20 steps) these runs measured losses within
# 1.2e-7 and grad norms within 2.5e-7 on this machine's corpus file, but on the test
# corpus (built in the test process) a tp run's grad norm drifted 1.7e-5 apart at step
# 18: fp32 parity over 20 steps is a measurement (docs/train.md), not a bound.
PARITY_REL = 1e-9


def _matches(ref, out, steps=range(1, 21)):
    a = {r[0]: r for r in losses(ref)}
    b = losses(out)
    assert [x[0] for x in b] == list(steps)
    for s, loss, grad, lr, tokens in b:
        assert loss == pytest.approx(a[s][1], rel=PARITY_REL), s
        assert grad == pytest.approx(a[s][2], rel=PARITY_REL), s
        assert (lr, tokens) == (a[s][3], a[s][4])
    # every layout counted the same loads for the bias (rounded to 5 places in the row)
    load = {r["step"]: r["expert_load/0"] for r in rows(ref) if "expert_load/0" in r}
    for r in rows(out):
        if "expert_load/0" in r:
            assert r["expert_load/0"] == pytest.approx(load[r["step"]], abs=2e-5)


@pytest.fixture(scope="module")
def one_ref(corpus, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("ep_one") / "run")
    run_train(corpus, out, *MOE, *FP64, *ONE, "--steps", "20")
    return out


@pytest.fixture(scope="module")
def ep2_run(corpus, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("ep2") / "run")
    run_train(corpus, out, *MOE, *FP64, *STEPS, "--batch-size", "2", "--nproc-per-node",
              "2", "--ep", "2")
    return out


@pytest.mark.integration
def test_ep2_matches_one_process_and_its_checkpoint_resumes_in_one(corpus, tmp_path,
                                                                  one_ref, ep2_run):
    """2 processes, --ep 2: each holds 2 of the 4 experts (dp_shard 2 = ep 2, so FSDP2
    over the experts' own efsdp dimension has one rank); 20 steps within PARITY_REL of one
    process. Its step-10 DCP checkpoint (experts as DTensors split over ep) resumes in one
    process, which holds all 4, and continues the curve."""
    config = json.load(open(os.path.join(ep2_run, "config.json")))
    assert config["layout"]["ep"] == 2 and config["parallel"] == "fsdp"
    _matches(one_ref, ep2_run)
    resumed = str(tmp_path / "one")
    os.makedirs(os.path.join(resumed, "checkpoints"))
    shutil.copytree(os.path.join(ep2_run, "checkpoints", "step-0000010"),
                    os.path.join(resumed, "checkpoints", "step-0000010"))
    run_train(corpus, resumed, *MOE, *FP64, *ONE, "--steps", "20")
    assert events(resumed, "resume")[0]["path"] == "checkpoints/step-0000010"
    _matches(ep2_run, resumed, steps=range(11, 21))


@pytest.mark.integration
def test_ep2_killed_resumes_bit_exactly(corpus, tmp_path):
    """fp32 (the grouped expert kernel; fp64 takes the fallback loop): SIGKILL on both
    ranks after step 13; the restart resumes step 10's sharded checkpoint (each rank its
    experts, their Adam moments, the balancing bias) and logs steps 11-13 exactly as the
    killed run did."""
    out = str(tmp_path / "killed")
    flags = [*MOE, *STEPS, "--batch-size", "2", "--ep", "2"]
    p = torchrun_with_faults(corpus, out, 2, {"kill_after": 13}, *flags)
    assert p.returncode != 0
    before = {r["step"]: r for r in rows(out) if "loss" in r and "event" not in r}
    assert max(before) == 13
    run_train(corpus, out, *flags, "--nproc-per-node", "2")
    assert events(out, "resume")[0]["path"] == "checkpoints/step-0000010"
    after = {r["step"]: r for r in rows(out) if "loss" in r and "event" not in r}
    assert sorted(after) == list(range(1, 21))
    for step in (11, 12, 13):
        for key in ("loss", "grad_norm", "expert_load/0", "expert_load/1"):
            assert after[step][key] == before[step][key], (step, key)


@pytest.mark.integration
@pytest.mark.slow  # a 4-process and a 2-process run of 20 steps
def test_ep2_tp2_and_tp2_match_one_process(corpus, tmp_path, one_ref):
    """--ep 2 --tp 2 on 4 processes: experts [Shard(0), Shard(hidden)] over (ep, tp), the
    all-to-all within each tp coordinate's ep group; and --tp 2 alone (experts split by
    hidden width, the router whole, the shared expert column/row-wise)."""
    both, tp = str(tmp_path / "ep2tp2"), str(tmp_path / "tp2")
    run_train(corpus, both, *MOE, *FP64, "--steps", "20", "--batch-size", "2",
              "--nproc-per-node", "4", "--ep", "2", "--tp", "2")
    _matches(one_ref, both)
    run_train(corpus, tp, *MOE, *FP64, *ONE, "--steps", "20", "--nproc-per-node", "2",
              "--tp", "2")
    _matches(one_ref, tp)


@pytest.mark.integration
@pytest.mark.slow  # a 4-process run
def test_ep2_checkpoint_resumes_resharded_under_ep2_tp2(corpus, tmp_path, ep2_run):
    """The ep 2 run's step-10 DCP checkpoint (experts Shard(0) over 2 ranks) resumes on
    4 processes under --ep 2 --tp 2 (experts [Shard(0), Shard(hidden)] over (ep, tp), the
    router and the norms whole over tp) and continues the ep 2 run's curve."""
    resumed = str(tmp_path / "eptp")
    os.makedirs(os.path.join(resumed, "checkpoints"))
    shutil.copytree(os.path.join(ep2_run, "checkpoints", "step-0000010"),
                    os.path.join(resumed, "checkpoints", "step-0000010"))
    run_train(corpus, resumed, *MOE, *FP64, "--steps", "20", "--batch-size", "2",
              "--nproc-per-node", "4", "--ep", "2", "--tp", "2")
    assert events(resumed, "resume")[0]["path"] == "checkpoints/step-0000010"
    _matches(ep2_run, resumed, steps=range(11, 21))


@pytest.mark.integration
@pytest.mark.slow  # three 4-process runs
@pytest.mark.parametrize("layout,both", [
    (["--ep", "2"], ["--activation-checkpointing", "--capacity-factor", "1.0"]),
    (["--ep", "4"], []), (["--ep", "2", "--dp-replicate", "2"], [])],
    ids=["efsdp2-recompute-capacity", "ep4", "hsdp"])
def test_ep_over_four_ranks_matches_one_process(corpus, tmp_path, layout, both):
    """dp_shard 4 with ep 2: FSDP2 shards each rank's 2 experts over efsdp 2 (their own
    group, gradients scaled by 1/ep), with activation checkpointing (every MoE forward
    and its all-to-alls run again in backward) and a capacity (each rank drops from its
    own micro-batch, as one process from each micro-step's); ep 4: one expert per rank;
    HSDP 2 x 2 with ep 2: the experts replicated over dp_replicate. One window per rank,
    as 4 micro-steps of one process."""
    ref, out = str(tmp_path / "one"), str(tmp_path / "four")
    run_train(corpus, ref, *MOE, *FP64, *both, "--steps", "4", "--batch-size", "1",
              "--grad-accum", "4")
    run_train(corpus, out, *MOE, *FP64, *both, "--steps", "4", "--batch-size", "1",
              "--nproc-per-node", "4", *layout)
    _matches(ref, out, steps=range(1, 5))


def test_regroup_orders_arrivals_by_expert_then_source():
    """Rows arrive grouped by source rank, each source's rows by expert; the experts want
    them grouped by expert, each expert's rows by source rank."""
    import torch

    from llmtk.train.layout.expert_parallel import regroup

    counts = torch.tensor([[2, 0, 1], [1, 3, 0]])  # (sources, local experts)
    # arrival order: src0 e0 e0, src0 e2, src1 e0, src1 e1 e1 e1
    tags = ["0a", "0b", "0c", "1a", "1b", "1c", "1d"]
    order, per_expert = regroup(counts)
    assert [tags[i] for i in order] == ["0a", "0b", "1a", "1b", "1c", "1d", "0c"]
    assert per_expert.tolist() == [3, 3, 1]
    empty, none = regroup(torch.zeros(2, 2, dtype=torch.long))
    assert empty.numel() == 0 and none.tolist() == [0, 0]


def test_dry_run_places_experts_over_ep_as_a_run_does(tmp_path):
    """`--ep 8` over 64 ranks (the interface of issue 41): a rank holds 1/64 of every
    parameter, experts included, as without ep, but FSDP2 gathers 1 of Mixtral's 8
    experts per MoE layer instead of 8: the gather buffers shrink by 7/8 of the experts."""
    from llmtk.train.config import TrainConfig
    from llmtk.train.layout.dryrun import dry_run
    from tests.util import llmtk

    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "x"}\n')
    p = llmtk("train", "--model", "mixtral-8x7b", "--data", str(data), "--out",
              str(tmp_path / "run"), "--dry-run", "--nproc-per-node", "8", "--nnodes", "8",
              "--ep", "8", in_process=True)
    assert p.returncode == 0, p.stderr
    out = p.stdout.decode()
    assert "dp_shard 64 (ep 8)" in out and "all layers (0)" in out and "fsdp_buffers" in out
    plans = {ep: dry_run(TrainConfig(model="mixtral-8x7b", ep=ep, parallel="fsdp"),
                         64).plans[0] for ep in (1, 8)}
    m = dry_run(TrainConfig(model="mixtral-8x7b"), 1).plan.mcfg
    experts = 3 * m.n_experts * m.d_model * m.expert_ffn  # one layer's routed experts
    assert plans[8].params == pytest.approx(plans[1].params, rel=1e-12)
    assert plans[1].block_params - plans[8].block_params == experts * 7 / 8


@pytest.mark.parametrize("kw", [
    {}, {"top_k": 1, "n_experts": 8}, {"n_shared_experts": 1, "first_dense": 1},
    {"router_aux_loss": 0.01, "router_z_loss": 1e-3}])
def test_moe_activations_are_counted_exactly(kw):
    """What the dry-run (llmtk.estimate.activations) counts for a MoE layer's activations
    is what autograd saves in one fp32 process, to the byte: the per-expert copies of the
    tokens and their outputs, the weighted hidden layer, the indices, the router's
    scores (before: 19% under on this shape)."""
    import torch

    from llmtk.estimate.activations import llmtk_saved_bytes
    from llmtk.train.measure import saved_for_backward
    from llmtk.train.model.gpt import GPT, ModelConfig

    cfg = ModelConfig(**{"vocab_size": 257, "seq_len": 32, "n_layer": 3, "d_model": 64,
                         "n_head": 4, "n_experts": 4, "top_k": 2, "expert_hidden": 32, **kw})
    torch.manual_seed(0)
    model = GPT(cfg)
    idx = torch.randint(0, 257, (2, 32))
    with saved_for_backward(model) as saved:
        model(idx, idx)
    assert saved["bytes"] == llmtk_saved_bytes(cfg, 2, 32)["total"]


@pytest.mark.integration
@pytest.mark.parametrize("nproc,args,layout", [
    (2, ["--ep", "2"], "dp_shard 2 (ep 2)"), (2, ["--tp", "2"], "tp 2"),
    (4, ["--ep", "2", "--tp", "2"], "dp_shard 2 x tp 2 (ep 2)")])
def test_memory_check_of_moe_layouts_is_the_dry_runs(tmp_path, nproc, args, layout):
    """benchmarks/memory_check.py with 4 experts, top-2 on gloo processes: weights,
    gradients and AdamW states to the byte, activations to 16 bytes (the token ids, a
    view of the micro-batch's 2 windows one column wider than the formula's). Under ep
    each rank computes the rows its experts received, which routing need not split
    evenly (it moves with the balancing bias, and a last-bit difference between CPUs can
    flip a choice), where the dry run counts the mean: the report counts each rank at
    its own routing, the rows beyond the mean times expert_row_bytes. Measured at the
    default bias rate: against the mean alone 0.955 and 1.045 under ep 2, 0.957 and
    1.043 under ep 2 x tp 2 (before the dry run counted the dispatch's own tensors: 1.12
    on one rank, when this test pinned the rate to 0.003)."""
    from tests.test_train_memory import assert_within, memory_check

    r = memory_check(tmp_path, nproc, "--experts", "4", "--top-k", "2", *args)
    assert r["layout"] == layout
    assert_within(r)
    token_ids = 2 * 8  # --batch-size 2 windows, one int64 column more than counted
    for rank, measured in enumerate(r["measured"]):
        for part in ("weights", "gradients", "optimizer"):
            assert measured[part] == r["predicted"][part]
        at_routing = r["routing"][rank]["activations"] if "routing" in r \
            else r["predicted"]["activations"]
        assert measured["activations"] == at_routing + token_ids, rank
    if "--ep" not in args:
        assert "routing" not in r
        return
    # dropless: every assignment is computed on some rank, each tp rank routes them all
    rows = [x["routed_rows"] for x in r["measured"]]
    assert [x["rows"] for x in r["routing"]] == rows
    assert sum(rows) == nproc * r["routing"][0]["mean_rows"]


def test_compile_is_off_by_default_under_ep():
    """--ep has never run compiled on a GPU (the dispatch reads its split sizes on the
    host): the GPU default leaves it off; dense layouts keep theirs."""
    from llmtk.train.layout.mesh import Layout, compiles_by_default

    assert not compiles_by_default(Layout(dp_shard=2, ep=2), lora=False, cuda=True)
    assert compiles_by_default(Layout(dp_shard=2), lora=False, cuda=True)
