"""Pipeline parallelism (`--pp`, llmtk/train/layout/pipeline.py): the split and its one-line errors,
stages that keep the whole model's names and initial weights, and on CPU (gloo) real
multi-process runs that match one process, resume each other's checkpoints across layouts
and resume exactly after a SIGKILL."""

import json
import os
import shutil

import pytest

from llmtk.errors import ConfigError
from llmtk.train.layout.mesh import Layout, pipeline_split
from tests.tolerance import FP64, PARITY_REL
from tests.train_runs import (
    events,
    losses,
    planned,
    rows,
    run_train,
    same_samples_and_scores,
    task_files,
    torch_rng,
    torchrun_with_faults,
    train_corpus,  # noqa: F401 (the corpus fixture)
)
from tests.util import llmtk

# ---------------------------------------------------------------- the split


@pytest.mark.parametrize("layout,flags,split", [
    (Layout(pp=2), {}, [4, 4]),
    (Layout(pp=3), {}, [3, 3, 2]),                    # the first stages take one more
    (Layout(pp=2), {"pp_layers": "3,5"}, [3, 5]),
    (Layout(pp=2), {"pp_schedule": "interleaved-1f1b"}, [2, 2, 2, 2]),  # 2 per rank
    (Layout(pp=2), {"pp_schedule": "interleaved-1f1b", "pp_layers": "1,1,1,1,2,2"},
     [1, 1, 1, 1, 2, 2]),
    (Layout(), {}, [8]),
])
def test_the_split_gives_each_stage_its_blocks(layout, flags, split):
    assert pipeline_split(layout, 8, flags.get("pp_layers"),
                          flags.get("pp_schedule", "1f1b")) == split


@pytest.mark.parametrize("layout,flags,key,words", [
    (Layout(pp=2), {"pp_layers": "2,3,3"}, "pp_layers", "gives 3 stages, but --pp is 2"),
    (Layout(pp=2), {"pp_layers": "0,8"}, "pp_layers", "stage 0 has 0 layers"),
    (Layout(pp=2), {"pp_layers": "3,4"}, "pp_layers", "adds up to 7 layers, but the model "
                                                       "has 8"),
    (Layout(pp=2), {"pp_layers": "3;5"}, "pp_layers", "comma-separated layer counts"),
    (Layout(pp=2), {"pp_layers": "2,2,4", "pp_schedule": "interleaved-1f1b"}, "pp_layers",
     "interleaved-1f1b needs a multiple of --pp 2, at least 4"),
    (Layout(), {"pp_layers": "8"}, "pp_layers", "needs --pp > 1"),
    (Layout(tp=2), {"pp_schedule": "interleaved-1f1b"}, "pp_schedule", "interleaved-1f1b "
                                                                       "needs --pp > 1"),
    (Layout(pp=5), {"pp_schedule": "interleaved-1f1b"}, "pp", "10 stages (2 per rank, --pp "
                                                              "5) for 8 layers"),
])
def test_a_split_that_cannot_run_names_its_flag(layout, flags, key, words):
    with pytest.raises(ConfigError) as e:
        pipeline_split(layout, 8, flags.get("pp_layers"), flags.get("pp_schedule", "1f1b"))
    assert e.value.key == key and words in str(e.value)


def test_the_command_refuses_a_bad_split_before_starting_processes(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "x"}\n')
    p = llmtk("train", "--data", str(data), "--out", str(tmp_path / "o"), "--layers", "4",
              "--nproc-per-node", "2", "--pp", "2", "--grad-accum", "2", "--pp-layers", "1,2",
              in_process=True)
    assert p.returncode == 2
    assert p.stderr.decode().strip().splitlines()[-1] == (
        "llmtk: error: --pp-layers: adds up to 3 layers, but the model has 4")
    assert not (tmp_path / "o").exists()
    p = llmtk("train", "--data", str(data), "--out", str(tmp_path / "o"), "--layers", "4",
              "--nproc-per-node", "2", "--pp", "2", in_process=True)  # --grad-accum 1
    assert p.returncode == 2 and "--grad-accum: 1 microbatches for --pp 2" in p.stderr.decode()
    p = llmtk("train", "--data", str(data), "--out", str(tmp_path / "o"), "--layers", "4",
              "--nproc-per-node", "2", "--pp-layers", "2,2", in_process=True)  # no --pp
    assert p.returncode == 2 and "--pp-layers: needs --pp > 1" in p.stderr.decode()
    assert not (tmp_path / "o").exists()


