"""One preset table for estimate and train: `train --model X` builds the shape that
`estimate --model X` computes (the vocabulary follows the tokenizer)."""

from dataclasses import replace

import pytest

from llmtk.compute.models import PRESETS as ESTIMATE_PRESETS
from llmtk.compute.models import count_params as estimate_count
from llmtk.errors import UsageError
from llmtk.presets import PRESETS, trainable
from llmtk.train.config import TrainConfig, section
from llmtk.train.model.config import PRESETS as TRAIN_PRESETS
from llmtk.train.model.config import count_params as train_count
from llmtk.train.run_shape import ModelSpec, model_config


def shape(model: str) -> ModelSpec:
    """The model section of a run of preset `model`."""
    return section(ModelSpec, TrainConfig(model=model, data=["x"], out="o"))


def test_estimate_and_train_read_the_same_table():
    assert ESTIMATE_PRESETS is PRESETS
    assert set(TRAIN_PRESETS) == {n for n, m in PRESETS.items() if trainable(m) is None}
    assert {"tiny", "llama2-7b", "llama3-8b", "mistral-7b", "7b"} <= set(TRAIN_PRESETS)


@pytest.mark.parametrize("name", sorted(n for n, m in PRESETS.items() if trainable(m) is None))
def test_train_builds_the_shape_estimate_computes(name):
    spec = PRESETS[name]
    cfg = model_config(shape(name), spec.vocab_size)
    assert (cfg.n_layer, cfg.d_model, cfg.n_head, cfg.kv_heads, cfg.hidden, cfg.vocab_size,
            cfg.seq_len, cfg.tie_embeddings) == (
        spec.n_layer, spec.d_model, spec.n_head, spec.kv_heads, spec.ffn, spec.vocab_size,
        spec.seq_len, spec.tie_embeddings)
    # train pads its embedding/head rows to a multiple of 128; only that may differ
    assert train_count(cfg) == estimate_count(replace(spec, vocab_size=cfg.padded_vocab)).total


def test_llama2_7b_and_llama3_8b_are_their_published_sizes():
    cfg = model_config(shape("llama2-7b"), 32000)
    assert train_count(cfg) == 6_738_415_616  # HF meta-llama/Llama-2-7b-hf
    cfg = model_config(shape("llama3-8b"), 128256)
    assert train_count(cfg) == 8_030_261_248 and cfg.rope_theta == 500000.0
    # With the byte tokenizer the vocabulary is the tokenizer's, the rest the preset's.
    small = model_config(shape("llama2-7b"), 257)
    assert replace(small, vocab_size=32000) == model_config(shape("llama2-7b"), 32000)


@pytest.mark.parametrize("name, why", [
    ("gpt2-124m", "GPT-2/3-style"),
    ("deepseek-v3", "MoE"),
    ("palm-540b", "parallel attention"),
])
def test_presets_train_cannot_build_are_refused_with_the_reason(name, why):
    with pytest.raises(UsageError, match=why):
        model_config(shape(name), 257)
    with pytest.raises(UsageError, match="^model: must be one of tiny"):
        model_config(shape("gpt5"), 257)
