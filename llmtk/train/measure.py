"""One real training step of the llmtk model on CPU in fp32, measured: the bytes of
weights, gradients and AdamW states counted from the tensors themselves, and the
activations autograd saves for backward, seen through
`torch.autograd.graph.saved_tensors_hooks` during one forward pass with a loss: each
storage counted once (views share it), parameters and buffers excluded.
`llmtk estimate --measure` sets these against llmtk.estimate.activations' prediction.
"""

from __future__ import annotations

from llmtk.compute.models import Dims
from llmtk.errors import UsageError
from llmtk.train.model_config import PRESETS, ModelConfig, count_params, preset

MAX_PARAMS = 200e6  # a CPU check, not a benchmark: refuse shapes that would take minutes


def config_from(model: str | None, dims: Dims):
    """A llmtk.train ModelConfig from a train preset name and/or the dimension options."""
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
    n = count_params(cfg)
    if n > MAX_PARAMS:
        raise UsageError(f"--measure: {n / 1e6:,.0f}M parameters is too big for a CPU check "
                         f"(limit {MAX_PARAMS / 1e6:,.0f}M): give smaller dimensions")
    return cfg


def measure(cfg, batch: int, seed: int = 0, recompute: str = "selective",
            lora_rank: int | None = None) -> dict:
    """Measure one training step of GPT(cfg) on CPU in fp32 (torch imported here); with
    lora_rank, of llmtk train's LoRA model (frozen base, adapters on every linear layer)."""
    import torch

    from llmtk.train.model import GPT

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
