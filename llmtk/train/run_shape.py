"""The model shape a training run asks for: a named preset, or the shape of the Hugging Face
checkpoint it starts from, with the run's own overrides (layers, width, heads, ...).

Apart from model/config.py (which model/hf.py builds on), so that the trainer and the fine-tuning
setup share it without importing each other.
"""

from __future__ import annotations

from dataclasses import replace

from llmtk.errors import UsageError
from llmtk.train.config import TrainConfig, section
from llmtk.train.model.config import PRESETS, ModelConfig, check_model_name


def moe_overrides(cfg: TrainConfig) -> dict:
    """The mixture-of-experts flags as ModelConfig fields (None: not given)."""
    return {"n_experts": cfg.experts, "top_k": cfg.top_k,
            "n_shared_experts": cfg.shared_experts, "expert_hidden": cfg.expert_ffn_hidden,
            "moe_every": cfg.moe_every, "first_dense": cfg.first_dense_layers,
            "router_score": cfg.router_score, "router_bias_rate": cfg.router_bias_rate,
            "router_aux_loss": cfg.router_aux_loss, "router_z_loss": cfg.router_z_loss,
            "capacity_factor": cfg.capacity_factor}


def model_config(cfg: TrainConfig, vocab_size: int) -> ModelConfig:
    from llmtk.train.model import hf

    if hf.is_hf_spec(cfg.init_from):
        return hf.init_model_config(section(hf.InitSpec, cfg), vocab_size)
    check_model_name(cfg.model)
    mc = replace(PRESETS[cfg.model], vocab_size=vocab_size)
    overrides = {"n_layer": cfg.layers, "d_model": cfg.d_model, "n_head": cfg.heads,
                 "n_kv_head": cfg.kv_heads, "ffn_hidden": cfg.ffn_hidden, "seq_len": cfg.seq_len}
    mc = replace(mc, **{k: v for k, v in {**overrides, **moe_overrides(cfg)}.items()
                        if v is not None})
    if cfg.untied:
        mc = replace(mc, tie_embeddings=False)
    if cfg.heads is not None and cfg.kv_heads is None and PRESETS[cfg.model].n_kv_head:
        mc = replace(mc, n_kv_head=None)
    try:
        mc.validate()
    except ValueError as e:
        raise UsageError(f"model shape: {e}") from None
    return mc
