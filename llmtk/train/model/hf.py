"""Hugging Face model folders in and out: `train export --hf`, `--init-from hf:PATH`, generate.

llmtk's GPT is a Llama-architecture decoder, so the mapping is a renaming, checked
against `transformers`' LlamaForCausalLM (tests/test_train_hf.py compares logits):

- RoPE: both rotate the two *halves* of each head (GPT-NeoX layout, `rotate_half`), with
  inv_freq = theta^(-2i/D), so q/k weights copy over without the permutation that
  Meta's interleaved checkpoints need when converted;
- RMSNorm: x * rsqrt(mean(x^2) + eps) * weight, in fp32, same eps (`rms_norm_eps`);
- SwiGLU: w1 = gate_proj, w3 = up_proj, w2 = down_proj;
- GQA: kv head j serves query heads j*H/K .. (j+1)*H/K - 1 in both (repeat_interleave
  and transformers' repeat_kv agree); attention scale 1/sqrt(D) in both;
- our fused wqkv holds q_proj, k_proj, v_proj's rows grouped by kv head (for each kv
  head its query heads' rows, its k rows, its v rows: model.group_qkv), so that a
  tensor-parallel slice holds whole groups;
- tied embeddings = `tie_word_embeddings` (lm_head is then not stored).
Qwen2 adds biases to q/k/v (`qkv_bias`); Qwen3 RMS-normalises each head's q and k
(`qk_norm`) and has its own head_dim; Mistral is Llama with an optional sliding window,
accepted when the window covers the whole context. Mixture of experts (moe.py; checked
against MixtralForCausalLM and Qwen3MoeForCausalLM, tests/test_train_hf_moe.py): the
router is the `gate`, the E per-expert matrices of the folders are stacked into llmtk's
(E, out, in) tensors, and the routing is the same (softmax in fp32, top-k, Mixtral's
renormalised weights; Qwen3-MoE's only with norm_topk_prob). Anything else (other
activations, rope scaling, shared or jittered experts, other layer patterns) is refused
with the field that does not map.

Only `safetensors`, `tokenizers` and torch are needed: transformers itself is never
imported here (it is a test dependency, and what users load the export with).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass

from llmtk.errors import ConfigError, DataError, UsageError
from llmtk.io.atomic import atomic_dir
from llmtk.presets import is_moe_layer
from llmtk.train.checkpoint.state_dict import full_state_dict
from llmtk.train.model.config import ModelConfig

PREFIX = "hf:"
SUPPORTED = ("llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen3_moe")
MOE_KINDS = ("mixtral", "qwen3_moe")
WEIGHTS = "model.safetensors"


def is_hf_spec(spec: str | None) -> bool:
    return bool(spec) and spec.startswith(PREFIX)


def hf_path(spec: str) -> str:
    """The folder of an `hf:PATH` spec, checked to look like a model folder."""
    path = spec[len(PREFIX):] if is_hf_spec(spec) else spec
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise ConfigError("init_from", f"{path} is not a Hugging Face model folder "
                          "(no config.json)", value=spec)
    return path


def is_hf_dir(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "config.json")) and (
        os.path.isfile(os.path.join(path, WEIGHTS))
        or os.path.isfile(os.path.join(path, WEIGHTS + ".index.json")))


# ------------------------------------------------------------------ configs


def _rope_theta(hf: dict) -> float:
    """rope_theta from a transformers 4.x (`rope_theta`) or 5.x (`rope_parameters`) config;
    rope scaling of any kind does not map (our rotary tables are plain)."""
    params = hf.get("rope_parameters") or {}
    scaling = hf.get("rope_scaling") or {}
    for what in (params, scaling):
        kind = what.get("rope_type", what.get("type", "default"))
        if kind not in (None, "default"):
            raise ValueError(f"rope scaling {kind!r}")
    return float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))


def _moe_layers(hf: dict, n_layer: int) -> tuple[int, int]:
    """(first_dense, moe_every) reproducing a Qwen3-MoE config's sparse layers: layer i is
    sparse unless listed in mlp_only_layers, when (i + 1) % decoder_sparse_step == 0."""
    step = int(hf.get("decoder_sparse_step") or 1)
    dense = set(hf.get("mlp_only_layers") or [])
    sparse = [i for i in range(n_layer) if i not in dense and (i + 1) % step == 0]
    if not sparse:
        raise ValueError("mlp_only_layers / decoder_sparse_step leave no MoE layer")
    first = sparse[0]
    every = sparse[1] - first if len(sparse) > 1 else n_layer
    if [i for i in range(n_layer) if is_moe_layer(i, 1, first, every)] != sparse:
        raise ValueError(f"MoE layers {sparse} (mlp_only_layers, decoder_sparse_step) are not "
                         "'after the first N dense ones, every M-th' as llmtk's are")
    return first, every


def _moe_fields(hf: dict, kind: str, n_layer: int) -> dict:
    """The ModelConfig fields of a Mixtral / Qwen3-MoE config's experts and router.

    Both route as llmtk does (softmax over the E logits, top-k, Mixtral renormalising the
    K weights, Qwen3 when norm_topk_prob). Training defaults differ from llmtk's own: the
    balancing bias is off (these folders' routers hold no bias, so a trained bias could not
    be exported) and the balance loss is on at the scale transformers trains with
    (_aux_scale)."""
    n = int(hf.get("num_local_experts") or hf.get("num_experts") or 0)
    k = int(hf["num_experts_per_tok"])
    if kind == "mixtral":
        if float(hf.get("router_jitter_noise") or 0.0):
            raise ValueError("router_jitter_noise (llmtk's router adds no noise)")
        first, every, hidden = 0, 1, int(hf["intermediate_size"])
        norm = True
    else:
        first, every = _moe_layers(hf, n_layer)
        hidden, norm = int(hf["moe_intermediate_size"]), bool(hf.get("norm_topk_prob"))
    moe = sum(is_moe_layer(i, n, first, every) for i in range(n_layer))
    return dict(n_experts=n, top_k=k, expert_hidden=hidden, first_dense=first,
                moe_every=every, router_norm_topk=norm, router_bias_rate=0.0,
                router_aux_loss=float(hf.get("router_aux_loss_coef") or 0.0)
                * _aux_scale(k, moe))


def _aux_scale(top_k: int, moe_layers: int) -> float:
    """llmtk's --router-aux-loss per unit of transformers' router_aux_loss_coef.

    transformers' load_balancing_loss_func is E * sum_e f'_e * P_e with the counts and
    probabilities of all MoE layers pooled, f'_e = assignments / tokens (summing to K);
    llmtk adds a * E * sum_e f_e * P_e per layer, f_e = assignments / (tokens * K). So one
    layer's term is K x ours and the pooled loss is about the layers' mean, not their sum:
    coef * K / L gives the same scale (the same loss when the layers route alike)."""
    return top_k / max(moe_layers, 1)


def config_from_hf(hf: dict, seq_len: int | None = None) -> ModelConfig:
    """The ModelConfig of a transformers config.json dict; ValueError names what does not map.

    seq_len: the context to train with (default: max_position_embeddings, capped at 4096
    so that a 128k-context model does not allocate 128k-long rotary tables by default).
    """
    kind = hf.get("model_type")
    if kind not in SUPPORTED:
        raise ValueError(f"model_type {kind!r} (supported: {', '.join(SUPPORTED)})")
    act = hf.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"hidden_act {act!r} (llmtk's MLP is SwiGLU: silu)")
    qwen3 = kind in ("qwen3", "qwen3_moe")
    d, heads = int(hf["hidden_size"]), int(hf["num_attention_heads"])
    head_dim = hf.get("head_dim")
    if head_dim is not None and int(head_dim) * heads != d and not qwen3:
        raise ValueError(f"head_dim {head_dim} x {heads} heads != hidden_size {d}")
    if kind not in ("qwen2",) and (hf.get("attention_bias") or hf.get("mlp_bias")):
        raise ValueError("attention_bias/mlp_bias (llmtk's Llama has no biases)")
    window = hf.get("sliding_window")
    uses_window = hf.get("use_sliding_window", kind in ("mistral", "mixtral"))
    max_pos = int(hf.get("max_position_embeddings", 2048))
    T = seq_len or min(max_pos, 4096)
    sliding_layers = [t for t in hf.get("layer_types") or [] if t != "full_attention"]
    if window is not None and (uses_window or sliding_layers) and int(window) < T:
        raise ValueError(f"sliding_window {window} < the context {T} (llmtk attends to the "
                         "whole context)")
    experts = hf.get("num_experts") or hf.get("num_local_experts")
    if experts and kind not in MOE_KINDS:
        raise ValueError("mixture-of-experts layers")
    theta = _rope_theta(hf)
    n_layer = int(hf["num_hidden_layers"])
    explicit = int(head_dim) if qwen3 and head_dim and int(head_dim) * heads != d else None
    cfg = ModelConfig(
        vocab_size=int(hf["vocab_size"]), seq_len=T, n_layer=n_layer,
        d_model=d, n_head=heads, n_kv_head=int(hf.get("num_key_value_heads") or heads),
        ffn_hidden=int(hf["intermediate_size"]),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        norm_eps=float(hf.get("rms_norm_eps", 1e-6)), rope_theta=theta,
        qkv_bias=kind == "qwen2", qk_norm=qwen3, explicit_head_dim=explicit,
        **(_moe_fields(hf, kind, n_layer) if experts else {}))
    cfg.validate()
    return cfg


def _architecture(cfg: ModelConfig) -> str:
    """The transformers model_type cfg exports as; ValueError says why none fits."""
    if cfg.qkv_bias and (cfg.qk_norm or cfg.n_experts):
        raise ValueError("q/k/v biases with q/k norms or experts (no such architecture)")
    if not cfg.n_experts:
        return "qwen3" if cfg.qk_norm else "qwen2" if cfg.qkv_bias else "llama"
    if cfg.n_shared_experts:
        raise ValueError("shared experts (Mixtral and Qwen3-MoE have none)")
    if cfg.router_score != "softmax":
        raise ValueError(f"{cfg.router_score} router scores (Mixtral and Qwen3-MoE: softmax)")
    if cfg.qk_norm:
        return "qwen3_moe"
    if cfg.explicit_head_dim is not None:
        raise ValueError("a head dim other than d_model / heads without q/k norms")
    if cfg.moe_layers != cfg.n_layer:
        raise ValueError("dense layers between MoE layers without q/k norms (Mixtral's "
                         "layers are all MoE; Qwen3-MoE has q/k norms)")
    if not cfg.router_norm_topk:
        raise ValueError("un-normalised top-k weights without q/k norms (Mixtral "
                         "renormalises them)")
    return "mixtral"


ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                 "qwen3": "Qwen3ForCausalLM", "mixtral": "MixtralForCausalLM",
                 "qwen3_moe": "Qwen3MoeForCausalLM"}


def hf_config(cfg: ModelConfig, eos_id: int | None, bos_id: int | None = None) -> dict:
    """A transformers config.json for cfg: LlamaForCausalLM, Qwen2ForCausalLM (q/k/v
    biases), Qwen3ForCausalLM (q/k norms), MixtralForCausalLM or Qwen3MoeForCausalLM
    (experts). Both the 4.x (`rope_theta`) and 5.x (`rope_parameters`) spellings are
    written, so either generation of transformers reads it."""
    kind = _architecture(cfg)
    out = {
        "architectures": [ARCHITECTURES[kind]],
        "model_type": kind,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "intermediate_size": cfg.hidden,
        "num_hidden_layers": cfg.n_layer,
        "num_attention_heads": cfg.n_head,
        "num_key_value_heads": cfg.kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.seq_len,
        "rms_norm_eps": cfg.norm_eps,
        "rope_theta": cfg.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
        "rope_scaling": None,
        "tie_word_embeddings": cfg.tie_embeddings,
        "initializer_range": 0.02,
        "use_cache": True,
        "dtype": "float32",  # transformers 5.x; 4.x reads torch_dtype
        "torch_dtype": "float32",
        "eos_token_id": eos_id,
        "bos_token_id": bos_id,
    }
    if kind in ("qwen2", "qwen3", "qwen3_moe"):
        out.update(use_sliding_window=False, sliding_window=None)
    if kind in ("llama", "qwen3", "qwen3_moe"):
        out.update(attention_bias=False, attention_dropout=0.0)
    if kind == "llama":
        out.update(mlp_bias=False, pretraining_tp=1)
    # the balance loss back in transformers' terms (see _moe_fields)
    aux = cfg.router_aux_loss / _aux_scale(cfg.top_k, cfg.moe_layers) if cfg.n_experts else 0.0
    if kind == "mixtral":
        out.update(num_local_experts=cfg.n_experts, num_experts_per_tok=cfg.top_k,
                   intermediate_size=cfg.expert_ffn, router_jitter_noise=0.0,
                   router_aux_loss_coef=aux, output_router_logits=False,
                   sliding_window=None, attention_dropout=0.0)
    if kind == "qwen3_moe":
        out.update(num_experts=cfg.n_experts, num_experts_per_tok=cfg.top_k,
                   moe_intermediate_size=cfg.expert_ffn, decoder_sparse_step=1,
                   mlp_only_layers=[i for i in range(cfg.n_layer) if not cfg.is_moe(i)],
                   norm_topk_prob=cfg.router_norm_topk, router_aux_loss_coef=aux,
                   output_router_logits=False)
    return out


# ------------------------------------------------------------------ weights

# The names of an expert's three matrices in each family's folders, in llmtk's order
# (gate w1, up w3, down w2), and where the MoE block sits in a layer.
EXPERT_NAMES = {"mixtral": ("block_sparse_moe.", ("w1", "w3", "w2")),
                "qwen3_moe": ("mlp.", ("gate_proj", "up_proj", "down_proj"))}


def to_hf_state(sd: dict, cfg: ModelConfig) -> dict:
    """llmtk state_dict -> transformers names (tensors are contiguous copies: safetensors
    stores no views). Stacked experts (E, out, in) are written one matrix per expert, as
    the published Mixtral and Qwen3-MoE folders hold them."""
    from llmtk.train.model.gpt import ungroup_qkv

    H, K, D, V = cfg.n_head, cfg.kv_heads, cfg.head_dim, cfg.vocab_size
    kind = _architecture(cfg)
    # llmtk pads the embedding and head rows to a multiple of 128; HF holds vocab_size rows
    out = {"model.embed_tokens.weight": sd["tok_emb.weight"][:V],
           "model.norm.weight": sd["norm.weight"]}
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = sd["lm_head.weight"][:V]
    for i in range(cfg.n_layer):
        src, dst = f"layers.{i}.", f"model.layers.{i}."
        # wqkv is grouped by kv head (model.group_qkv); HF keeps q, k, v apart
        q, k, v = ungroup_qkv(sd[src + "attn.wqkv.weight"], cfg).split([H * D, K * D, K * D])
        out.update({
            dst + "input_layernorm.weight": sd[src + "attn_norm.weight"],
            dst + "post_attention_layernorm.weight": sd[src + "mlp_norm.weight"],
            dst + "self_attn.q_proj.weight": q, dst + "self_attn.k_proj.weight": k,
            dst + "self_attn.v_proj.weight": v,
            dst + "self_attn.o_proj.weight": sd[src + "attn.wo.weight"],
        })
        if cfg.qk_norm:
            out[dst + "self_attn.q_norm.weight"] = sd[src + "attn.q_norm.weight"]
            out[dst + "self_attn.k_norm.weight"] = sd[src + "attn.k_norm.weight"]
        if cfg.is_moe(i):
            block, names = EXPERT_NAMES[kind]
            out[dst + block + "gate.weight"] = sd[src + "mlp.router.weight"]
            for ours, theirs in zip(("w1", "w3", "w2"), names, strict=True):
                for e, w in enumerate(sd[src + f"mlp.experts.{ours}"]):
                    out[dst + block + f"experts.{e}.{theirs}.weight"] = w
        else:
            out.update({dst + "mlp.gate_proj.weight": sd[src + "mlp.w1.weight"],
                        dst + "mlp.up_proj.weight": sd[src + "mlp.w3.weight"],
                        dst + "mlp.down_proj.weight": sd[src + "mlp.w2.weight"]})
        if cfg.qkv_bias:
            qb, kb, vb = ungroup_qkv(sd[src + "attn.wqkv.bias"], cfg).split(
                [H * D, K * D, K * D])
            out.update({dst + "self_attn.q_proj.bias": qb, dst + "self_attn.k_proj.bias": kb,
                        dst + "self_attn.v_proj.bias": vb})
    return {k: v.detach().to("cpu").contiguous().clone() for k, v in out.items()}


def from_hf_state(hf: dict, cfg: ModelConfig, where: str) -> dict:
    """transformers names -> llmtk state_dict; a missing or misshapen tensor is a DataError."""
    import torch

    from llmtk.train.model.gpt import group_qkv

    def get(name: str):
        if name not in hf:
            raise DataError(f"{where}: weight {name} is missing")
        return hf[name]

    def padded(rows):  # HF's vocab_size rows -> llmtk's padded rows (zeros: never a target)
        extra = cfg.padded_vocab - rows.shape[0]
        return torch.cat([rows, rows.new_zeros(extra, rows.shape[1])]) if extra > 0 else rows

    sd = {"tok_emb.weight": padded(get("model.embed_tokens.weight")),
          "norm.weight": get("model.norm.weight")}
    sd["lm_head.weight"] = (sd["tok_emb.weight"] if cfg.tie_embeddings
                            else padded(get("lm_head.weight")))
    for i in range(cfg.n_layer):
        src, dst = f"model.layers.{i}.", f"layers.{i}."
        a = src + "self_attn."
        sd[dst + "attn.wqkv.weight"] = group_qkv(torch.cat(
            [get(a + "q_proj.weight"), get(a + "k_proj.weight"), get(a + "v_proj.weight")]),
            cfg)
        if cfg.qkv_bias:
            sd[dst + "attn.wqkv.bias"] = group_qkv(torch.cat(
                [get(a + "q_proj.bias"), get(a + "k_proj.bias"), get(a + "v_proj.bias")]), cfg)
        if cfg.qk_norm:
            sd[dst + "attn.q_norm.weight"] = get(a + "q_norm.weight")
            sd[dst + "attn.k_norm.weight"] = get(a + "k_norm.weight")
        sd.update({
            dst + "attn.wo.weight": get(a + "o_proj.weight"),
            dst + "attn_norm.weight": get(src + "input_layernorm.weight"),
            dst + "mlp_norm.weight": get(src + "post_attention_layernorm.weight"),
        })
        if cfg.is_moe(i):
            sd.update(_experts_from_hf(get, src, dst, cfg))
        else:
            sd.update({dst + "mlp.w1.weight": get(src + "mlp.gate_proj.weight"),
                       dst + "mlp.w3.weight": get(src + "mlp.up_proj.weight"),
                       dst + "mlp.w2.weight": get(src + "mlp.down_proj.weight")})
    return {k: v.float() for k, v in sd.items()}


def _experts_from_hf(get, src: str, dst: str, cfg: ModelConfig) -> dict:
    """One MoE layer's router and stacked experts from per-expert matrices (either
    family's names: the block is `block_sparse_moe.` in Mixtral folders, `mlp.` in
    Qwen3-MoE's); the balancing bias starts at zero."""
    import torch

    block, names = EXPERT_NAMES["qwen3_moe" if cfg.qk_norm else "mixtral"]
    out = {dst + "mlp.router.weight": get(src + block + "gate.weight"),
           dst + "mlp.expert_bias": torch.zeros(cfg.n_experts)}
    for ours, theirs in zip(("w1", "w3", "w2"), names, strict=True):
        out[dst + f"mlp.experts.{ours}"] = torch.stack(
            [get(src + block + f"experts.{e}.{theirs}.weight") for e in range(cfg.n_experts)])
    return out


