"""Mixture-of-experts Hugging Face folders in and out: Mixtral and Qwen3-MoE.

A tiny random MixtralForCausalLM / Qwen3MoeForCausalLM built with transformers loads into
llmtk with the same logits (routers, stacked experts, Qwen3's q/k norms, own head dim,
dense layers and un-normalised top-k weights mapped), continues training from `hf:PATH`,
and exports back to a folder transformers loads with the same logits and the same greedy
continuation.
"""

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from llmtk.errors import UsageError  # noqa: E402
from llmtk.train.model import hf  # noqa: E402
from tests.test_train_hf import corpus, hf_logits, llmtk_logits, run_train  # noqa: E402, F401
from tests.tolerance import gamma, logit_bound, max_abs_diff  # noqa: E402

# Two families, each with what sets it apart: Mixtral (every layer MoE, renormalised top-k
# weights, head dim d/H) and Qwen3-MoE (q/k norms, head dim 32 != 64/4, a dense first
# layer through mlp_only_layers, the K weights left as softmax scores).
FAMILIES = {
    "mixtral": (transformers.MixtralConfig, transformers.MixtralForCausalLM,
                dict(intermediate_size=32, num_local_experts=4)),
    "qwen3_moe": (transformers.Qwen3MoeConfig, transformers.Qwen3MoeForCausalLM,
                  dict(intermediate_size=96, moe_intermediate_size=32, num_experts=4,
                       head_dim=32, mlp_only_layers=[0], norm_topk_prob=False,
                       num_hidden_layers=3)),
}


def save_tiny_moe(folder, kind, **extra):
    """A random tiny MoE model saved as transformers saves it (per-expert matrices), every
    weight randomised (norms and routers included) so no mapping hides behind ones or
    zeros."""
    config_cls, model_cls, own = FAMILIES[kind]
    base = dict(vocab_size=300, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, num_experts_per_tok=2, max_position_embeddings=64,
                rms_norm_eps=1e-6, tie_word_embeddings=False, eos_token_id=256,
                rope_theta=10000.0)
    base.update(own)
    base.update(extra)
    torch.manual_seed(0)
    model = model_cls(config_cls(**base))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(folder)
    (folder / "tokenizer.json").write_text(hf.byte_tokenizer_json())
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>",
         "model_max_length": 64}))
    return model.eval()


def close(a, b, model, ids) -> bool:
    """Both forwards run the same fp32 operations up to summation order (matmuls, the
    scatter of the experts' outputs), so the logits agree within the rounding bound of
    llmtk's forward of that architecture (tests/tolerance.py logit_bound: ~1e-3 here;
    measured ~1.3e-6). The experts each token chooses must match (a flip, or the other
    top-k normalisation, moves logits by ~0.1-0.3). fp64 is no reference here:
    transformers' grouped experts run in fp32 only."""
    return max_abs_diff(a, b) <= logit_bound(model, torch.tensor([ids]))


@pytest.mark.parametrize("kind", ["mixtral", "qwen3_moe"])
def test_moe_folder_loads_into_llmtk_with_the_same_logits(tmp_path, kind):
    model = save_tiny_moe(tmp_path / "m", kind)
    ids = list(range(5, 45))
    with torch.no_grad():
        theirs = model(torch.tensor([ids])).logits[0]
    mine, loaded = llmtk_logits(tmp_path / "m", ids)
    cfg = loaded.model.cfg
    assert cfg.n_experts == 4 and cfg.top_k == 2
    assert (cfg.qk_norm, cfg.router_norm_topk) == ((True, False) if kind == "qwen3_moe"
                                                   else (False, True))
    if kind == "qwen3_moe":  # layer 0 dense (mlp_only_layers), 1 and 2 MoE; head dim 32
        assert [cfg.is_moe(i) for i in range(3)] == [False, True, True]
        assert cfg.head_dim == 32
    assert close(theirs, mine[:, :300], loaded.model, ids)


