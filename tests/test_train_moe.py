"""The mixture-of-experts layer (llmtk/train/model/moe.py): routing and grouped compute against a
per-token reference, capacity, the balancing bias and losses, exact parameter counts."""

import json
import math

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from llmtk.train.model.gpt import GPT, ModelConfig, count_params  # noqa: E402
from llmtk.train.model.moe import Balancer, MoE, expert_matmul  # noqa: E402
from tests.tolerance import gamma  # noqa: E402


def small(**kw) -> ModelConfig:
    base = dict(vocab_size=61, seq_len=16, n_layer=2, d_model=32, n_head=4, n_experts=4,
                top_k=2, expert_hidden=16)
    base.update(kw)
    return ModelConfig(**base)


def layer(**kw) -> MoE:
    torch.manual_seed(0)
    return GPT(small(**kw)).layers["0"].mlp


def per_token(moe: MoE, x: torch.Tensor) -> torch.Tensor:
    """The layer's output computed token by token, expert by expert (the definition)."""
    h = x.reshape(-1, x.shape[-1])
    _, _, chosen, weights = moe.route(h)
    e = moe.experts
    out = torch.zeros_like(h)
    for t in range(h.shape[0]):
        for slot in range(moe.k):
            i = chosen[t, slot]
            y = (F.silu(h[t] @ e.w1[i].t()) * (h[t] @ e.w3[i].t())) @ e.w2[i].t()
            out[t] += weights[t, slot] * y
    if moe.shared is not None:
        out += moe.shared(h)
    return out.view_as(x)


@pytest.mark.parametrize("kw", [{}, {"n_shared_experts": 1}, {"router_score": "sigmoid"},
                                {"top_k": 1}, {"top_k": 4}])
def test_grouped_experts_equal_the_per_token_definition(kw):
    moe = layer(**kw)
    x = torch.randn(3, 5, 32)
    assert torch.allclose(moe(x), per_token(moe, x), atol=1e-5)


def test_grouped_kernel_and_fallback_loop_agree_in_values_and_gradients():
    x = torch.randn(10, 16, requires_grad=True)
    w = torch.randn(4, 8, 16, requires_grad=True)
    counts = torch.tensor([3, 0, 4, 3])
    r = torch.randn(10, 8)
    grads = []
    for grouped in (True, False):
        y = expert_matmul(x, w, counts, grouped)
        (y * r).sum().backward()
        grads.append((y.detach(), x.grad.clone(), w.grad.clone()))
        x.grad = w.grad = None
    # the definition: rows 0-2 by expert 0, 3-6 by expert 2, 7-9 by expert 3
    rows = [(slice(0, 3), 0), (slice(3, 7), 2), (slice(7, 10), 3)]
    ref = torch.cat([x[i] @ w[e].t() for i, e in rows])
    # Both paths compute each element as a dot product in some order, each within
    # gamma_n * sum|terms| of exact (tests/tolerance.py): y of 16 terms, x's gradient r @ w
    # of 8, w's gradient r.T @ x over an expert's rows (at most 4); apart by twice that.
    a_x, a_w, a_r = x.detach().abs(), w.detach().abs(), r.abs()
    bound_y = 2 * gamma(16) * torch.cat([a_x[i] @ a_w[e].t() for i, e in rows])
    bound_x = 2 * gamma(8) * torch.cat([a_r[i] @ a_w[e] for i, e in rows])
    bound_w = torch.zeros_like(w)
    for i, e in rows:
        bound_w[e] = 2 * gamma(4) * a_r[i].t() @ a_x[i]
    for a, b, bound in zip(*grads, (bound_y, bound_x, bound_w), strict=True):
        assert ((a - b).abs() <= bound).all()
    assert ((grads[0][0] - ref.detach()).abs() <= bound_y).all()