def test_dry_run_plans_a_ranks_stages():
    """--dry-run counts each pp rank's blocks from the same split the trainer uses:
    --pp-layers, and under interleaved-1f1b the stages s % pp of the rank."""
    from llmtk.train.layout.dryrun import plan_ranks
    from llmtk.train.model.config import preset

    mcfg = preset("tiny", vocab_size=256, n_layer=8)
    plans = plan_ranks(planned(mcfg, Layout(pp=2), pp_layers="1,7"))
    assert [(p.kind, p.layers) for p in plans] == [("first stage", 1), ("last stage", 7)]
    plans = plan_ranks(planned(mcfg, Layout(pp=2), pp_schedule="interleaved-1f1b",
                               pp_layers="1,2,3,2"))
    assert [p.layers for p in plans] == [4, 4]  # rank 0: stages 0, 2; rank 1: 1, 3


# ---------------------------------------------------------------- stages of one model


def _tiny(**kw):
    from llmtk.train.model.gpt import ModelConfig

    return ModelConfig(vocab_size=256, n_layer=4, d_model=32, n_head=4, seq_len=16, **kw)


def test_stages_chain_to_the_whole_models_loss_and_keep_its_names():
    """Three stages of one GPT (sharing its modules) give its loss, also with packed
    documents (SFT's mask reaches every stage), and hold exactly its entries."""
    import torch

    from llmtk.train.layout.pipeline import StagePart
    from llmtk.train.model.gpt import GPT

    torch.manual_seed(0)
    model = GPT(_tiny())
    parts = [StagePart(model, [0], True, False), StagePart(model, [1, 2], False, False),
             StagePart(model, [3], False, True)]
    x = torch.randint(0, 256, (2, 16))
    y = torch.randint(0, 256, (2, 16))
    doc = torch.tensor([[0] * 5 + [1] * 11, [0] * 16])
    for d in (None, doc):
        h = x
        for part in parts:
            h = part(h, y, d)
        assert torch.equal(h, model(x, y, d)[1])
    assert torch.equal(parts[2](parts[1](parts[0](x, y), y), y, scale=torch.tensor([0.5])),
                       0.5 * model(x, y)[1])
    names = set(model.state_dict())
    held = [set(p.state_dict()) for p in parts]
    assert set.union(*held) == names and all(k in names for h in held for k in h)
    # the tied head's copy on the last stage is under the embedding's name too
    assert {"tok_emb.weight", "lm_head.weight", "layers.3.mlp.w2.weight"} <= held[2]
    assert all(parts[i].holds(k) == (k in held[i]) for i in range(3) for k in names)


@pytest.mark.parametrize("tied", [True, False])
def test_a_stage_materialised_alone_gets_the_whole_models_initial_weights(tied):
    """The other stages' blocks stay on the meta device: their draws are made and
    discarded, so the last stage's weights (and its tied copy of the embedding) are the
    ones a whole-model init with the same seed gives."""
    import torch

    from llmtk.train.layout.pipeline import StagePart
    from llmtk.train.model.gpt import GPT

    cfg = _tiny(tie_embeddings=tied)
    whole = GPT(cfg)
    torch.manual_seed(7)
    whole.init_weights()
    with torch.device("meta"):
        model = GPT(cfg)
    part = StagePart(model, [2, 3], False, True)
    part.to_empty(device="cpu")
    torch.manual_seed(7)
    model.init_weights()
    want = whole.state_dict()
    got = part.state_dict()
    assert got and all(torch.equal(v, want[k]) for k, v in got.items())
    assert hasattr(part, "tok_emb") == tied  # untied: the head is the stage's own
    if tied:
        assert part.lm_head.weight is part.tok_emb.weight


# ---------------------------------------------------------------- real runs (gloo)