def test_the_router_semantics_are_each_family_s(tmp_path):
    """Qwen3-MoE with norm_topk_prob true renormalises like Mixtral; the flag matters: the
    same folder read as the other setting gives other logits."""
    from dataclasses import replace

    from llmtk.train.model.gpt import GPT

    model = save_tiny_moe(tmp_path / "m", "qwen3_moe", norm_topk_prob=True)
    ids = list(range(5, 45))
    with torch.no_grad():
        theirs = model(torch.tensor([ids])).logits[0]
    mine, loaded = llmtk_logits(tmp_path / "m", ids)
    assert loaded.model.cfg.router_norm_topk and close(theirs, mine[:, :300], loaded.model, ids)
    other = GPT(replace(loaded.model.cfg, router_norm_topk=False)).eval()
    other.load_state_dict(loaded.model.state_dict())
    with torch.no_grad():
        wrong = other(torch.tensor([ids]))[0][0, :, :300]
    assert not close(theirs, wrong, loaded.model, ids)


@pytest.mark.parametrize("kind", ["mixtral", "qwen3_moe"])
def test_moe_round_trip_through_llmtk_keeps_logits_and_greedy_text(corpus, tmp_path, kind):  # noqa: F811
    """hf:PATH -> a run (vanishing learning rate) -> train export --hf -> transformers: the
    original model's logits and greedy tokens. The import trains with the folder's own
    balancing (no bias: the export has nowhere to put one)."""
    from llmtk.train import load_model

    model = save_tiny_moe(tmp_path / "base", kind)
    run_train(corpus, tmp_path / "run", steps=2, lr=1e-12, min_lr=1e-12, weight_decay=0.0,
              init_from=f"hf:{tmp_path / 'base'}")
    state = json.loads((tmp_path / "run" / "config.json").read_text())["model"]
    assert state["router_bias_rate"] == 0.0
    # transformers' coefficient 0.001 x top-k 2 / 2 MoE layers (hf._aux_scale)
    assert state["router_aux_loss"] == pytest.approx(0.001)
    hf.export_hf(str(tmp_path / "run"), str(tmp_path / "back"))
    back = json.loads((tmp_path / "back" / "config.json").read_text())
    assert back["model_type"] == kind and back["router_aux_loss_coef"] == pytest.approx(0.001)
    ids = list(range(5, 45))
    with torch.no_grad():
        original = model(torch.tensor([ids])).logits[0]
    exported, again = hf_logits(tmp_path / "back", ids)
    assert type(again).__name__ == type(model).__name__
    assert close(original, exported, load_model(str(tmp_path / "run")).model, ids)

    prompt = torch.tensor([list(range(5, 17))])
    ref = again.generate(prompt, max_new_tokens=16, do_sample=False, eos_token_id=256,
                         pad_token_id=256)[0, 12:].tolist()
    orig = model.generate(prompt, max_new_tokens=16, do_sample=False, eos_token_id=256,
                          pad_token_id=256)[0, 12:].tolist()
    assert orig == ref and len(set(ref)) > 3  # a real continuation, not one token repeated
    loaded = load_model(str(tmp_path / "run"))
    assert loaded.model.generate(prompt, 16, temperature=0)[0, 12:].tolist()[:len(ref)] == ref


def test_export_refuses_what_the_folders_cannot_hold(corpus, tmp_path):  # noqa: F811
    """A trained balancing bias (these routers have none) and shared experts are refused
    with the reason; a plain llmtk MoE with the bias off exports as Mixtral."""
    run_train(corpus, tmp_path / "biased", steps=2, experts=4, top_k=2)
    with pytest.raises(UsageError, match="expert_bias is not zero"):
        hf.export_hf(str(tmp_path / "biased"), str(tmp_path / "o1"))
    run_train(corpus, tmp_path / "shared", steps=1, experts=4, top_k=2, shared_experts=1,
              router_bias_rate=0.0)
    with pytest.raises(UsageError, match="shared experts"):
        hf.export_hf(str(tmp_path / "shared"), str(tmp_path / "o2"))
    run_train(corpus, tmp_path / "plain", steps=2, experts=4, top_k=2, router_bias_rate=0.0)
    hf.export_hf(str(tmp_path / "plain"), str(tmp_path / "o3"))
    ids = list(b"The quick brown")
    theirs, model = hf_logits(tmp_path / "o3", ids)
    mine, loaded = llmtk_logits(tmp_path / "plain", ids)
    assert type(model).__name__ == "MixtralForCausalLM"
    assert close(theirs, mine[:, :257], loaded.model, ids)


