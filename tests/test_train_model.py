"""The GPT model: parameter counts, shapes, causality, GQA, tying, init, learning."""

import math

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from llmtk.train.model.gpt import GPT, PRESETS, ModelConfig, count_params, preset  # noqa: E402
from tests.tolerance import assert_close64, fp64  # noqa: E402


def small(**kw) -> ModelConfig:
    base = dict(vocab_size=61, seq_len=16, n_layer=2, d_model=32, n_head=4)
    base.update(kw)
    return ModelConfig(**base)


@pytest.mark.parametrize("cfg", [
    small(),
    small(n_kv_head=2),
    small(n_kv_head=1, tie_embeddings=False),
    small(ffn_hidden=40),
    small(n_layer=3, d_model=48, n_head=6, n_kv_head=3),
])
def test_count_params_is_exact(cfg):
    model = GPT(cfg)
    assert count_params(cfg) == sum(p.numel() for p in model.parameters())


def test_count_params_presets_by_formula():
    # Checked against the closed form rather than by building the big models.
    cfg = PRESETS["llmtk-124m"]
    assert cfg.hidden == 2048  # 8/3 * 768 = 2048 exactly
    d, V, L = 768, 50304, 12
    expected = V * d + L * (4 * d * d + 3 * d * 2048 + 2 * d) + d
    assert count_params(cfg) == expected
    assert 120e6 < count_params(cfg) < 130e6
    assert 0.9e9 < count_params(PRESETS["1b"]) < 1.15e9
    assert 6.5e9 < count_params(PRESETS["7b"]) < 7.0e9  # Llama-2-7B is 6.74B
    assert count_params(PRESETS["7b"]) == 6_738_415_616


def test_swiglu_default_rule():
    assert ModelConfig(d_model=1024).hidden == 2752  # ceil(2730.67 / 64) * 64
    assert ModelConfig(d_model=64).hidden == 192     # 170.67 -> 192


@fp64()  # the chunked loss and F.cross_entropy sum in other orders (tests/tolerance.py)
def test_forward_shapes_and_loss():
    torch.manual_seed(0)
    cfg = small()
    model = GPT(cfg)
    idx = torch.randint(0, cfg.vocab_size, (3, 16))
    targets = torch.randint(0, cfg.vocab_size, (3, 16))
    none, loss = model(idx, targets)
    assert none is None  # with targets the full logits are never built
    # At init the prediction is near uniform: loss close to ln(V).
    assert abs(loss.item() - math.log(cfg.vocab_size)) < 0.3
    logits, loss2 = model(idx)
    assert loss2 is None and logits.shape == (3, 16, cfg.vocab_size)  # the real vocabulary
    ref = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), targets.reshape(-1))
    assert_close64(loss, ref)


@fp64()  # the chunked loss against F.cross_entropy: other summation orders
def test_vocab_is_padded_to_128_and_padding_never_counts():
    cfg = small()  # vocab 61
    assert cfg.padded_vocab == 128 and ModelConfig(vocab_size=50304).padded_vocab == 50304
    assert ModelConfig(vocab_size=257).padded_vocab == 384
    model = GPT(cfg)
    assert model.tok_emb.weight.shape == (128, cfg.d_model) == model.lm_head.weight.shape
    torch.manual_seed(1)
    idx = torch.randint(0, cfg.vocab_size, (2, 16))
    _, before = model(idx, idx)
    with torch.no_grad():  # make every padded logit huge: it must still not count or win
        model.lm_head.weight[cfg.vocab_size:] = 100.0
    _, after = model(idx, idx)
    # the real columns' arithmetic is untouched by the padded rows' values: bit-equal
    assert after.item() == before.item()
    out = model.generate(idx[:, :2], 8, temperature=1.0)
    assert int(out.max()) < cfg.vocab_size
    # ... and equals the loss of an unpadded head holding the same real rows.
    logits, _ = model(idx)
    unpadded = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), idx.reshape(-1))
    assert_close64(after, unpadded)


@pytest.mark.parametrize("chunk", [1, 7, 64, 10_000])
def test_chunked_cross_entropy_equals_the_reference(chunk):
    from llmtk.train.model.gpt import chunked_cross_entropy

    torch.manual_seed(0)
    n, c, vocab, padded = 300, 32, 61, 128
    # fp64: the chunks sum in another order than one matmul (tests/tolerance.py)
    h = torch.randn(n, c, requires_grad=True, dtype=torch.float64)
    w = torch.randn(padded, c, requires_grad=True, dtype=torch.float64)
    targets = torch.randint(0, vocab, (n,))
    targets[:5] = -1  # ignored positions
    ref = F.cross_entropy(h @ w[:vocab].t(), targets, ignore_index=-1)
    ref.backward()
    gh, gw = h.grad.clone(), w.grad.clone()
    h.grad = w.grad = None
    loss = chunked_cross_entropy(h, w, targets, vocab, chunk)
    loss.backward()
    assert_close64(loss, ref)
    assert_close64(h.grad, gh)
    assert_close64(w.grad, gw)
    assert (w.grad[vocab:] == 0).all()  # padded rows get no gradient


