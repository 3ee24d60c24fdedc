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
Qwen2 adds biases to q/k/v (`qkv_bias`); Mistral is Llama with an optional sliding
window, accepted when the window covers the whole context. Anything else (other
activations, rope scaling, q/k norms, explicit head_dim != d_model / heads, MoE) is
refused with the field that does not map.

Only `safetensors`, `tokenizers` and torch are needed: transformers itself is never
imported here (it is a test dependency, and what users load the export with).
"""

from __future__ import annotations

import json
import os
import shutil

from llmtk.errors import ConfigError, DataError, UsageError
from llmtk.io.atomic import atomic_dir
from llmtk.train.checkpoint.state_dict import full_state_dict
from llmtk.train.model.config import ModelConfig

PREFIX = "hf:"
SUPPORTED = ("llama", "mistral", "qwen2")
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
    d, heads = int(hf["hidden_size"]), int(hf["num_attention_heads"])
    head_dim = hf.get("head_dim")
    if head_dim is not None and int(head_dim) * heads != d:
        raise ValueError(f"head_dim {head_dim} x {heads} heads != hidden_size {d}")
    if kind == "llama" and (hf.get("attention_bias") or hf.get("mlp_bias")):
        raise ValueError("attention_bias/mlp_bias (llmtk's Llama has no biases)")
    window = hf.get("sliding_window")
    uses_window = hf.get("use_sliding_window", kind == "mistral")
    max_pos = int(hf.get("max_position_embeddings", 2048))
    T = seq_len or min(max_pos, 4096)
    sliding_layers = [t for t in hf.get("layer_types") or [] if t != "full_attention"]
    if window is not None and (uses_window or sliding_layers) and int(window) < T:
        raise ValueError(f"sliding_window {window} < the context {T} (llmtk attends to the "
                         "whole context)")
    if hf.get("num_experts") or hf.get("num_local_experts"):
        raise ValueError("mixture-of-experts layers")
    theta = _rope_theta(hf)
    cfg = ModelConfig(
        vocab_size=int(hf["vocab_size"]), seq_len=T, n_layer=int(hf["num_hidden_layers"]),
        d_model=d, n_head=heads, n_kv_head=int(hf.get("num_key_value_heads") or heads),
        ffn_hidden=int(hf["intermediate_size"]),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        norm_eps=float(hf.get("rms_norm_eps", 1e-6)), rope_theta=theta,
        qkv_bias=kind == "qwen2")
    cfg.validate()
    return cfg


def hf_config(cfg: ModelConfig, eos_id: int | None, bos_id: int | None = None) -> dict:
    """A transformers config.json for cfg: LlamaForCausalLM, or Qwen2ForCausalLM when
    the model has q/k/v biases. Both the 4.x (`rope_theta`) and 5.x (`rope_parameters`)
    spellings are written, so either generation of transformers reads it."""
    qwen = cfg.qkv_bias
    out = {
        "architectures": ["Qwen2ForCausalLM" if qwen else "LlamaForCausalLM"],
        "model_type": "qwen2" if qwen else "llama",
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
    if qwen:
        out.update(use_sliding_window=False, sliding_window=None)
    else:
        out.update(attention_bias=False, mlp_bias=False, attention_dropout=0.0,
                   pretraining_tp=1)
    return out


# ------------------------------------------------------------------ weights


def to_hf_state(sd: dict, cfg: ModelConfig) -> dict:
    """llmtk state_dict -> transformers names (tensors are contiguous copies: safetensors
    stores no views)."""
    from llmtk.train.model.gpt import ungroup_qkv

    H, K, D, V = cfg.n_head, cfg.kv_heads, cfg.head_dim, cfg.vocab_size
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
            dst + "mlp.gate_proj.weight": sd[src + "mlp.w1.weight"],
            dst + "mlp.up_proj.weight": sd[src + "mlp.w3.weight"],
            dst + "mlp.down_proj.weight": sd[src + "mlp.w2.weight"],
        })
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
        sd.update({
            dst + "attn.wo.weight": get(a + "o_proj.weight"),
            dst + "attn_norm.weight": get(src + "input_layernorm.weight"),
            dst + "mlp_norm.weight": get(src + "post_attention_layernorm.weight"),
            dst + "mlp.w1.weight": get(src + "mlp.gate_proj.weight"),
            dst + "mlp.w3.weight": get(src + "mlp.up_proj.weight"),
            dst + "mlp.w2.weight": get(src + "mlp.down_proj.weight"),
        })
    return {k: v.float() for k, v in sd.items()}


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
    if cfg.n_experts or cfg.qk_norm or cfg.explicit_head_dim is not None:
        raise UsageError(f"{path}: a mixture-of-experts or Qwen3-style (q/k norm, own head "
                         "dim) model; its export to a Hugging Face folder is not built yet")
    tok_spec = state.get("train_config", {}).get("tokenizer", "bytes")
    tok = load_tokenizer(tok_spec)
    if tok.fingerprint() != state.get("tokenizer", tok.fingerprint()):
        raise DataError(f"{tok_spec}: this tokenizer is not the one {path} was trained with "
                        f"({tok.fingerprint()} != {state['tokenizer']})")
    sd = full_state_dict(path)  # full or DCP-sharded checkpoints alike
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


# ------------------------------------------------------------------ continued pre-training


SHAPE_FLAGS = ("layers", "d_model", "heads", "kv_heads", "ffn_hidden", "untied", "experts",
               "top_k", "shared_experts", "expert_ffn_hidden", "moe_every",
               "first_dense_layers")


def resolve_init(cfg):
    """For `--init-from hf:PATH`: the TrainConfig with the folder's tokenizer.json as the
    tokenizer (so checkpoints, caches and exports name it); shape flags are refused, since
    the shape is the folder's."""
    from dataclasses import replace

    if not is_hf_spec(cfg.init_from):
        return cfg
    path = hf_path(cfg.init_from)
    given = tuple(n for n in SHAPE_FLAGS if getattr(cfg, n) not in (None, False))
    if given:
        named = ", ".join(f"{{{i}}}" for i in range(len(given)))
        raise ConfigError("init_from", "the model's shape comes from its config.json; drop "
                          f"{named}", also=given, value=cfg.init_from)
    tok = os.path.abspath(tokenizer_file(path))
    if cfg.tokenizer not in ("bytes", tok):
        raise ConfigError("init_from", f"trains with its own tokenizer.json; drop {{0}} "
                          f"{cfg.tokenizer}", also=("tokenizer",), value=cfg.init_from)
    return replace(cfg, tokenizer=tok)


def init_model_config(cfg, tokenizer_vocab: int) -> ModelConfig:
    """The model shape of `--init-from hf:PATH` (with --seq-len if given)."""
    path = hf_path(cfg.init_from)
    try:
        mc = config_from_hf(read_hf_config(path), cfg.seq_len)
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError("init_from", f"does not map onto llmtk's Llama-style model: {e}",
                          value=cfg.init_from) from None
    if tokenizer_vocab > mc.vocab_size:
        raise ConfigError("init_from", f"its tokenizer has {tokenizer_vocab} tokens but the "
                          f"model only {mc.vocab_size} embeddings", value=cfg.init_from)
    return mc


def init_weights(cfg, mcfg: ModelConfig) -> dict:
    """The llmtk state_dict of `--init-from hf:PATH`, for a model of shape mcfg."""
    path = hf_path(cfg.init_from)
    return from_hf_state(read_safetensors(path), mcfg, path)
