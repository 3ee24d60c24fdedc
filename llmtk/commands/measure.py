"""`--measure`: build the llmtk training model on CPU and compare measured bytes with predicted.

Weights, gradients and AdamW states are counted from the tensors themselves.
Activations are the tensors autograd saves for backward, seen through
`torch.autograd.graph.saved_tensors_hooks` during one forward pass with a loss:
each storage counted once (views share it), parameters and buffers excluded.

The prediction for activations (`llmtk_saved_bytes`) describes what this model
saves in eager PyTorch on CPU in fp32, not Korthikanti's GPT-3 block; the
difference is spelled out in docs/estimate.md and printed next to it.
"""

from __future__ import annotations

from llmtk.compute.models import Dims, ModelSpec
from llmtk.errors import UsageError
from llmtk.estimate import memory

MAX_PARAMS = 200e6  # a CPU check, not a benchmark: refuse shapes that would take minutes


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
    spec = ModelSpec("measured", cfg.n_layer, cfg.d_model, cfg.n_head, cfg.vocab_size, seq,
                     n_kv_head=cfg.kv_heads, ffn_hidden=cfg.hidden, tie_embeddings=True)
    return memory.activation_bytes(spec, batch, par=memory.Parallel(),
                                   recompute="full" if recompute == "full" else "selective",
                                   elem=elem)


def config_from(model: str | None, dims: Dims):
    """A llmtk.train ModelConfig from a train preset name and/or the dimension options."""
    from llmtk.train.model_config import PRESETS, ModelConfig, preset

    if dims.head_dim is not None:
        raise UsageError("--head-dim: the llmtk model always uses d_model / heads")
    fields = {"n_layer": dims.layers, "d_model": dims.d_model, "n_head": dims.heads,
              "n_kv_head": dims.kv_heads, "ffn_hidden": dims.ffn, "vocab_size": dims.vocab,
              "seq_len": dims.seq_len}
    fields = {k: v for k, v in fields.items() if v is not None}
    if model is not None:
        if model not in PRESETS:
            raise UsageError(f"--model: with --measure, one of llmtk train's presets "
                             f"(known: {', '.join(PRESETS)}), got {model!r}")
        cfg = preset(model, **fields)
    else:
        cfg = ModelConfig(**fields)
    try:
        cfg.validate()
    except ValueError as e:
        raise UsageError(f"--measure: {e}") from None
    from llmtk.train.model_config import count_params

    n = count_params(cfg)
    if n > MAX_PARAMS:
        raise UsageError(f"--measure: {n / 1e6:,.0f}M parameters is too big for a CPU check "
                         f"(limit {MAX_PARAMS / 1e6:,.0f}M): give smaller dimensions")
    return cfg


def _spec(cfg) -> ModelSpec:
    return ModelSpec("measured", cfg.n_layer, cfg.d_model, cfg.n_head, cfg.vocab_size,
                     cfg.seq_len, n_kv_head=cfg.kv_heads, ffn_hidden=cfg.hidden,
                     tie_embeddings=True)


def measure(cfg, batch: int, seed: int = 0, recompute: str = "selective",
            lora_rank: int | None = None) -> dict:
    """Measure one training step of GPT(cfg) on CPU in fp32 (torch imported here); with
    lora_rank, of llmtk train's LoRA model (frozen base, adapters on every linear layer)."""
    import torch

    from llmtk.train.model import GPT, count_params

    n = count_params(cfg)
    torch.manual_seed(seed)
    model = GPT(cfg)
    if lora_rank:
        from llmtk.train.lora import add_lora

        n += add_lora(model, lora_rank)
    model.activation_checkpointing = recompute == "full"
    everything = list(model.parameters())
    params = [p for p in everything if p.requires_grad]
    not_activations = {t.untyped_storage().data_ptr() for t in [*everything, *model.buffers()]}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in not_activations:
            saved[ptr] = max(saved.get(ptr, 0), storage.nbytes())
        return t

    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, cfg.vocab_size, (batch, cfg.seq_len), generator=g)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        _, loss = model(idx, idx)
    activations = sum(saved.values())
    loss.backward()
    opt = torch.optim.AdamW(params, lr=1e-3)
    opt.step()
    # AdamW's per-parameter states (exp_avg, exp_avg_sq); the scalar step counters
    # (one 4-byte tensor per parameter tensor) are not model-sized and not counted.
    opt_bytes = sum(v.numel() * v.element_size() for st in opt.state.values()
                    for k, v in st.items() if k != "step" and torch.is_tensor(v))
    return {
        "params": n,
        "weights": sum(p.numel() * p.element_size() for p in everything),
        "gradients": sum(p.grad.numel() * p.grad.element_size() for p in params),
        "optimizer": opt_bytes,
        "activations": activations,
    }