# 4 blocks: two stages of two (1f1b), or four of one (interleaved-1f1b, two per rank);
# the step's 2 micro-steps are the pipeline's 2 microbatches.
# fp64: the stages sum the tied embedding's two gradients and the grad norm's squares in
# another order than one process, and 20 fp32 steps amplify that rounding past any fixed
# relative bound (tests/tolerance.py PARITY_REL); in fp64 the runs agree within PARITY_REL.
PP = ["--layers", "4", "--steps", "20", "--batch-size", "2", "--grad-accum", "2",
      "--val-fraction", "0.05", "--eval-every", "10", "--eval-batches", "2", *FP64]
# sampling and task evaluation run on a whole copy gathered from the stages (whole.py)
SAMPLE = ["--sample-every", "10", "--sample-tokens", "12", "--prompt", "def",
          "--eval-max-new-tokens", "4"]


def _matches(ref, out, rel=PARITY_REL):
    """The same steps, losses and grad norms within `rel` (fp64), lr and tokens exactly,
    and the same validation losses."""
    a, b = losses(ref), losses(out)
    assert [x[0] for x in a] == [x[0] for x in b]
    for (_, _, _, lra, ta), (_, _, _, lrb, tb) in zip(a, b, strict=True):
        assert (lra, ta) == (lrb, tb)
    _same_curve(b, a, rel)
    va = [r["val_loss"] for r in rows(ref) if "val_loss" in r]
    vb = [r["val_loss"] for r in rows(out) if "val_loss" in r]
    assert len(va) == 2 and vb == pytest.approx(va, rel=rel)


def _same_curve(got, want, rel=PARITY_REL):
    """The same steps with their losses and grad norms within `rel`."""
    assert [x[0] for x in got] == [x[0] for x in want]
    for x, y in zip(got, want, strict=True):
        assert x[1] == pytest.approx(y[1], rel=rel) and x[2] == pytest.approx(y[2], rel=rel), x[0]


@pytest.fixture(scope="module")
def one(corpus, tmp_path_factory):
    d = tmp_path_factory.mktemp("one")
    out = str(d / "run")
    run_train(corpus, out, *PP, *SAMPLE, *task_files(d), "--checkpoint-every", "10")
    return out


@pytest.fixture(scope="module")
def pp2(corpus, tmp_path_factory):
    d = tmp_path_factory.mktemp("pp2")
    out = str(d / "run")
    run_train(corpus, out, *PP, *SAMPLE, *task_files(d), "--nproc-per-node", "2", "--pp", "2",
              "--checkpoint-every", "10")
    return out


@pytest.mark.integration
def test_two_stages_1f1b_match_one_process(pp2, one):
    """20 steps of --pp 2 (1f1b, tied embeddings: the head's copy on stage 1, gradients
    summed with stage 0's): the one-process losses, grad norms and val losses."""
    _matches(one, pp2)
    # rank 0 samples and scores the whole model gathered from both stages: the same text
    # and task scores as one process
    same_samples_and_scores(one, pp2, [10, 20])
    config = json.load(open(os.path.join(pp2, "config.json")))
    assert config["layout"] == {"pp": 2, "dp_replicate": 1, "dp_shard": 1, "cp": 1, "tp": 1,
                                "ep": 1}
    assert config["params"] == json.load(open(os.path.join(one, "config.json")))["params"]


@pytest.mark.integration
def test_each_stage_draws_its_own_random_stream(pp2):
    """Dropout (--lora-dropout) draws from each rank's torch generator; the init left it
    in the same state on every rank, so stage 1 masked its layers exactly as stage 0
    masked its own (all 29 masks of a step, measured by hand). The two stages' saved
    generator states differ now (this run draws nothing after the init)."""
    import torch

    assert not torch.equal(torch_rng(pp2, 10, 0), torch_rng(pp2, 10, 1))


