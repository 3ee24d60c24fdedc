"""The parallel layout (llmtk.train.layout.mesh): one mesh pp x dp_replicate x dp_shard x cp x tp,
its inference and its one-line errors naming the flag, before anything starts."""

import pytest

from llmtk.errors import ConfigError
from llmtk.train.layout.mesh import Layout, ParallelSpec, check_model, plan_layout
from llmtk.train.model.config import PRESETS
from tests.util import llmtk


def test_dp_shard_is_the_rest_of_the_world():
    assert plan_layout(32, ParallelSpec(tp=8, pp=2)) == ("fsdp", Layout(pp=2, dp_shard=2, tp=8))
    assert plan_layout(4, ParallelSpec(dp_replicate=2)) == \
        ("fsdp", Layout(dp_replicate=2, dp_shard=2))
    assert plan_layout(4, ParallelSpec(parallel="fsdp")) == ("fsdp", Layout(dp_shard=4))
    assert plan_layout(4) == ("ddp", Layout(dp_replicate=4))  # auto, no mesh asked: DDP
    assert plan_layout(1, ParallelSpec(parallel="fsdp")) == ("none", Layout())


def test_coordinates_put_tp_innermost_and_pp_outermost():
    layout = Layout(pp=2, dp_replicate=1, dp_shard=2, tp=2)
    assert [layout.coords(r)["tp"] for r in range(4)] == [0, 1, 0, 1]
    assert [layout.coords(r)["pp"] for r in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    # a tp group reads one batch; the dp ranks of a stage read different ones
    assert [layout.dp_rank(r) for r in range(8)] == [0, 0, 1, 1, 0, 0, 1, 1]


def test_a_cp_group_sits_between_dp_shard_and_tp_and_reads_one_batch():
    assert plan_layout(8, ParallelSpec(cp=2, tp=2)) == ("fsdp", Layout(dp_shard=2, cp=2, tp=2))
    layout = Layout(dp_shard=2, cp=2, tp=2)
    assert [layout.coords(r)["cp"] for r in range(8)] == [0, 0, 1, 1, 0, 0, 1, 1]
    assert [layout.dp_rank(r) for r in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert layout.dp == 2


def test_ep_is_borrowed_from_dp_shard_times_cp():
    assert plan_layout(4, ParallelSpec(ep=4, cp=2)) == ("fsdp", Layout(dp_shard=2, cp=2, ep=4))
    with pytest.raises(ConfigError) as e:
        plan_layout(6, ParallelSpec(ep=4))
    assert e.value.key == "ep" and "4 does not divide --dp-shard 6 x --cp 1 = 6" in str(e.value)


@pytest.mark.parametrize("world,kw,key,words", [
    (4, {"tp": 3}, "tp", "--tp 3 x --pp 1 x --dp-replicate 1 = 3 does not divide the 4"),
    (8, {"dp_replicate": 2, "dp_shard": 2}, "dp_shard", "= 4 processes, but there are 8"),
    (4, {"parallel": "ddp", "dp_replicate": 2}, "dp_replicate", "needs --parallel fsdp"),
    (2, {"parallel": "none"}, "parallel", "none runs one process, but there are 2"),
    (4, {"parallel": "ddp", "cp": 2}, "cp", "needs --parallel fsdp"),
    (6, {"cp": 4}, "cp", "--dp-replicate 1 x --cp 4 = 4 does not divide the 6"),
])
def test_a_layout_that_does_not_fit_names_its_flag(world, kw, key, words):
    with pytest.raises(ConfigError) as e:
        plan_layout(world, ParallelSpec(**kw))
    assert e.value.key == key and words in str(e.value)


@pytest.mark.parametrize("tp,pp,words", [
    (5, 1, "tp: 5 does not divide the model's 12 attention heads"),
    (16, 1, "tp: 16 does not divide the model's 8 key/value heads"),
    (1, 40, "pp: 40 stages for 32 layers"),
])
def test_the_model_must_split_evenly(tp, pp, words):
    with pytest.raises(ConfigError) as e:
        check_model(Layout(tp=tp, pp=pp), PRESETS["llama3-8b"] if tp == 16 or pp > 1
                    else PRESETS["llmtk-124m"])
    assert words in str(e.value)
    check_model(Layout(tp=8, pp=4), PRESETS["llama3-8b"])


def test_the_command_refuses_a_layout_before_starting_processes(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "x"}\n')
    p = llmtk("train", "--data", str(data), "--out", str(tmp_path / "o"),
              "--nproc-per-node", "4", "--dp-replicate", "3", in_process=True)
    assert p.returncode == 2
    assert p.stderr.decode().strip().splitlines()[-1] == (
        "llmtk: error: --dp-replicate: --tp 1 x --pp 1 x --dp-replicate 3 = 3 does not "
        "divide the 4 processes (--nnodes x --nproc-per-node)")
    assert not (tmp_path / "o").exists()


def test_the_command_refuses_a_model_the_layout_cannot_split_before_starting_processes(
        tmp_path):
    """The launcher resolves the run plan with the run's own model shape (not a placeholder
    one): a tp degree that does not divide the heads starts no process."""
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "x"}\n')
    p = llmtk("train", "--data", str(data), "--out", str(tmp_path / "o"), "--layers", "2",
              "--d-model", "48", "--heads", "3", "--nproc-per-node", "2", "--tp", "2",
              in_process=True)
    assert p.returncode == 2
    assert p.stderr.decode().strip().splitlines()[-1] == (
        "llmtk: error: --tp: 2 does not divide the model's 3 attention heads")
    assert not (tmp_path / "o").exists()


def plan_spec(**flags):
    """The run plan's section (plan.PlanSpec) of a TrainConfig with these flags."""
    from llmtk.train.config import TrainConfig, section
    from llmtk.train.layout.plan import PlanSpec

    return section(PlanSpec, TrainConfig(**flags))


@pytest.mark.parametrize("layout,flags,key", [
    (Layout(pp=2), {"checkpoint_format": "full"}, "checkpoint_format"),
    (Layout(pp=2), {"grad_accum": 1}, "grad_accum"),  # 1f1b: a microbatch per stage
    (Layout(pp=2), {"grad_accum": 5, "pp_schedule": "interleaved-1f1b"}, "grad_accum"),
])
def test_what_is_not_trained_yet_is_refused_naming_its_flag(layout, flags, key):
    from llmtk.train.layout.mesh import check_trainable

    base = {"grad_accum": 2}
    with pytest.raises(ConfigError) as e:
        check_trainable(layout, plan_spec(**{**base, **flags}))
    assert e.value.key == key
    # Tensor and pipeline parallelism take LoRA, sampling and task evaluation like any
    # other layout (tests/test_train_parallel.py and test_train_pipeline.py train them).
    for more in ({"lora_rank": 8}, {"sample_every": 10}, {"eval_tasks": ["t.jsonl"]}):
        check_trainable(Layout(tp=2, dp_shard=2), plan_spec(**{**base, **more}))
        check_trainable(Layout(pp=2), plan_spec(**{**base, **more}))
    check_trainable(Layout(pp=2, tp=2), plan_spec(**base))
    # interleaved-1f1b runs the microbatches in rounds of pp: 3 is one round, 6 three
    for ga in (3, 6):
        check_trainable(Layout(pp=2), plan_spec(grad_accum=ga,
                                                pp_schedule="interleaved-1f1b"))


def test_lora_under_tensor_parallel_is_not_compiled():
    """Compiled, the adapters' DTensor gradients came out wrong (docs/train.md): --compile is
    refused with --lora-rank under --tp, and its GPU default is off there."""
    from llmtk.train.layout.mesh import check_trainable, compiles_by_default

    cfg = plan_spec(lora_rank=4, compile=True)
    with pytest.raises(ConfigError) as e:
        check_trainable(Layout(tp=2), cfg)
    assert e.value.key == "compile" and "--tp 2 and --lora-rank" in str(e.value)
    check_trainable(Layout(dp_shard=2), cfg)  # FSDP2 alone compiles LoRA
    assert not compiles_by_default(Layout(tp=2), lora=True, cuda=True)
    assert compiles_by_default(Layout(dp_shard=2), lora=True, cuda=True)
    assert compiles_by_default(Layout(tp=2), lora=False, cuda=True)
    assert not compiles_by_default(Layout(), lora=False, cuda=False)