def test_causal_future_tokens_do_not_change_past_logits():
    torch.manual_seed(0)
    cfg = small(n_kv_head=2)
    model = GPT(cfg).eval()
    idx = torch.randint(0, cfg.vocab_size, (1, 12))
    other = idx.clone()
    other[0, 8:] = (other[0, 8:] + 1) % cfg.vocab_size
    a, _ = model(idx)
    b, _ = model(other)
    # a past position's arithmetic does not read the future's values (the mask zeroes
    # their weights exactly), so the two are equal up to kernels that block by shape
    assert torch.allclose(a[:, :8], b[:, :8], atol=1e-6)
    assert not torch.allclose(a[:, 8:], b[:, 8:])


def test_rotary_makes_position_matter():
    # Without positions, causal attention at the last token would be invariant to the
    # order of the prefix; rotary must break that symmetry.
    torch.manual_seed(0)
    cfg = small()
    model = GPT(cfg).eval()
    a, _ = model(torch.tensor([[3, 9, 4, 7]]))
    b, _ = model(torch.tensor([[9, 3, 4, 7]]))
    assert not torch.allclose(a[0, -1], b[0, -1], atol=1e-5)


def test_tied_and_untied():
    tied = GPT(small())
    assert tied.lm_head.weight is tied.tok_emb.weight
    untied = GPT(small(tie_embeddings=False))
    assert untied.lm_head.weight is not untied.tok_emb.weight


def test_init_rule():
    torch.manual_seed(0)
    cfg = small(n_layer=8, d_model=256, n_head=4, vocab_size=1000)
    model = GPT(cfg)
    assert abs(model.layers["0"].attn.wqkv.weight.std().item() - 0.02) < 0.002
    assert abs(model.layers["0"].mlp.w2.weight.std().item() - 0.02 / math.sqrt(16)) < 0.001
    assert torch.equal(model.norm.weight, torch.ones(256))
    assert all("bias" not in n for n, _ in model.named_parameters())


def test_seq_len_limit_and_bad_config():
    model = GPT(small())
    with pytest.raises(ValueError, match="seq_len"):
        model(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="divisible"):
        GPT(small(d_model=30))
    with pytest.raises(ValueError, match="n_kv_head"):
        GPT(small(n_kv_head=3))
    with pytest.raises(KeyError, match="unknown model preset"):
        preset("nope")


def test_activation_checkpointing_gives_same_gradients():
    torch.manual_seed(0)
    cfg = small()
    a = GPT(cfg)
    b = GPT(cfg)
    b.load_state_dict(a.state_dict())
    b.activation_checkpointing = True
    idx = torch.randint(0, cfg.vocab_size, (2, 16))
    a(idx, idx)[1].backward()
    b(idx, idx)[1].backward()
    for (n, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert torch.allclose(pa.grad, pb.grad, atol=1e-6), n


def test_learns_a_repeating_sequence_and_generates_it():
    torch.manual_seed(0)
    cfg = small(vocab_size=10)
    model = GPT(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    seq = torch.tensor([[i % 7 for i in range(17)]])
    for _ in range(150):
        _, loss = model(seq[:, :-1], seq[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.05
    out = model.eval().generate(seq[:, :3], 6, temperature=0)
    assert out[0].tolist() == [i % 7 for i in range(9)]


def test_config_module_does_not_import_torch():
    import subprocess
    import sys
    code = ("import sys; from llmtk.train.model.config import count_params, PRESETS; "
            "count_params(PRESETS['1b']); assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_forward_traces_as_one_graph_without_breaks():
    """torch.compile sees the whole forward (loss included) as one graph: no graph breaks."""
    cfg = small(n_kv_head=2)
    model = GPT(cfg)
    x = torch.randint(0, cfg.vocab_size, (2, 16))
    torch._dynamo.reset()
    for args in ((x, x), (x,)):  # training (loss) and sampling (logits)
        e = torch._dynamo.explain(model)(*args)
        assert (e.graph_count, e.graph_break_count) == (1, 0), e.break_reasons


def test_forward_under_ddp_traces_without_breaks(tmp_path):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        cfg = small()
        ddp = DDP(GPT(cfg))
        x = torch.randint(0, cfg.vocab_size, (2, 16))
        torch._dynamo.reset()
        e = torch._dynamo.explain(ddp)(x, x)
        assert e.graph_break_count == 0, e.break_reasons
    finally:
        dist.destroy_process_group()