def read_safetensors(path: str) -> dict:
    """Every tensor of model.safetensors, or of the shards its index names."""
    from safetensors.torch import load_file

    single = os.path.join(path, WEIGHTS)
    index = single + ".index.json"
    try:
        if os.path.isfile(single):
            return load_file(single)
        if os.path.isfile(index):
            with open(index) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
            out: dict = {}
            for name in files:
                out.update(load_file(os.path.join(path, name)))
            return out
    except (OSError, ValueError, KeyError) as e:
        raise DataError(f"{path}: cannot read the weights ({e})") from None
    except Exception as e:  # safetensors raises its own SafetensorError for a bad file
        raise DataError(f"{path}: cannot read the weights ({e})") from None
    raise UsageError(f"{path}: no {WEIGHTS} (only safetensors weights are read, never "
                     "pickled .bin files)")


def read_hf_config(path: str) -> dict:
    try:
        with open(os.path.join(path, "config.json")) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise DataError(f"{path}/config.json: cannot read ({e})") from None


def load_hf(path: str, seq_len: int | None = None) -> tuple[ModelConfig, dict]:
    """(ModelConfig, llmtk state_dict) of a Hugging Face Llama-family folder."""
    hf = read_hf_config(path)
    try:
        cfg = config_from_hf(hf, seq_len)
    except (ValueError, KeyError, TypeError) as e:
        arch = ", ".join(hf.get("architectures") or [str(hf.get("model_type"))])
        raise UsageError(f"{path}: {arch} does not map onto llmtk's Llama-style model: "
                         f"{e}") from None
    return cfg, from_hf_state(read_safetensors(path), cfg, path)