def test_capacity_drops_the_latest_assignments_of_a_full_expert():
    moe = layer(capacity_factor=0.5, top_k=1)
    x = torch.randn(1, 16, 32)
    h = x.reshape(-1, 32)
    _, _, chosen, _ = moe.route(h)
    cap = math.ceil(0.5 * 16 * 1 / 4)  # 2 per expert
    keep = torch.zeros(16, dtype=torch.bool)
    for e in range(4):
        keep[(chosen[:, 0] == e).nonzero().flatten()[:cap]] = True
    moe.train()
    y = moe(x).reshape(16, 32)
    ref = per_token(moe, x).reshape(16, 32)
    assert torch.allclose(y[keep], ref[keep], atol=1e-5)
    assert torch.equal(y[~keep], torch.zeros_like(y[~keep]))
    assert moe.dropped.item() == (~keep).sum().item() > 0


def test_bias_steers_the_choice_but_not_the_weights():
    moe = layer(top_k=1)
    x = torch.randn(2, 8, 32)
    h = x.reshape(-1, 32)
    logits, scores, chosen, weights = moe.route(h)
    moe.expert_bias[3] = 10.0
    _, _, chosen2, _ = moe.route(h)
    assert (chosen2 == 3).all()
    # top-1: the normalised weight is 1 either way; top-2 keeps the scores' ratio
    moe2 = layer(top_k=2)
    moe2.expert_bias[0] = moe2.expert_bias[1] = 10.0
    _, s, c, w = moe2.route(h)
    assert set(c.flatten().tolist()) == {0, 1}
    want = s[:, :2] / s[:, :2].sum(-1, keepdim=True)
    got = torch.where(c[:, :1] == 0, w, w.flip(-1))  # reorder to (expert 0, expert 1)
    assert torch.allclose(got, want, atol=1e-6)


def test_balancer_moves_the_bias_against_the_load_and_skips_a_skipped_step():
    torch.manual_seed(0)
    cfg = small(n_layer=2, router_bias_rate=0.01)
    model = GPT(cfg)
    model.train()
    b = Balancer(model, 0.01, cfg)
    assert len(b.layers) == 2
    idx = torch.randint(0, 61, (2, 16))
    model(idx, idx)
    counts = b.counts()  # (2 * (4 + 1),)
    assert counts.view(2, 5)[:, :4].sum(1).tolist() == [2 * 16 * 2] * 2  # N * K each
    b.update(torch.tensor([10., 2., 2., 2., 0.] * 2), torch.tensor(1.0))  # a skipped step
    assert all(m.expert_bias.abs().sum() == 0 for m in b.layers.values())
    b.update(torch.tensor([10., 2., 2., 2., 0.] * 2), torch.tensor(0.0))
    for m in b.layers.values():
        assert m.expert_bias.tolist() == pytest.approx([-0.01, 0.01, 0.01, 0.01])
        assert m.tokens_per_expert.sum() == 0  # consumed
    row = b.row()
    assert row["expert_load/0"] == pytest.approx([10 / 16, 2 / 16, 2 / 16, 2 / 16])
    assert row["expert_imbalance/0"] == pytest.approx(2.5)
    assert row["expert_imbalance"] == pytest.approx(2.5)
    assert b.row() == {}  # a window is reported once


def test_the_proportional_rule_moves_the_bias_by_the_clipped_relative_error():
    """rate * clip((mean - load) / mean, -1, 1): an idle expert gains the full rate, one
    at its share nothing, one at 3x its share loses the full rate (clipped from -2);
    the sign rule (DeepSeek-V3) moves all four by the rate."""
    torch.manual_seed(0)
    reduced = torch.tensor([0., 4., 12., 0.5, 0.] * 2)  # mean 4.125 of (0, 4, 12, 0.5)
    moved = {}
    for rule in ("sign", "proportional"):
        cfg = small(router_bias_rate=0.01, router_bias_rule=rule)
        b = Balancer(GPT(cfg), 0.01, cfg)
        b.update(reduced, torch.tensor(0.0))
        moved[rule] = [m.expert_bias.tolist() for m in b.layers.values()]
    mean = 16.5 / 4
    assert moved["sign"] == [pytest.approx([0.01, 0.01, -0.01, 0.01])] * 2
    assert moved["proportional"] == [pytest.approx(
        [0.01, 0.01 * (mean - 4) / mean, -0.01, 0.01 * (mean - 0.5) / mean])] * 2
    with pytest.raises(ValueError, match="router_bias_rule"):
        small(router_bias_rule="ema").validate()


