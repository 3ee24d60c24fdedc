"""The model shape a training run asks for: a named preset, or the shape of the Hugging Face
checkpoint it starts from, with the run's own overrides (layers, width, heads, ...).

Apart from model_config.py (which hf.py builds on), so that the trainer and the fine-tuning
setup share it without importing each other.
"""

from __future__ import annotations

from dataclasses import replace

from llmtk.errors import UsageError
from llmtk.train.config import TrainConfig
from llmtk.train.model_config import PRESETS, ModelConfig, check_model_name


def model_config(cfg: TrainConfig, vocab_size: int) -> ModelConfig:
    from llmtk.train import hf

    if hf.is_hf_spec(cfg.init_from):
        return hf.init_model_config(cfg, vocab_size)
    check_model_name(cfg.model)
    mc = replace(PRESETS[cfg.model], vocab_size=vocab_size)
    overrides = {"n_layer": cfg.layers, "d_model": cfg.d_model, "n_head": cfg.heads,
                 "n_kv_head": cfg.kv_heads, "ffn_hidden": cfg.ffn_hidden, "seq_len": cfg.seq_len}
    mc = replace(mc, **{k: v for k, v in overrides.items() if v is not None})
    if cfg.untied:
        mc = replace(mc, tie_embeddings=False)
    if cfg.heads is not None and cfg.kv_heads is None and PRESETS[cfg.model].n_kv_head:
        mc = replace(mc, n_kv_head=None)
    try:
        mc.validate()
    except ValueError as e:
        raise UsageError(f"model shape: {e}") from None
    return mc