def tokenizer_file(path: str) -> str:
    tok = os.path.join(path, "tokenizer.json")
    if not os.path.isfile(tok):
        raise UsageError(f"{path}: no tokenizer.json (a fast tokenizer is needed; save it with "
                         "tokenizer.save_pretrained)")
    return tok


# ------------------------------------------------------------------ tokenizers


def byte_tokenizer_json() -> str:
    """A tokenizer.json whose ids are llmtk's byte tokenizer's: byte b -> b, EOS -> 256.

    A byte-level BPE with the 256 GPT-2 byte symbols and no merges: the ByteLevel
    pre-tokenizer maps each UTF-8 byte to its symbol, the vocabulary maps the symbol
    to the byte's value, and the ByteLevel decoder turns symbols back into bytes.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = _bytes_to_unicode()
    vocab = {alphabet[b]: b for b in range(256)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>"])
    assert tok.token_to_id("<|endoftext|>") == 256
    return tok.to_str()


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table (the ByteLevel alphabet)."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs, strict=True)}


def _write_tokenizer(out: str, tok_spec: str, tok) -> None:
    """tokenizer.json (copied, or the byte-level one) plus tokenizer_config.json (the
    source folder's, or a minimal one naming the EOS token)."""
    if tok.name == "bytes":
        text = byte_tokenizer_json()
    else:
        with open(tok.path, encoding="utf-8") as f:
            text = f.read()
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(text)
    home = os.path.dirname(os.path.abspath(tok.path)) if tok.name != "bytes" else None
    if home and os.path.isfile(os.path.join(home, "tokenizer_config.json")):
        # The tokenizer came from a Hugging Face folder (--init-from hf:): keep its own
        # settings (BOS handling, chat template, special tokens).
        for name in ("tokenizer_config.json", "special_tokens_map.json"):
            if os.path.isfile(os.path.join(home, name)):
                shutil.copyfile(os.path.join(home, name), os.path.join(out, name))
        return
    eos = getattr(tok, "eos_token", "<|endoftext|>")
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": eos,
              "model_max_length": None, "clean_up_tokenization_spaces": False,
              "add_bos_token": False, "add_eos_token": False}
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(out, "special_tokens_map.json"), "w") as f:
        json.dump({"eos_token": eos}, f, indent=2)