def test_a_layer_that_saw_no_tokens_keeps_its_bias_under_the_proportional_rule():
    cfg = small(router_bias_rate=0.01, router_bias_rule="proportional")
    b = Balancer(GPT(cfg), 0.01, cfg)
    b.update(torch.zeros(10), torch.tensor(0.0))
    assert all(m.expert_bias.abs().sum() == 0 for m in b.layers.values())


def test_aux_losses_change_the_gradient_but_not_the_loss_value():
    idx = torch.randint(0, 61, (2, 16))
    out = {}
    for name, kw in (("plain", {}), ("aux", {"router_aux_loss": 0.1, "router_z_loss": 0.01})):
        torch.manual_seed(0)
        model = GPT(small(**kw))
        _, loss = model(idx, idx)
        loss.backward()
        out[name] = (loss.item(), model.layers["0"].mlp.router.weight.grad.clone(),
                     model.layers["0"].mlp.aux.item())
    assert out["aux"][0] == out["plain"][0]  # the value is the cross-entropy
    assert out["plain"][2] == 0.0 and out["aux"][2] > 0.1  # E * sum f P >= 1 at any load
    assert not torch.allclose(out["aux"][1], out["plain"][1])


def test_balance_loss_is_its_coefficient_at_a_uniform_load():
    moe = layer(router_aux_loss=0.01, top_k=1)
    logits = torch.zeros(8, 4)
    scores = logits.softmax(-1)
    assert moe.aux_loss(logits, scores, torch.tensor([2, 2, 2, 2]), 8).item() == \
        pytest.approx(0.01)


def test_activation_checkpointing_gives_the_same_gradients_and_counts_twice():
    idx = torch.randint(0, 61, (2, 16))
    grads, counts = [], []
    for recompute in (False, True):
        torch.manual_seed(0)
        model = GPT(small(router_aux_loss=0.01))
        model.activation_checkpointing = recompute
        _, loss = model(idx, idx)
        loss.backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
        counts.append(model.layers["0"].mlp.tokens_per_expert.clone())
    for n, g in grads[0].items():
        assert torch.allclose(g, grads[1][n], atol=1e-6), n
    # the recomputed forward counts again: every count doubles, no share changes
    assert torch.equal(counts[1], 2 * counts[0])


def test_deterministic_on_cpu():
    idx = torch.randint(0, 61, (2, 16))
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        model = GPT(small(n_shared_experts=1))
        _, loss = model(idx, idx)
        loss.backward()
        runs.append([p.grad for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*runs, strict=True))


@pytest.mark.parametrize("kw", [{}, {"n_shared_experts": 2}, {"first_dense": 1},
                                {"n_layer": 4, "moe_every": 2, "first_dense": 1},
                                {"tie_embeddings": False, "expert_hidden": None}])
def test_count_params_is_exact(kw):
    cfg = small(**kw)
    assert count_params(cfg) == sum(p.numel() for p in GPT(cfg).parameters())


def test_layer_placement_and_validation():
    cfg = small(n_layer=5, first_dense=1, moe_every=2)
    assert [cfg.is_moe(i) for i in range(5)] == [False, True, False, True, False]
    with pytest.raises(ValueError, match="top_k"):
        small(top_k=5).validate()
    with pytest.raises(ValueError, match="no layer"):
        small(first_dense=2).validate()