@pytest.mark.integration
def test_a_pipeline_checkpoint_resumes_in_one_process_and_exports(corpus, tmp_path, pp2, one):
    """The pp 2 DCP checkpoint of step 10 (each stage wrote its own blocks under their
    whole-model names) resumes in one process on the one-process curve, and `train
    export` consolidates the final one to the one-process weights."""
    import torch

    from llmtk.train import full_state_dict

    out = str(tmp_path / "resumed")
    os.makedirs(os.path.join(out, "checkpoints"))
    shutil.copytree(os.path.join(pp2, "checkpoints", "step-0000010"),
                    os.path.join(out, "checkpoints", "step-0000010"))
    run_train(corpus, out, *PP)
    assert events(out, "resume")[0]["path"] == "checkpoints/step-0000010"
    after, ref = losses(out), losses(one)[10:]
    assert [x[0] for x in after] == list(range(11, 21))
    _same_curve(after, ref)
    p = llmtk("train", "export", pp2, "-o", str(tmp_path / "model.pt"), in_process=True)
    assert p.returncode == 0, p.stderr
    got = torch.load(tmp_path / "model.pt", weights_only=True)["state_dict"]
    want = full_state_dict(one)
    assert got.keys() == want.keys()
    assert all(torch.allclose(got[k], want[k], atol=1e-5) for k in want)


@pytest.mark.integration
@pytest.mark.slow  # one more 2-process run
def test_a_one_process_checkpoint_resumes_under_two_stages(corpus, tmp_path, one):
    out = str(tmp_path / "staged")
    os.makedirs(os.path.join(out, "checkpoints"))
    shutil.copytree(os.path.join(one, "checkpoints", "step-0000010"),
                    os.path.join(out, "checkpoints", "step-0000010"))
    run_train(corpus, out, *PP, "--nproc-per-node", "2", "--pp", "2")
    assert events(out, "resume")[0]["path"] == "checkpoints/step-0000010"
    after, ref = losses(out), losses(one)[10:]
    assert [x[0] for x in after] == list(range(11, 21))
    _same_curve(after, ref)


@pytest.mark.integration
def test_interleaved_1f1b_matches_one_process(corpus, tmp_path, one):
    """interleaved-1f1b: four stages of one block, stages 0 and 2 on rank 0, 1 and 3 on
    rank 1; --pp-layers gives the split."""
    out = str(tmp_path / "interleaved")
    run_train(corpus, out, *PP, "--nproc-per-node", "2", "--pp", "2",
              "--pp-schedule", "interleaved-1f1b", "--pp-layers", "1,1,1,1")
    _matches(one, out)


TP_PP = ["--nproc-per-node", "4", "--pp", "2", "--tp", "2", "--checkpoint-every", "10"]


@pytest.fixture(scope="module")
def tp_pp(corpus, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("tp_pp") / "run")
    run_train(corpus, out, *PP, *TP_PP)
    return out


@pytest.mark.integration
@pytest.mark.slow  # a 4-process run
def test_tensor_parallel_inside_two_stages_matches_one_process(tp_pp, one):
    """tp 2 x pp 2: each stage's matrices split over its tp pair (the residual stream
    passed between stages is sequence-sharded), the tied embedding's two copies
    vocabulary-sharded alike and their gradient shards summed pairwise. A stage's tp
    pair shares one random stream (its dropout masks are slices of one draw), the
    stages do not."""
    import torch

    _matches(one, tp_pp)
    rng = [torch_rng(tp_pp, 10, r) for r in range(4)]
    assert torch.equal(rng[0], rng[1]) and torch.equal(rng[2], rng[3])
    assert not torch.equal(rng[0], rng[2])


