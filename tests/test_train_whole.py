"""The whole model that sampling and --eval-tasks run on rank 0 (llmtk.train.layout.whole): the
pipeline stages' state dicts merge into one, and the copy built from a gathered state
computes exactly what the trained model computes, without touching the run's RNG.
(Under tensor parallelism, with real processes: tests/test_train_parallel.py.)"""

import pytest
import torch

from llmtk.errors import LlmtkError
from llmtk.train.layout.mesh import Layout
from llmtk.train.layout.whole import build_whole, gather_state, merge_stages
from llmtk.train.model.gpt import GPT, ModelConfig
from llmtk.train.model.lora import add_lora

CFG = ModelConfig(vocab_size=257, n_layer=2, d_model=32, n_head=4, n_kv_head=2, seq_len=16)


def test_pipeline_stages_merge_into_one_state_dict():
    emb = torch.randn(4, 2)
    first = {"tok_emb.weight": emb, "layers.0.w": torch.ones(2)}
    last = {"layers.1.w": torch.zeros(2), "norm.weight": torch.ones(2),
            "lm_head.weight": emb.clone()}
    merged = merge_stages([first, last])
    assert list(merged) == ["tok_emb.weight", "layers.0.w", "layers.1.w", "norm.weight",
                            "lm_head.weight"]
    assert merged["layers.0.w"] is first["layers.0.w"]
    # a tied matrix on the first and last stage: the same values, kept once per key
    assert merge_stages([first, {"tok_emb.weight": emb.clone()}])["tok_emb.weight"] is emb


def test_stages_holding_one_key_with_other_values_are_an_error():
    with pytest.raises(LlmtkError) as e:
        merge_stages([{"tok_emb.weight": torch.zeros(2)}, {"a": torch.ones(1)},
                      {"tok_emb.weight": torch.ones(2)}])
    assert str(e.value) == ("pipeline stage 2 holds tok_emb.weight with other values than an "
                            "earlier stage: the stages' copies went out of sync")


@pytest.mark.parametrize("lora", [None, {"rank": 4, "alpha": 8.0, "targets": "q,v,o,down",
                                         "dropout": 0.0}])
def test_the_whole_copy_computes_what_the_model_computes(lora):
    torch.manual_seed(0)
    model = GPT(CFG)
    if lora:
        add_lora(model, **lora)
        with torch.no_grad():  # trained adapters (B starts at zero)
            for name, p in model.named_parameters():
                if ".lora_B." in name:
                    p.normal_(std=0.1)
    model.eval()
    state = gather_state(model, Layout(), rank=0)
    assert all(t.device.type == "cpu" for t in state.values())
    rng = torch.get_rng_state()
    copy = build_whole(CFG, state, "cpu", lora)
    assert torch.equal(torch.get_rng_state(), rng)  # built on meta: no random draws
    assert not copy.training
    assert copy.lm_head.weight is copy.tok_emb.weight  # still tied
    x = torch.randint(0, 257, (2, 12))
    assert torch.equal(copy(x)[0], model(x)[0])
    gens = [m.generate(x[:1, :3], 8, temperature=0.8, top_k=50,
                       generator=torch.Generator().manual_seed(7)) for m in (model, copy)]
    assert torch.equal(*gens)


class _Model:
    def __init__(self):
        self.training = True

    def eval(self):
        self.training = False

    def train(self):
        self.training = True


@pytest.mark.parametrize("parallel,layout,rank,runs", [
    ("none", Layout(), 0, "own"),
    ("ddp", Layout(dp_replicate=2), 0, "own"),
    ("ddp", Layout(dp_replicate=2), 1, None),
    # FSDP2 alone: its forward is collective and the plain model's; every rank runs the
    # sharded model itself, no whole fp32 copy on rank 0's device
    ("fsdp", Layout(dp_shard=2), 0, "own"),
    ("fsdp", Layout(dp_shard=2), 1, "own"),
    ("fsdp", Layout(dp_replicate=2, dp_shard=2), 3, "own"),
])
def test_what_each_rank_samples_with_when_the_model_is_not_split_by_tp_or_pp(
        parallel, layout, rank, runs):
    from types import SimpleNamespace

    from llmtk.train.config import TrainConfig
    from llmtk.train.layout.plan import RunPlan
    from llmtk.train.layout.whole import whole_model
    from llmtk.train.runtime import Dist

    model = _Model()
    # world 1 as far as collectives go: the barrier is a no-op, and a gather would fail
    built = SimpleNamespace(model=model, raw=model)
    hsdp = parallel == "fsdp" and layout.dp_replicate > 1
    plan = RunPlan.resolve(TrainConfig(data=["x"], out="o", parallel=parallel,
                                       dp_replicate=layout.dp_replicate if hsdp else 1),
                           layout.world, CFG, cuda=False)
    assert plan.layout == layout and not plan.copied
    with whole_model(built, plan, Dist(rank=rank)) as got:
        assert got is (model if runs == "own" else None)
        assert model.training is (runs is None)
    assert model.training