def test_init_is_seeded_and_scaled():
    torch.manual_seed(0)
    a = GPT(small())
    torch.manual_seed(0)
    b = GPT(small())
    assert torch.equal(a.layers["1"].mlp.experts.w2, b.layers["1"].mlp.experts.w2)
    e = a.layers["1"].mlp.experts
    assert e.w1.std().item() == pytest.approx(0.02, rel=0.1)
    assert e.w2.std().item() == pytest.approx(0.02 / math.sqrt(4), rel=0.1)
    assert a.layers["1"].mlp.expert_bias.abs().sum() == 0
    assert "layers.1.mlp.expert_bias" in a.state_dict()
    assert "layers.1.mlp.tokens_per_expert" not in a.state_dict()


@pytest.mark.parametrize(("layout", "kw", "key"), [
    ({"cp": 2, "dp_shard": 1}, {"capacity_factor": 1.0}, "cp"),
    ({"cp": 2, "pp": 2, "dp_shard": 1}, {}, "pp")])
def test_layouts_not_built_for_experts_are_refused_naming_the_flag(layout, kw, key):
    """A capacity under cp would cap each rank's part of a micro-batch (others dropped than
    in one process); cp with pp is untested. Every layout of tests/test_train_moe_layouts.py
    and tests/test_train_ep.py plans."""
    from llmtk.errors import ConfigError
    from llmtk.train.layout.mesh import Layout
    from tests.train_runs import planned

    with pytest.raises(ConfigError) as e:
        planned(small(n_layer=4, **kw), Layout(**layout))
    assert e.value.key == key
    for ok, flags in ((Layout(dp_shard=2), {}), (Layout(tp=2, dp_shard=2), {"ep": 2}),
                      (Layout(pp=2, dp_shard=2), {"ep": 2}), (Layout(pp=2, tp=2), {}),
                      (Layout(cp=2), {"ep": 2}), (Layout(cp=2, tp=2), {"ep": 2})):
        planned(small(n_layer=4), ok, **flags)


def _stage_chain(model, x, y, scale=None):
    """Two pipeline stages of `model` (blocks 0-1 with the embedding, 2-3 with the head)
    run as the schedule runs them: the second's backward, then the first's from the
    gradient of its output. Returns the loss."""
    from llmtk.train.layout.pipeline import StagePart

    first, last = StagePart(model, [0, 1], True, False), StagePart(model, [2, 3], False, True)
    out = first(x, y, scale=scale)
    received = out.detach().requires_grad_()
    loss = last(received, y, scale=scale)
    loss.backward()
    out.backward(received.grad)
    return loss


@pytest.mark.parametrize("scale", [None, 0.25])
def test_pipeline_stages_give_every_auxiliary_loss_its_gradient(scale):
    """The auxiliary losses of the first stage's MoE layers reach the gradient in that
    stage's own backward (moe.carry_aux), scaled as the loss is (SFT's micro-step share):
    two stages give the whole model's loss and gradients (fp64, to rounding)."""
    cfg = small(n_layer=4, router_aux_loss=0.1, router_z_loss=0.01, n_shared_experts=1)
    idx = torch.randint(0, 61, (2, 16), generator=torch.Generator().manual_seed(1))
    grads = []
    for staged in (False, True):
        torch.manual_seed(0)
        model = GPT(cfg).double()
        if staged:
            loss = _stage_chain(model, idx, idx, None if scale is None
                                else torch.tensor([scale], dtype=torch.float64))
        else:
            loss = model(idx, idx)[1] * (1.0 if scale is None else scale)
            loss.backward()
        grads.append((loss.item(), {n: p.grad for n, p in model.named_parameters()}))
    (want_loss, want), (got_loss, got) = grads
    assert got_loss == want_loss
    assert want["layers.0.mlp.router.weight"].abs().sum() > 0
    for name, g in want.items():
        assert torch.allclose(got[name], g, rtol=1e-10, atol=1e-14), name