# ------------------------------------------------------------------ export


def export_hf(checkpoint: str, out: str) -> dict:
    """Write checkpoint (a run, checkpoints or step directory) as a transformers folder.

    Written to OUT.tmp-PID and renamed into place, so a failed export leaves no folder
    that looks finished. Returns a small summary.
    """
    from safetensors.torch import save_file

    from llmtk.text.tokenizer import load_tokenizer
    from llmtk.train.checkpoint import files as C

    path = C.resolve(checkpoint)
    if path is None:
        raise UsageError(f"{checkpoint}: no complete checkpoint there")
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise ConfigError("hf", "exists and is not an empty directory", value=out)
    state = C.load_state(path)
    cfg = ModelConfig(**state["model_config"])
    try:
        _architecture(cfg)
    except ValueError as e:
        raise UsageError(f"{path}: no Hugging Face architecture holds this model: {e}") from None
    tok_spec = state.get("train_config", {}).get("tokenizer", "bytes")
    tok = load_tokenizer(tok_spec)
    if tok.fingerprint() != state.get("tokenizer", tok.fingerprint()):
        raise DataError(f"{tok_spec}: this tokenizer is not the one {path} was trained with "
                        f"({tok.fingerprint()} != {state['tokenizer']})")
    sd = full_state_dict(path)  # full or DCP-sharded checkpoints alike
    _check_no_bias(sd, path)
    tensors = to_hf_state(sd, cfg)
    with atomic_dir(out) as tmp:  # replaces an empty out (checked above)
        save_file(tensors, os.path.join(tmp, WEIGHTS), metadata={"format": "pt"})
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(hf_config(cfg, tok.eos_id), f, indent=2)
        with open(os.path.join(tmp, "generation_config.json"), "w") as f:
            json.dump({"eos_token_id": tok.eos_id, "bos_token_id": None}, f, indent=2)
        _write_tokenizer(tmp, tok_spec, tok)
    return {"checkpoint": path, "step": state.get("step"), "out": out,
            "architecture": hf_config(cfg, None)["architectures"][0],
            "params": sum(t.numel() for t in tensors.values())}