def test_a_dense_qwen3_folder_maps_both_ways(corpus, tmp_path):  # noqa: F811
    """Qwen3ForCausalLM (q/k norms, head dim 32 != 64/4) in, trained at a vanishing rate,
    and out again as Qwen3ForCausalLM with the original's logits."""
    torch.manual_seed(0)
    model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(
        vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=64,
        rms_norm_eps=1e-6, tie_word_embeddings=False, eos_token_id=256)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(tmp_path / "base")
    (tmp_path / "base" / "tokenizer.json").write_text(hf.byte_tokenizer_json())
    ids = list(range(5, 45))
    with torch.no_grad():
        original = model(torch.tensor([ids])).logits[0]
    mine, loaded = llmtk_logits(tmp_path / "base", ids)
    assert loaded.model.cfg.qk_norm and loaded.model.cfg.head_dim == 32
    assert close(original, mine[:, :300], loaded.model, ids)
    run_train(corpus, tmp_path / "run", steps=1, lr=1e-12, min_lr=1e-12, weight_decay=0.0,
              init_from=f"hf:{tmp_path / 'base'}")
    hf.export_hf(str(tmp_path / "run"), str(tmp_path / "back"))
    exported, again = hf_logits(tmp_path / "back", ids)
    assert type(again).__name__ == "Qwen3ForCausalLM"
    assert close(original, exported, loaded.model, ids)


def test_router_flags_apply_and_shape_flags_are_refused_with_hf(tmp_path):
    """--router-* training options override the folder's defaults; --router-score is the
    folder's (part of its shape) and refused like --experts."""
    save_tiny_moe(tmp_path / "m", "mixtral")
    spec = f"hf:{tmp_path / 'm'}"
    mc = hf.init_model_config(hf.InitSpec(init_from=spec, router_bias_rate=1e-3,
                                          router_z_loss=1e-4), 257)
    assert (mc.router_bias_rate, mc.router_z_loss, mc.router_aux_loss) == (1e-3, 1e-4, 0.001)
    mc = hf.init_model_config(hf.InitSpec(init_from=spec, router_aux_loss=0.05), 257)
    assert mc.router_aux_loss == 0.05
    for flag in ({"router_score": "sigmoid"}, {"experts": 8}):
        with pytest.raises(UsageError, match=f"drop {next(iter(flag)).replace('_', '.')}"):
            hf.resolve_init(hf.InitSpec(init_from=spec, **flag))


def test_an_imported_balance_loss_is_transformers_own(tmp_path):
    """With one MoE layer (nothing pooled across layers) the balance loss an imported
    Mixtral trains with equals router_aux_loss_coef x transformers' aux_loss."""
    from llmtk.train.model.gpt import GPT

    model = save_tiny_moe(tmp_path / "m", "mixtral", num_hidden_layers=1,
                          router_aux_loss_coef=0.02)
    ids = torch.tensor([list(range(5, 45))])
    with torch.no_grad():
        theirs = model(ids, output_router_logits=True).aux_loss.item()
    cfg, sd = hf.load_hf(str(tmp_path / "m"))
    mine = GPT(cfg).train()
    mine.load_state_dict(sd)
    with torch.no_grad():
        mine(ids, ids)
    # a * E * sum_e f_e P_e of non-negative terms, in fp32 both: P_e a mean of 40 softmax
    # probabilities (E = 4 terms in each denominator), f_e a count share, a 4-term dot; a
    # sum of n non-negative terms is within gamma_n relatively, and the single roundings
    # (exp within 1 ulp, the division, the share, the products, a * E) add fewer than 20 u:
    # each side within gamma_(4 + 40 + 4 + 20) of exact, the two within twice that (8e-6)
    rel = 2 * gamma(4 + 40 + 4 + 20)
    assert mine.layers["0"].mlp.aux.item() == pytest.approx(0.02 * theirs, rel=rel)


def test_layer_patterns_llmtk_cannot_express_are_refused(tmp_path):
    save_tiny_moe(tmp_path / "m", "qwen3_moe", num_hidden_layers=4, mlp_only_layers=[0, 3])
    from llmtk.train import load_model

    with pytest.raises(UsageError, match=r"MoE layers \[1, 2\]"):
        load_model(str(tmp_path / "m"))