def test_balancer_of_a_stage_spans_the_whole_models_layers():
    """Under pp a stage holds some MoE layers: its count vector has every layer of the
    model (zeros for the others', so every rank all-reduces the same length), its update
    moves only its own layers' bias, and its metrics row has every layer's load."""
    from llmtk.train.layout.pipeline import StagePart

    cfg = small(n_layer=4, first_dense=1)  # layers 1, 2, 3 are MoE
    torch.manual_seed(0)
    model = GPT(cfg)
    part = StagePart(model, [2, 3], False, True)
    b = Balancer(part, 0.01, cfg)
    assert list(b.layers) == ["layers.1.mlp", "layers.2.mlp", "layers.3.mlp"]
    part(torch.randn(2, 16, 32), torch.randint(0, 61, (2, 16)))
    counts = b.counts().view(3, 5)
    assert counts[0].sum() == 0 and counts[1:, :4].sum(1).tolist() == [2 * 16 * 2] * 2
    loads = torch.tensor([[1., 2., 3., 4., 0.], [10., 2., 2., 2., 0.], [2., 2., 2., 10., 0.]])
    b.update(loads.flatten(), torch.tensor(0.0))
    assert model.layers["1"].mlp.expert_bias.abs().sum() == 0  # another stage's layer
    assert model.layers["2"].mlp.expert_bias.tolist() == pytest.approx([-0.01, 0.01, 0.01, 0.01])
    row = b.row()
    assert row["expert_load/1"] == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert row["expert_imbalance/3"] == pytest.approx(2.5)
    empty = Balancer(StagePart(model, [0], True, False), 0.01, cfg)  # a dense stage
    assert empty and empty.counts().tolist() == [0.0] * 15


def test_qwen3_style_attention_own_head_dim_and_qk_norm():
    """Head dim 16 x 4 heads != d_model 32, q and k RMS-normalised per head before rotary."""
    cfg = small(explicit_head_dim=16, qk_norm=True, n_kv_head=2)
    torch.manual_seed(0)
    model = GPT(cfg)
    assert count_params(cfg) == sum(p.numel() for p in model.parameters())
    attn = model.layers["0"].attn
    assert attn.wqkv.weight.shape == ((4 + 2 * 2) * 16, 32) and attn.wo.weight.shape == (32, 64)
    assert attn.q_norm.weight.shape == (16,)
    idx = torch.randint(0, 61, (2, 16))
    _, loss = model(idx, idx)
    loss.backward()
    assert attn.q_norm.weight.grad.abs().sum() > 0
    # the norm is applied: scaling q_norm's weight changes the output
    before = model(idx)[0]
    with torch.no_grad():
        attn.q_norm.weight.mul_(3.0)
    assert not torch.allclose(model(idx)[0], before)