def _check_no_bias(sd: dict, path: str) -> None:
    """Refuse routers that a balancing bias steers: Mixtral's and Qwen3-MoE's routers have
    no bias, so the exported model would choose other experts than the trained one."""
    for key, t in sd.items():
        if key.endswith("mlp.expert_bias") and t.abs().max().item() > 0:
            raise UsageError(f"{path}: {key} is not zero: Mixtral and Qwen3-MoE routers hold "
                             "no balancing bias, so the export would route differently (train "
                             "with --router-bias-rate 0 to export)")


# ------------------------------------------------------------------ continued pre-training


SHAPE_FLAGS = ("layers", "d_model", "heads", "kv_heads", "ffn_hidden", "untied", "experts",
               "top_k", "shared_experts", "expert_ffn_hidden", "moe_every",
               "first_dense_layers", "router_score")
# How the routers train: applied over the folder's own (_moe_fields) when given.
ROUTER_FLAGS = ("router_bias_rate", "router_bias_rule", "router_aux_loss", "router_z_loss",
                "capacity_factor")


@dataclass(frozen=True)
class InitSpec:
    """What `--init-from hf:PATH` reads of the run's configuration (TrainConfig's fields,
    same names: `config.section(InitSpec, cfg)`)."""

    init_from: str | None = None
    tokenizer: str = "bytes"
    seq_len: int | None = None
    # shape flags: the folder's config.json decides them, so giving one is an error
    layers: int | None = None
    d_model: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    ffn_hidden: int | None = None
    untied: bool = False
    experts: int | None = None
    top_k: int | None = None
    shared_experts: int | None = None
    expert_ffn_hidden: int | None = None
    moe_every: int | None = None
    first_dense_layers: int | None = None
    router_score: str | None = None
    # router training options (None: the folder's, see _moe_fields)
    router_bias_rate: float | None = None
    router_bias_rule: str | None = None
    router_aux_loss: float | None = None
    router_z_loss: float | None = None
    capacity_factor: float | None = None