@pytest.mark.integration
@pytest.mark.slow  # two more 4-process runs
def test_tp_pp_resumes_exactly_after_sigkill(corpus, tmp_path, tp_pp):
    """tp 2 x pp 2, all four ranks SIGKILLed after step 15 (async DCP checkpoints every
    10): the same command resumes from step 10 and every step equals the uninterrupted
    run, bit for bit (data position and RNG restored on each rank)."""
    out = str(tmp_path / "killed")
    p = torchrun_with_faults(corpus, out, 4, {"kill_after": 15}, *PP, *TP_PP[2:])
    # (the workers are fork-server clients: torchrun sees them fail, not the signal)
    assert p.returncode != 0
    assert 15 <= max(r["step"] for r in rows(out)) < 20  # really interrupted
    run_train(corpus, out, *PP, *TP_PP)
    assert events(out, "resume")[0]["path"] == "checkpoints/step-0000010"
    assert losses(out) == losses(tp_pp)
    assert [r[0] for r in losses(out)] == list(range(1, 21))


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
@pytest.mark.parametrize("flat", [True, False])
def test_dcp_checkpoints_load_with_optimizer_groups_by_name_or_by_index(tmp_path, flat):
    """DCP checkpoints key the optimizer's hyperparameters by parameter name (pipeline
    stages hold different parameters in their group 0); those written before, by group
    index, load too: each into a sharded model's own entries (load_states' DCP path) and
    consolidated (export's path)."""
    import torch
    import torch.distributed.checkpoint as dcp

    from llmtk.train.checkpoint import files as C
    from llmtk.train.checkpoint.checkpointer import dcp_flat, load_states, sharded_states
    from llmtk.train.model.gpt import GPT

    def make():
        torch.manual_seed(0)
        model = GPT(_tiny())
        return model, torch.optim.AdamW(
            [{"params": [p for p in model.parameters() if p.dim() >= 2], "weight_decay": 0.1},
             {"params": [p for p in model.parameters() if p.dim() < 2],
              "weight_decay": 0.0}], lr=1e-3, betas=(0.8, 0.9))

    model, opt = make()
    x = torch.randint(0, 256, (2, 16))
    model(x, x)[1].backward()
    opt.step()
    path = tmp_path / "step"
    dcp.save(sharded_states(model, opt, flat), checkpoint_id=str(path / "dcp"))
    (path / "state.json").write_text(json.dumps({"step": 1, "qkv_layout": C.QKV_LAYOUT}))
    assert dcp_flat(str(path / "dcp")) == flat
    want = opt.state_dict()
    for sharded in (True, False):
        fresh, fresh_opt = make()
        load_states(str(path), fresh, fresh_opt, sharded=sharded)
        got = fresh_opt.state_dict()
        assert [tuple(g["betas"]) for g in got["param_groups"]] == [(0.8, 0.9)] * 2
        assert all(torch.equal(got["state"][i]["exp_avg"], want["state"][i]["exp_avg"])
                   for i in want["state"])
        assert all(torch.equal(a, b) for a, b in zip(fresh.parameters(), model.parameters(),
                                                     strict=True))


@pytest.mark.integration
@pytest.mark.slow  # one more 2-process run
def test_a_non_finite_step_is_skipped_on_every_stage(corpus, tmp_path):
    """A NaN loss on the last stage at step 3: the step's one all-reduce carries every
    stage's squared norms, so both stages skip the update and the `nan` event names the
    bad parameters of both; training goes on."""
    out = str(tmp_path / "nan")
    p = torchrun_with_faults(corpus, out, 2, {"nan_loss": 2}, "--layers", "4", "--steps",
                             "5", "--batch-size", "2", "--grad-accum", "2", "--pp", "2")
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    (nan,) = events(out, "nan")
    assert nan["step"] == 3 and nan["action"] == "skip"
    assert {"tok_emb.weight", "layers.0.attn.wqkv.weight", "layers.3.mlp.w2.weight",
            "norm.weight"} <= set(nan["bad_params"])
    assert [r[0] for r in losses(out)] == [1, 2, 4, 5]


@pytest.mark.integration
@pytest.mark.slow  # one 1-process and one 2-process run
def test_lora_adapters_added_before_the_split_train_as_in_one_process(corpus, tmp_path):
    """--lora-rank under pp 2: the adapters are added to the whole model before it is
    split (and initialised in the whole model's order), the frozen tied embedding needs
    no gradient sum; the adapters' losses and grad norms are the one-process ones."""
    args = ["--layers", "4", "--steps", "4", "--batch-size", "2", "--grad-accum", "2",
            "--lora-rank", "4", *FP64]
    ref, out = str(tmp_path / "one"), str(tmp_path / "pp")
    run_train(corpus, ref, *args)
    run_train(corpus, out, *args, "--nproc-per-node", "2", "--pp", "2")
    a, b = losses(ref), losses(out)
    assert [x[0] for x in b] == [1, 2, 3, 4]
    _same_curve(b, a)