def test_lora_on_routed_experts_is_each_experts_own_low_rank_update():
    """--lora-targets experts: expert e of each weight computes with w[e] + (alpha/r)·B[e]·A[e]
    (checked against that sum for one expert, and the whole model against its merged
    state dict), only the adapters get gradients, the grouped kernel and the per-expert
    loop agree, and a plain checkpoint loads into the adapted model."""
    from llmtk.train.model.lora import LoRAExperts, add_lora, merged_state_dict

    cfg = small(n_layer=2, n_shared_experts=1)
    idx = torch.randint(0, 61, (2, 16), generator=torch.Generator().manual_seed(1))
    torch.manual_seed(0)
    model = GPT(cfg)
    plain_state = {k: v.double() for k, v in model.state_dict().items()}
    add_lora(model, rank=4, alpha=8, targets="experts")
    model.double()
    experts = model.layers["0"].mlp.experts
    assert isinstance(experts, LoRAExperts) and experts.lora_A["w2"].shape == (4, 4, 16)
    assert model.layers["0"].mlp.shared.w1.__class__ is torch.nn.Linear  # not a target
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.normal_(std=0.1)  # as after training (B = 0 at init)
    _, loss = model(idx, idx)
    loss.backward()
    grads = {n for n, p in model.named_parameters() if p.grad is not None}
    assert grads == {f"layers.{i}.mlp.experts.lora_{ab}.{w}" for i in "01" for ab in "AB"
                     for w in ("w1", "w3", "w2")}
    # the definition, in fp64: each expert's weight plus (8/4)·B[e]·A[e]
    state = model.state_dict()
    want = dict(plain_state)
    for i in "01":
        for w in ("w1", "w3", "w2"):
            key = f"layers.{i}.mlp.experts"
            want[f"{key}.{w}"] = plain_state[f"{key}.{w}"] + 2.0 * torch.bmm(
                state[f"{key}.lora_B.{w}"], state[f"{key}.lora_A.{w}"])
    plain = GPT(cfg).double()
    plain.load_state_dict(want)
    with torch.no_grad():  # fp64: only the summation order differs
        assert torch.allclose(plain(idx)[0], model(idx)[0], rtol=0, atol=1e-12)
    # train export's merge forms B·A in fp32 (as for every adapter): within a few fp32
    # ulps of these weights (|w| < 1)
    merged = merged_state_dict(state, cfg.to_dict(), alpha=8)
    assert merged.keys() == want.keys()
    assert all(torch.allclose(merged[k], want[k], rtol=0, atol=2 ** -20) for k in want)
    fresh = GPT(cfg).double()
    add_lora(fresh, rank=4, targets="experts")
    # a plain checkpoint: the adapters (all that is missing) keep their init
    assert all(".lora_" in k for k in fresh.load_state_dict(plain_state, strict=False)
               .missing_keys)
    base = GPT(cfg).double()
    base.load_state_dict(plain_state)
    with torch.no_grad():
        assert torch.equal(fresh(idx)[0], base(idx)[0])  # B = 0: the base model

    # fp32, widths the kernel takes (rank 4 x 4 bytes): the grouped kernel and the loop
    outs = []
    for grouped in (True, False):
        torch.manual_seed(0)
        m = GPT(cfg)
        add_lora(m, rank=4, targets="experts")
        with torch.no_grad():
            for p in m.parameters():
                if p.requires_grad:
                    p.normal_(std=0.1)
        for block in m.layers.values():
            block.mlp.experts.grouped = grouped
        _, loss = m(idx, idx)
        loss.backward()
        outs.append((loss.detach(), m.layers["1"].mlp.experts.lora_A["w1"].grad))
    assert torch.allclose(outs[0][0], outs[1][0], rtol=1e-6)
    assert torch.allclose(outs[0][1], outs[1][1], rtol=1e-5, atol=1e-7)  # summation order


def test_dry_run_counts_the_expert_adapters_as_they_are_placed():
    """--dry-run with --lora-targets experts under --ep 2 --tp 2 (dp_shard 2): a rank holds
    1/dp_shard of each adapter, and 1/tp more of those split over tp (placement's
    EXPERT_ADAPTER_DIM: A of w2 and B of w1, w3, on the hidden width): per MoE layer A of
    w1, w3 (4 x 4 x 32) and B of w2 (4 x 32 x 4) whole over tp, B of w1, w3 (4 x 16 x 4)
    and A of w2 (4 x 4 x 16) split."""
    from llmtk.train.layout.dryrun import plan_ranks
    from llmtk.train.layout.mesh import Layout
    from tests.train_runs import planned

    (rank,) = plan_ranks(planned(small(n_layer=4), Layout(tp=2, dp_shard=2), ep=2,
                                 lora_rank=4, lora_targets="experts"))
    whole, split = 3 * 4 * 4 * 32, 3 * 4 * 16 * 4
    assert rank.trainable == 4 * (whole / 2 + split / 4)


@pytest.mark.parametrize("kw", [{}, {"n_shared_experts": 1, "first_dense": 1}])
@pytest.mark.parametrize("targets", ["q,k,v,o,experts", "q,k,v,o,gate,up,down,experts",
                                     "q,k,v,o,gate,up,down", "v,experts"])