def resolve_init(init: InitSpec) -> str:
    """The tokenizer a run trains with: for `--init-from hf:PATH` the folder's tokenizer.json
    (so checkpoints, caches and exports name it), else init.tokenizer. Shape flags are
    refused with hf:, since the shape is the folder's."""
    if not is_hf_spec(init.init_from):
        return init.tokenizer
    path = hf_path(init.init_from)
    given = tuple(n for n in SHAPE_FLAGS if getattr(init, n) not in (None, False))
    if given:
        named = ", ".join(f"{{{i}}}" for i in range(len(given)))
        raise ConfigError("init_from", "the model's shape comes from its config.json; drop "
                          f"{named}", also=given, value=init.init_from)
    tok = os.path.abspath(tokenizer_file(path))
    if init.tokenizer not in ("bytes", tok):
        raise ConfigError("init_from", f"trains with its own tokenizer.json; drop {{0}} "
                          f"{init.tokenizer}", also=("tokenizer",), value=init.init_from)
    return tok


def init_model_config(init: InitSpec, tokenizer_vocab: int) -> ModelConfig:
    """The model shape of `--init-from hf:PATH` (with --seq-len and the router flags if
    given)."""
    from dataclasses import replace

    path = hf_path(init.init_from)
    try:
        mc = config_from_hf(read_hf_config(path), init.seq_len)
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError("init_from", f"does not map onto llmtk's Llama-style model: {e}",
                          value=init.init_from) from None
    if tokenizer_vocab > mc.vocab_size:
        raise ConfigError("init_from", f"its tokenizer has {tokenizer_vocab} tokens but the "
                          f"model only {mc.vocab_size} embeddings", value=init.init_from)
    given = {flag: getattr(init, flag) for flag in ROUTER_FLAGS
             if getattr(init, flag) is not None}
    return replace(mc, **given) if mc.n_experts else mc


def init_weights(init_from: str, mcfg: ModelConfig) -> dict:
    """The llmtk state_dict of `--init-from hf:PATH`, for a model of shape mcfg."""
    path = hf_path(init_from)
    return from_hf_state(read_safetensors(path), mcfg, path)
