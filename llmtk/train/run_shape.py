"""The model shape a training run asks for: a named preset, or the shape of the Hugging Face
checkpoint it starts from, with the run's own overrides (layers, width, heads, ...).

Apart from model/config.py (which model/hf.py builds on), so that the trainer and the fine-tuning
setup share it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from llmtk.errors import UsageError
from llmtk.train.model.config import PRESETS, ModelConfig, check_model_name
from llmtk.train.model.hf import InitSpec


@dataclass(frozen=True)
class ModelSpec(InitSpec):
    """The configuration's model section (config.section(ModelSpec, cfg)): the preset named
    by --model, and InitSpec's fields: its overrides (the mixture-of-experts ones too),
    --seq-len, and where the model and its tokenizer may come from instead (--init-from,
    --tokenizer)."""

    model: str = "tiny"


def shape_overrides(spec: ModelSpec) -> dict:
    """The dense shape flags as ModelConfig fields (None: not given)."""
    return {"n_layer": spec.layers, "d_model": spec.d_model, "n_head": spec.heads,
            "n_kv_head": spec.kv_heads, "ffn_hidden": spec.ffn_hidden, "seq_len": spec.seq_len}


def moe_overrides(spec: ModelSpec) -> dict:
    """The mixture-of-experts flags as ModelConfig fields (None: not given)."""
    return {"n_experts": spec.experts, "top_k": spec.top_k,
            "n_shared_experts": spec.shared_experts, "expert_hidden": spec.expert_ffn_hidden,
            "moe_every": spec.moe_every, "first_dense": spec.first_dense_layers,
            "router_score": spec.router_score, "router_bias_rate": spec.router_bias_rate,
            "router_bias_rule": spec.router_bias_rule,
            "router_aux_loss": spec.router_aux_loss, "router_z_loss": spec.router_z_loss,
            "capacity_factor": spec.capacity_factor}


def model_config(spec: ModelSpec, vocab_size: int) -> ModelConfig:
    from llmtk.train.model import hf

    if hf.is_hf_spec(spec.init_from):
        return hf.init_model_config(spec, vocab_size)
    check_model_name(spec.model)
    mc = replace(PRESETS[spec.model], vocab_size=vocab_size)
    mc = replace(mc, **{k: v for k, v in {**shape_overrides(spec), **moe_overrides(spec)}.items()
                        if v is not None})
    if spec.untied:
        mc = replace(mc, tie_embeddings=False)
    if spec.heads is not None and spec.kv_heads is None and PRESETS[spec.model].n_kv_head:
        mc = replace(mc, n_kv_head=None)
    try:
        mc.validate()
    except ValueError as e:
        raise UsageError(f"model shape: {e}") from None
    return mc