def predict(cfg, batch: int, recompute: str = "selective", lora_rank: int | None = None) -> dict:
    """What `llmtk estimate` predicts for the same step (with --lora-rank: the adapters'
    parameters, gradients and AdamW states on top of the frozen weights)."""
    from llmtk.estimate.plan import lora_params
    from llmtk.train.model_config import count_params

    n = count_params(cfg)
    trainable = lora_params(_spec(cfg), lora_rank) if lora_rank else None
    states = memory.model_state_bytes(n + (trainable or 0), precision="fp32", optimizer="adamw",
                                      par=memory.Parallel(), trainable=trainable)
    return {"params": n, "weights": states["weights"], "gradients": states["gradients"],
            "optimizer": states["optimizer"],
            "activations": llmtk_saved_bytes(cfg, batch, cfg.seq_len, recompute=recompute,
                                             lora_rank=lora_rank)["total"],
            "activations_korthikanti_style": korthikanti_style_bytes(cfg, batch, cfg.seq_len,
                                                                     recompute=recompute)}


def compare(cfg, batch: int, recompute: str = "selective", lora_rank: int | None = None) -> dict:
    got = measure(cfg, batch, recompute=recompute, lora_rank=lora_rank)
    want = predict(cfg, batch, recompute=recompute, lora_rank=lora_rank)
    rows = {}
    for k in ("weights", "gradients", "optimizer", "activations"):
        rows[k] = {"measured": got[k], "predicted": want[k],
                   "error": (want[k] - got[k]) / got[k] if got[k] else 0.0}
    rows["activations"]["korthikanti_style"] = want["activations_korthikanti_style"]
    states = ("weights", "gradients", "optimizer")
    m, p = sum(got[k] for k in states), sum(want[k] for k in states)
    rows["model_states"] = {"measured": m, "predicted": p, "error": (p - m) / m}
    return {"config": cfg.to_dict(), "batch": batch, "params": got["params"],
            "precision": "fp32 (CPU)", "recompute": recompute, "lora_rank": lora_rank,
            "rows": rows}


def measure_report(model: str | None, dims: Dims, *, batch: int, json_out: bool, file,
                   recompute: str = "selective", lora_rank: int | None = None) -> None:
    if recompute not in memory.RECOMPUTE:
        raise UsageError(f"--recompute: expected one of {', '.join(memory.RECOMPUTE)}, "
                         f"got {recompute!r}")
    cfg = config_from(model, dims)
    if lora_rank is not None and lora_rank < 1:
        raise UsageError(f"--lora-rank: must be >= 1, got {lora_rank}")
    result = compare(cfg, batch, recompute, lora_rank=lora_rank)
    if json_out:
        from llmtk.io.console import write_json

        write_json(file, result)
        return
    from rich.table import Table

    from llmtk.io.console import buffered_console

    c = result["config"]
    t = Table(title=(f"llmtk estimate --measure: {c['n_layer']} layers x d_model {c['d_model']}, "
                     f"{c['n_head']} heads ({cfg.kv_heads} kv), ffn {cfg.hidden}, vocab "
                     f"{c['vocab_size']}, seq {c['seq_len']}, batch {batch}, recompute "
                     f"{recompute}, fp32 on CPU, "
                     + (f"LoRA rank {lora_rank}, " if lora_rank else "") +
                     f"{result['params']:,} params"), title_justify="left")
    for col in ("bytes", "measured", "predicted", "error"):
        t.add_column(col, justify="left" if col == "bytes" else "right")
    for k, row in result["rows"].items():
        t.add_row(k, f"{row['measured']:,}", f"{row['predicted']:,.0f}", f"{row['error']:+.2%}")
    ks = result["rows"]["activations"]["korthikanti_style"]
    meas = result["rows"]["activations"]["measured"]
    t.add_row("activations, big-model formula", f"{meas:,}", f"{ks:,.0f}",
              f"{(ks - meas) / meas:+.2%}")
    console, emit = buffered_console(file)
    console.print(t)
    emit()
