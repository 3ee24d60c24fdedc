"""A proxy run read from its `llmtk train --config` file: the model it builds and the
tokens it reads. `mix search` trains it K times; `estimate --search-trials K --proxy`
prices that. (Here, not in a domain package: it needs train's config and compute's
parameter counts, and neither mix nor estimate may import train.)"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass
class ProxyRun:
    path: str
    values: dict    # the file's keys and checked values
    steps: int
    tokens: int     # what one run reads: steps x batch x grad_accum x processes x seq_len
    threads: int    # torch threads of one run (default 1)
    shape: object   # llmtk.train's ModelConfig, at the vocabulary given


def read_proxy(option: str, path: str, vocab_size: int,
               named_tokenizer_first: bool = False) -> ProxyRun:
    """The proxy of `option` (its flag, for the errors) at this vocabulary, or, with
    named_tokenizer_first, at its own tokenizer's when the file names one (`tokenizer`)."""
    from llmtk.errors import UsageError
    from llmtk.train.config import (
        LAUNCH_FIELDS,
        TRAIN_FIELDS,
        LaunchConfig,
        TrainConfig,
        load_toml,
        section,
    )
    from llmtk.train.run_shape import ModelSpec, model_config

    if not os.path.isfile(path):
        raise UsageError(f"{option}: {path}: no such file")
    values = load_toml(path)
    if named_tokenizer_first and "tokenizer" in values:
        from llmtk.text.tokenizer import load_tokenizer

        vocab_size = load_tokenizer(values["tokenizer"]).vocab_size
    cfg = TrainConfig(**{k: v for k, v in values.items() if k in TRAIN_FIELDS})
    launch = LaunchConfig(**{k: v for k, v in values.items() if k in LAUNCH_FIELDS})
    shape = model_config(section(ModelSpec, cfg), vocab_size=vocab_size)
    world = (launch.nproc_per_node or 1) * launch.nnodes
    tokens = cfg.steps * cfg.batch_size * cfg.grad_accum * world * shape.seq_len
    return ProxyRun(path, values, cfg.steps, tokens, cfg.threads or 1, shape)
