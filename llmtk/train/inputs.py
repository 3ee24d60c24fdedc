"""What `--data` names, opened for training: documents, or token-shard datasets.

Documents (JSONL/Parquet files, directories, globs) are tokenized once into the
in-process cache (llmtk.train.data.build_cache). Token-shard datasets (folders
written by `llmtk train tokenize`) are memory-mapped as they are: nothing is
tokenized at start, and opening one reads its meta and one manifest per part,
never its document index. One dataset (`--data DIR`) is sampled exactly as the
cache is (llmtk.train.data.Sampler); named ones (`--data NAME=DIR:WEIGHT`,
repeated) are blended (llmtk.train.blend). `--val-data NAME=DIR` gives each a
validation loss of its own.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field

from llmtk.errors import ConfigError
from llmtk.train.blend import SourceSpec, parse_spec
from llmtk.train.tokens import TokenDataset, is_dataset

TOKENS_KEY = "tokens-"  # the data key of a run on token datasets (vs a cache directory)


def token_specs(key: str, values: list[str]) -> list[SourceSpec] | None:
    """The sources of --data/--val-data when they are token datasets; None for documents."""
    specs = [parse_spec(key, v) for v in values]
    tokens = [s.name is not None or is_dataset(s.path) for s in specs]
    if not any(tokens):
        return None
    if not all(tokens):
        odd = next(v for v, t in zip(values, tokens, strict=True) if not t)
        raise ConfigError(key, "mixes documents and token datasets; tokenize the documents "
                          "with `llmtk train tokenize` first", value=odd)
    for s in specs:
        if not is_dataset(s.path):
            raise ConfigError(key, "not a token dataset (no meta.json of `llmtk train "
                              "tokenize` there)", value=s.path)
    names = [s.name for s in specs]
    if len(specs) > 1 and None in names:
        raise ConfigError(key, "several token datasets: name each, NAME=DIR:WEIGHT")
    if len(set(names)) != len(names):
        raise ConfigError(key, "a source name is given twice")
    return specs


def data_key(cfg, tok) -> str | None:
    """For token datasets: check them against the run's tokenizer and return the run's data
    key (it names the data in checkpoints, as a cache directory does); None for documents."""
    train = token_specs("data", cfg.data)
    val = token_specs("val_data", cfg.val_data) if cfg.val_data else []
    if train is None:
        if val:
            raise ConfigError("val_data", "token datasets need token-dataset --data")
        return None
    if val is None:
        raise ConfigError("val_data", "documents with token-dataset --data; tokenize them "
                          "with `llmtk train tokenize`")
    if cfg.val_fraction:
        raise ConfigError("val_fraction", "applies to documents; give token datasets "
                          "--val-data NAME=DIR")
    spec = []
    for s in [*train, *val]:
        ds = TokenDataset.open(s.path)
        ds.check_tokenizer(tok)
        spec.append([s.name, os.path.abspath(s.path), s.weight, ds.meta["tasks"], ds.tokens])
    digest = hashlib.sha1(json.dumps(spec).encode()).hexdigest()[:16]
    return TOKENS_KEY + digest


@dataclass
class TrainingData:
    train: object                # Sampler or BlendSampler
    val: object | None           # the validation Sampler of documents or one bare DIR
    val_sets: dict = field(default_factory=dict)  # name -> Sampler (--val-data NAME=DIR)
    meta: dict = field(default_factory=dict)      # config.json's "data"
    train_windows: int = 0       # windows per epoch (one source) for the epoch warning


def open_training_data(cfg, cache: str, seq_len: int, world: int, rank: int) -> TrainingData:
    from llmtk.train import data as D

    B = cfg.batch_size
    if not cache.startswith(TOKENS_KEY):
        meta = D.read_meta(cache)
        windows = D.Windows.open(cache, "train", seq_len)
        val_windows = D.Windows.open(cache, "val", seq_len)
        val = D.Sampler(val_windows, B, world, rank, cfg.seed, shuffle=False) \
            if len(val_windows) else None
        return TrainingData(
            D.Sampler(windows, B, world, rank, cfg.seed), val,
            meta={"train_tokens": meta["train"]["tokens"], "val_tokens": meta["val"]["tokens"],
                  "train_docs": meta["train"]["docs"], "val_docs": meta["val"]["docs"]},
            train_windows=len(windows))
    train = token_specs("data", cfg.data) or []
    sets = {s: TokenDataset.open(s.path) for s in train}
    meta = {"sources": {s.name or s.path: {"path": s.path, "weight": s.weight,
                                           "tokens": d.tokens, "docs": d.docs}
                        for s, d in sets.items()}}
    if len(train) == 1 and train[0].name is None:
        windows = sets[train[0]].windows(seq_len)
        sampler: object = D.Sampler(windows, B, world, rank, cfg.seed)
        n_windows = len(windows)
    else:
        from llmtk.train.blend import BlendSampler

        sampler = BlendSampler([s.name for s in train], [d.windows(seq_len) for d in
                                                         sets.values()],
                               [s.weight for s in train], B, world, rank, cfg.seed)
        n_windows = 0
    val, val_sets = None, {}
    for s in token_specs("val_data", cfg.val_data) or []:
        windows = TokenDataset.open(s.path).windows(seq_len)
        if not len(windows):
            raise ConfigError("val_data", f"not enough tokens for one sequence of "
                              f"{seq_len + 1}", value=s.path)
        one = D.Sampler(windows, B, world, rank, cfg.seed, shuffle=False)
        if s.name is None:
            val = one
        else:
            val_sets[s.name] = one
    return TrainingData(sampler, val, val_sets, meta, n_windows)


def epoch_warnings(data: TrainingData, end_position: int, max_epochs: float) -> list[str]:
    """A line per source that the run would read more than max_epochs times."""
    if hasattr(data.train, "epochs"):
        epochs = data.train.epochs(end_position)
    else:
        epochs = {"--data": end_position / max(1, data.train_windows)}
    return [f"warning: {name} is read {e:.3g} times by the end of the run, more than "
            f"--max-epochs {max_epochs:g} (lower its weight or the steps, or add data)"
            for name, e in epochs.items() if e > max_epochs]