def test_estimate_counts_the_adapters_lora_adds_to_a_moe_model(kw, targets):
    """`llmtk estimate --lora-rank --lora-targets` counts what add_lora adds: the routed
    experts' adapters (E per weight, three weights) with `experts`, gate/up/down only on
    the dense layers and the shared experts (it counted a dense MLP's on every layer and
    no expert's)."""
    from llmtk.compute.models import spec_from_config
    from llmtk.estimate.memory import lora_params
    from llmtk.train.model.lora import add_lora

    cfg = small(n_layer=3, **kw)
    if targets == "q,k,v,o,gate,up,down" and not kw:
        cfg = small(n_layer=3, first_dense=1)  # gate/up/down alone need a dense layer
    n = add_lora(GPT(cfg), 4, targets=targets)
    assert lora_params(spec_from_config(cfg), 4, targets=tuple(targets.split(","))) == n


def test_estimate_cli_takes_lora_targets():
    from llmtk.compute.models import PRESETS
    from llmtk.estimate.memory import lora_params
    from tests.util import llmtk

    def trainable(*flags):
        p = llmtk("estimate", "--model", "qwen3-30b-a3b", "--tokens", "1B", "--lora-rank", "8",
                  "--json", *flags, in_process=True)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)["model"]["lora_params"]

    m = PRESETS["qwen3-30b-a3b"]
    experts = trainable("--lora-targets", "q,k,v,o,experts")
    # 48 MoE layers x 128 experts x 3 weights x 8 x (2048 + 768) on top of q,k,v,o
    assert experts - trainable("--lora-targets", "q,k,v,o") == 48 * 128 * 3 * 8 * (2048 + 768)
    assert trainable() == lora_params(m, 8)  # the default: no routed expert, no shared MLP
    p = llmtk("estimate", "--model", "qwen3-30b-a3b", "--lora-rank", "8", "--lora-targets",
              "q,experts,mlp", in_process=True)
    assert p.returncode == 2 and "lora" in p.stderr.decode().lower()


@pytest.mark.parametrize("kw", [{}, {"n_shared_experts": 1, "first_dense": 1},
                                {"top_k": 1, "n_experts": 8}])
def test_dry_run_counts_what_expert_adapters_keep_for_backward(kw):
    """`train --dry-run` with `--lora-targets ...,experts`: what the routed experts'
    adapters add to the saved activations is what autograd saves, to the byte (fp32, one
    process): per assignment three A·x and the token and hidden activation their A's
    gradients need (it counted `experts` as one projection's A·x per token)."""
    from llmtk.commands.train import plan_rows
    from llmtk.train.config import TrainConfig
    from llmtk.train.layout.dryrun import dry_run
    from llmtk.train.measure import saved_for_backward
    from llmtk.train.model.lora import add_lora

    shape = {"layers": 3, "d_model": 64, "heads": 4, "experts": kw.get("n_experts", 4),
             "top_k": kw.get("top_k", 2), "expert_ffn_hidden": 32, "seq_len": 32,
             "batch_size": 2, "shared_experts": kw.get("n_shared_experts"),
             "first_dense_layers": kw.get("first_dense")}
    predicted, measured = {}, {}
    for targets in ("q,k,v,o", "q,k,v,o,experts"):
        cfg = TrainConfig(**shape, lora_rank=4, lora_targets=targets, parallel="none")
        d = dry_run(cfg, 1)
        predicted[targets] = plan_rows(d, "H100", bf16=False)["rows"][0]["activations"]
        torch.manual_seed(0)
        model = GPT(d.plan.mcfg)
        add_lora(model, 4, targets=targets)
        idx = torch.randint(0, d.plan.mcfg.vocab_size, (2, 32))
        with saved_for_backward(model) as saved:
            model(idx, idx)
        measured[targets] = saved["bytes"]
    assert (predicted["q,k,v,o,experts"] - predicted["q,k,v,o"]
            == measured["q,k,v,o,experts"] - measured["q,k,v,o"])
