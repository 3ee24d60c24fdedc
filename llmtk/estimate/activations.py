"""Activation memory of the llmtk training model (eager PyTorch, CPU, fp32), and what
`llmtk estimate` predicts for one of its training steps; `llmtk estimate --measure` checks
both against a real step (llmtk.train.measure).

The prediction for activations (`llmtk_saved_bytes`) describes what this model saves,
not Korthikanti's GPT-3 block; the difference is spelled out in docs/estimate.md and
printed next to it. A model config is read by its attributes (n_layer, d_model, hidden,
kv_heads, ...), so nothing here imports llmtk.train or torch.
"""

from __future__ import annotations

from dataclasses import replace

from llmtk.compute.models import ModelSpec
from llmtk.estimate import memory


def llmtk_saved_bytes(cfg, batch: int, seq: int, elem: int = 4,
                      recompute: str = "selective", lora_rank: int | None = None,
                      lora_parts: int = 7) -> dict[str, float]:
    """Bytes autograd keeps for backward in `llmtk.train.model.GPT` (eager, CPU, fp32).

    Per layer and token, in elements of C = d_model, f = MLP width, H/K heads/kv heads:
    - each RMSNorm (F.rms_norm decomposes): its input, x·rstd and its output: 3C, + rstd;
    - attention: q and k after rotary (new tensors: C and K·D), the SDPA output and the
      w_o input (a copy made by reshape): 3C + K·D; v is a view into the fused qkv output,
      which stays alive whole (C + 2·K·D) — SDPA's enable_gqa broadcasts K/V without
      copies; + SDPA's fp32 log-sum-exp, H per token;
    - SwiGLU: w1 x, w3 x, silu(w1 x) and the product: 4f.
    Once per model: the token ids (int64), the final norm's input and x·rstd (2C + rstd:
    its output is not kept), and the chunked cross-entropy's gradients computed in
    forward: d/dh (C per token) and d/dW of the padded head (fp32, Vp·C) plus its token
    count. With recompute="full" (the model's activation checkpointing) a layer keeps only
    its input, C per token. SDPA never stores the attention scores, so "none" = "selective".

    With lora_rank r (llmtk train's LoRA, base frozen, `lora_parts` adapted projections
    per layer, 7 = q,k,v,o,gate,up,down; no dropout): each adapter keeps A·x, r per token;
    a norm with a frozen weight does not keep x·rstd (-C per norm); the first layer's
    attention norm needs no gradient at all (its input, the frozen embedding's output,
    has none: -C - rstd); no token ids (the embedding gets no gradient), and the frozen
    head gets no d/dW. Measured exact on CPU (tests/test_sft.py, docs/estimate.md).
    """
    C, f = cfg.d_model, cfg.hidden
    Vp = getattr(cfg, "padded_vocab", cfg.vocab_size)
    H, K, D = cfg.n_head, cfg.kv_heads, cfg.head_dim
    n = batch * seq
    norms = 2 * (3 * C * elem + 4)
    attn = (4 * C + 3 * K * D) * elem
    attn += 4 * H  # log-sum-exp, fp32
    mlp = 4 * f * elem
    first = 0  # the first layer's difference from the others
    if lora_rank:
        norms -= 2 * C * elem  # frozen norm weights: x·rstd is not kept
        per_layer_lora = lora_parts * lora_rank * elem  # A·x of every adapter
        per_layer = n * (norms + attn + mlp + per_layer_lora)
        first = -n * (C * elem + 4)
    else:
        per_layer = n * (norms + attn + mlp)
    if recompute == "full":
        per_layer, first = n * C * elem, 0
    if lora_rank:  # the final norm's input and rstd, d/dh, the token count
        head = n * (C * elem + 4 + C * elem) + 8
    else:
        head = n * (8 + 2 * C * elem + 4 + C * elem) + Vp * C * 4 + 8  # + the token count
    layers = cfg.n_layer * per_layer + first
    return {"per_layer": per_layer, "layers": layers, "once": head, "total": layers + head}


def korthikanti_style_bytes(cfg, batch: int, seq: int, elem: int = 4,
                            recompute: str = "selective") -> float:
    """The big-model formula (memory.activation_bytes) applied to this shape, for contrast."""
    spec = replace(spec_of(cfg), seq_len=seq)
    return memory.activation_bytes(spec, batch, par=memory.Parallel(),
                                   recompute="full" if recompute == "full" else "selective",
                                   elem=elem)


def spec_of(cfg) -> ModelSpec:
    """estimate's view of a llmtk.train ModelConfig (duck-typed: no train import)."""
    return ModelSpec("measured", cfg.n_layer, cfg.d_model, cfg.n_head, cfg.vocab_size,
                     cfg.seq_len, n_kv_head=cfg.kv_heads, ffn_hidden=cfg.hidden,
                     tie_embeddings=True)


def predict(cfg, params: int, batch: int, recompute: str = "selective",
            lora_rank: int | None = None) -> dict:
    """What `llmtk estimate` predicts for the same step (with --lora-rank: the adapters'
    parameters, gradients and AdamW states on top of the frozen weights). params: the
    model's exact parameter count (llmtk.train.model_config.count_params)."""
    from llmtk.estimate.plan import lora_params

    n = params
    trainable = lora_params(spec_of(cfg), lora_rank) if lora_rank else None
    states = memory.model_state_bytes(n + (trainable or 0), precision="fp32", optimizer="adamw",
                                      par=memory.Parallel(), trainable=trainable)
    return {"params": n, "weights": states["weights"], "gradients": states["gradients"],
            "optimizer": states["optimizer"],
            "activations": llmtk_saved_bytes(cfg, batch, cfg.seq_len, recompute=recompute,
                                             lora_rank=lora_rank)["total"],
            "activations_korthikanti_style": korthikanti_style_bytes(cfg, batch, cfg.seq_len,
                                                                     recompute=recompute)}
