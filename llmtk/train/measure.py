"""One real training step of the llmtk model on CPU in fp32, measured: the bytes of
weights, gradients and AdamW states counted from the tensors themselves, and the
activations autograd saves for backward, seen through
`torch.autograd.graph.saved_tensors_hooks` during one forward pass with a loss: each
storage counted once (views share it), parameters and buffers excluded.
`llmtk estimate --measure` sets these against llmtk.estimate.activations' prediction.
"""

from __future__ import annotations

import collections
import contextlib

from llmtk.compute.models import Dims
from llmtk.errors import UsageError
from llmtk.train.model.config import PRESETS, ModelConfig, count_params, preset

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


def local(t):
    """A tensor's bytes on this rank: a DTensor's local shard (FSDP2, tensor parallel)."""
    return t._local_tensor if hasattr(t, "_local_tensor") else t


def nbytes(t) -> int:
    t = local(t)
    return t.numel() * t.element_size()


def state_bytes(params, opt) -> dict[str, int]:
    """This rank's bytes of parameters (all of `params`), gradients (those that have one)
    and the optimizer's per-parameter states. AdamW's scalar step counters (one 4-byte
    tensor per parameter tensor) are not model-sized and not counted."""
    import torch

    return {
        "weights": sum(nbytes(p) for p in params),
        "gradients": sum(nbytes(p.grad) for p in params if p.grad is not None),
        "optimizer": sum(nbytes(v) for st in opt.state.values() for k, v in st.items()
                         if k != "step" and torch.is_tensor(v)),
    }


@contextlib.contextmanager
def saved_for_backward(model):
    """Count the bytes autograd saves for backward while the block runs: each storage once
    (views share it), a DTensor by its local shard; parameters are not activations, be
    they this rank's shards, FSDP2's gathered copies or a view of one (a weight's
    transpose), nor are buffers (rotary tables). Yields a dict whose "bytes" is filled in
    when the block ends."""
    import torch

    not_activations = {local(t).untyped_storage().data_ptr()
                       for t in [*model.parameters(), *model.buffers()]}
    saved: dict[int, int] = {}

    def is_param(t) -> bool:
        return isinstance(t, torch.nn.Parameter) or isinstance(t._base, torch.nn.Parameter)

    # FSDP2 gathers a DTensor parameter (expert or tensor parallel) as a DTensor: the local
    # tensor a forward computes with (moe.local) is neither a Parameter nor a view of one,
    # but its storage is a parameter's while the module that holds it runs. Only then: once
    # FSDP2 frees it, an activation may be given the same address.
    live: collections.Counter = collections.Counter()
    running: list[list[int]] = []

    def enter(module, args) -> None:
        ptrs = [local(p).untyped_storage().data_ptr() for p in module.parameters()
                if hasattr(p, "to_local")]
        live.update(ptrs)
        running.append(ptrs)

    def leave(module, args, output) -> None:
        live.subtract(running.pop())

    def pack(t):
        if not is_param(t):
            storage = local(t).untyped_storage()
            ptr = storage.data_ptr()
            if ptr not in not_activations and live[ptr] <= 0:
                saved[ptr] = max(saved.get(ptr, 0), storage.nbytes())
        return t

    out: dict = {}
    hooks = [h for m in model.modules() for h in (m.register_forward_pre_hook(enter),
                                                  m.register_forward_hook(leave))]
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield out
    finally:
        for h in hooks:
            h.remove()
    out["bytes"] = sum(saved.values())


def measure(mcfg: ModelConfig, batch: int, seed: int = 0, recompute: str = "selective",
            lora_rank: int | None = None) -> dict:
    """Measure one training step of GPT(mcfg) on CPU in fp32 (torch imported here); with
    lora_rank, of llmtk train's LoRA model (frozen base, adapters on every linear layer)."""
    import torch

    from llmtk.train.model.gpt import GPT

    n = count_params(mcfg)
    torch.manual_seed(seed)
    model = GPT(mcfg)
    if lora_rank:
        from llmtk.train.model.lora import add_lora

        n += add_lora(model, lora_rank)
    model.activation_checkpointing = recompute == "full"
    params = [p for p in model.parameters() if p.requires_grad]
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, mcfg.vocab_size, (batch, mcfg.seq_len), generator=g)
    with saved_for_backward(model) as saved:
        _, loss = model(idx, idx)
    loss.backward()
    opt = torch.optim.AdamW(params, lr=1e-3)
    opt.step()
    # weights: all of them (LoRA's frozen base too); gradients and AdamW: the trained ones
    return {"params": n, **state_bytes(list(model.parameters()), opt),
            "activations": saved["bytes"]}