# ---------------------------------------------------------------- LoRA on MoE models


def moe_gpt(**over):
    from llmtk.train.model.gpt import GPT, ModelConfig

    cfg = dict(vocab_size=257, seq_len=32, n_layer=3, d_model=32, n_head=4, n_experts=4,
               top_k=2, expert_hidden=32, first_dense=1)
    torch.manual_seed(0)
    return GPT(ModelConfig(**{**cfg, **over})).eval()


def test_lora_on_a_moe_model_adapts_attention_dense_and_shared_experts_only():
    from llmtk.train.model.lora import add_lora, merged_state_dict

    m = moe_gpt(n_shared_experts=1)
    x = torch.randint(0, 256, (2, 16))
    with torch.no_grad():
        before = m(x)[0]
    add_lora(m, rank=4, alpha=8)
    trainable = {k for k, p in m.named_parameters() if p.requires_grad}
    bases = {k.split(".lora_")[0] for k in trainable}
    assert all(".lora_" in k for k in trainable)
    assert bases == {f"layers.{i}.attn.{w}" for i in range(3) for w in ("wqkv", "wo")} | {
        "layers.0.mlp.w1", "layers.0.mlp.w3", "layers.0.mlp.w2"} | {
        f"layers.{i}.mlp.shared.{w}" for i in (1, 2) for w in ("w1", "w3", "w2")}
    assert not m.layers["1"].mlp.router.weight.requires_grad  # the router stays frozen
    with torch.no_grad():
        assert torch.equal(m(x)[0], before)  # B = 0: the base model
        for p in m.parameters():
            if p.requires_grad:
                p.normal_(std=0.1)  # as after training
        adapted = m(x)[0]
    plain = moe_gpt(n_shared_experts=1)
    plain.load_state_dict(merged_state_dict(m.state_dict(), m.cfg.to_dict(), alpha=8))
    with torch.no_grad():
        merged = plain(x)[0]
    # merging rounds each adapted matrix's W + s B A once more (r + 2 roundings, rank 4):
    # 4 adapted matrices on a layer's path (q/k/v, o, up, down of the dense or shared MLP)
    assert max_abs_diff(merged, adapted) <= logit_bound(plain, x, extra=3 * 4 * (4 + 2))


def test_lora_targets_that_find_nothing_in_a_moe_model_are_refused():
    from llmtk.errors import ConfigError
    from llmtk.train.model.lora import add_lora

    with pytest.raises(ConfigError, match="adapt no matrix"):
        add_lora(moe_gpt(first_dense=0), rank=4, targets="gate,up,down")
    assert add_lora(moe_gpt(first_dense=0), rank=4, targets="q,v") > 0


def test_lora_continues_an_hf_moe_model_training_only_the_adapters(corpus, tmp_path):  # noqa: F811
    """LoRA from a Qwen3-MoE folder: the first step's loss is the full model's (B = 0, the
    same forward), the loss falls, and every base weight (routers and experts included)
    ends exactly as it started."""
    from llmtk.train.checkpoint import files as C

    save_tiny_moe(tmp_path / "base", "qwen3_moe")
    spec = f"hf:{tmp_path / 'base'}"
    run_train(corpus, tmp_path / "full", steps=1, init_from=spec)
    run_train(corpus, tmp_path / "lora", steps=6, init_from=spec, lora_rank=4, lr=1e-2)

    def losses(run):
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        return [r["loss"] for r in rows if "loss" in r and "event" not in r]

    lora = losses(tmp_path / "lora")
    assert lora[0] == losses(tmp_path / "full")[0]
    assert lora[-1] < lora[0]
    start = hf.init_weights(spec, hf.load_hf(str(tmp_path / "base"))[0])
    end, _ = C.load_full_state(str(tmp_path / "lora" / "checkpoints" / "step-0000006"),
                               with_optim=False)  # the adapters apart (not merged)
    assert any(".lora_B." in k and v.abs().sum() > 0 for k, v in end.items())
    for key, value in start.items():
        assert torch.equal(end[key], value), key
