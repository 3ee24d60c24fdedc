"""What `--data` names, opened for training: documents, or token-shard datasets.

Either way training reads token datasets (llmtk.train.data.tokens). Documents (JSONL/Parquet
files, directories, globs) are tokenized once into the in-process cache, one-task
datasets (llmtk.train.data.cache.build_cache). Token-shard datasets (folders written by
`llmtk train tokenize`) are memory-mapped as they are: nothing is tokenized at start, and
opening one reads its meta and one manifest per part, never its document index. One
dataset (`--data DIR`, or the cache) is sampled by llmtk.train.data.cache.Sampler; named ones
(`--data NAME=DIR:WEIGHT`, repeated) are blended (llmtk.train.data.blend). `--val-data
NAME=DIR` gives each a validation loss of its own.

`open_source(spec, tok)` opens them (a `DataSource`: the datasets and the key that names
them in checkpoints and config.json); `open_training_data` makes the samplers.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field

from llmtk.errors import ConfigError
from llmtk.train.data.blend import BlendSampler, SourceSpec, parse_spec
from llmtk.train.data.cache import Sampler, build_cache, earlier_names, open_cache
from llmtk.train.data.tokens import TokenDataset, is_dataset

TOKENS_KEY = "tokens-"  # the data key of a run on token datasets (vs a cache directory)


@dataclass(frozen=True)
class DataSpec:
    """What the data side reads of the configuration: the sources, the cache, the
    sampler's batch and seed, and whether the run resumes (a run begun on an old cache)."""

    data: list[str]
    val_data: list[str]
    val_fraction: float
    text_field: str
    allow_html: bool
    cache_dir: str | None
    out: str | None
    batch_size: int
    seed: int
    resume: str


@dataclass(frozen=True)
class Source:
    """One token dataset the run reads: NAME=DIR:WEIGHT, or a bare DIR / the cache (name
    None)."""

    name: str | None
    dataset: TokenDataset
    weight: float = 1.0


@dataclass(frozen=True)
class DataSource:
    """The run's data, opened: its training and validation token datasets and `key`,
    which names them in checkpoints and config.json (the cache's directory, or
    tokens-DIGEST for token datasets)."""

    key: str
    train: list[Source]
    val: list[Source]
    cache: bool = False  # documents through the cache (whose val dataset may be empty)

    def label(self, s: Source) -> str:
        """How `train batch` names a source: NAME, a bare DIR's path, `data` (the cache)."""
        return "data" if self.cache else s.name or s.dataset.directory

    def meta(self) -> dict:
        """config.json's "data"."""
        if self.cache:
            (train,), (val,) = self.train, self.val
            return {"train_tokens": train.dataset.tokens, "val_tokens": val.dataset.tokens,
                    "train_docs": train.dataset.docs, "val_docs": val.dataset.docs}
        return {"sources": {self.label(s): {"path": s.dataset.directory, "weight": s.weight,
                                            "tokens": s.dataset.tokens,
                                            "docs": s.dataset.docs} for s in self.train}}


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


def open_source(spec: DataSpec, tok, log=None) -> DataSource:
    """The run's data: token datasets checked against the run's tokenizer, or documents
    tokenized into the cache (unless it is there)."""
    train = token_specs("data", spec.data)
    val = token_specs("val_data", spec.val_data) if spec.val_data else []
    if train is None:
        if val:
            raise ConfigError("val_data", "token datasets need token-dataset --data")
        cache = build_cache(spec.data, spec.val_data, tok,
                            spec.cache_dir or os.path.join(spec.out, "cache"), spec.text_field,
                            spec.val_fraction, log=log, allow_html=spec.allow_html)
        _refuse_other_windows(spec, cache)
        return cache_source(cache)
    if val is None:
        raise ConfigError("val_data", "documents with token-dataset --data; tokenize them "
                          "with `llmtk train tokenize`")
    if spec.val_fraction:
        raise ConfigError("val_fraction", "applies to documents; give token datasets "
                          "--val-data NAME=DIR")
    train_sets, val_sets = _datasets(train), _datasets(val)
    described = []
    for s in [*train_sets, *val_sets]:
        s.dataset.check_tokenizer(tok)
        described.append([s.name, os.path.abspath(s.dataset.directory), s.weight,
                          s.dataset.meta["tasks"], s.dataset.tokens])
    digest = hashlib.sha1(json.dumps(described).encode()).hexdigest()[:16]
    return DataSource(TOKENS_KEY + digest, train_sets, val_sets)


def _datasets(specs: list[SourceSpec]) -> list[Source]:
    return [Source(s.name, TokenDataset.open(s.path), s.weight) for s in specs]


def cache_source(directory: str) -> DataSource:
    """The cache at `directory` as a DataSource (FileNotFoundError: it is gone)."""
    train, val = open_cache(directory)
    return DataSource(directory, [Source(None, train)], [Source(None, val)], cache=True)


def recorded_source(spec: DataSpec, key: str) -> DataSource:
    """The data of a run whose config.json holds `spec` and names its data `key`."""
    if key.startswith(TOKENS_KEY):
        return DataSource(key, _datasets(token_specs("data", spec.data) or []),
                          _datasets(token_specs("val_data", spec.val_data) or []))
    return cache_source(key)


def _refuse_other_windows(spec: DataSpec, cache: str) -> None:
    """A run begun on a cache of an earlier version whose windows were not these (a split
    over 64M tokens: llmtk.train.data.cache) is not resumed on these: it would train on other
    windows from its checkpoint on."""
    if spec.resume != "auto" or not spec.out:
        return
    try:
        with open(os.path.join(spec.out, "config.json")) as f:
            began_on = json.load(f)["cache"]
    except (OSError, ValueError, KeyError, TypeError):
        return  # a new run
    if isinstance(began_on, str) and earlier_names(cache).get(os.path.basename(began_on)) \
            is False:
        raise ConfigError("resume", f"{spec.out} was begun on the token cache {began_on}, "
                          "whose windows were cut inside each 64M-token shard; this llmtk "
                          "cuts them across the whole stream, so resuming would train on "
                          "other windows: finish the run with the llmtk that began it, or "
                          "start over (--resume never, or another --out)")


@dataclass
class TrainingData:
    train: object                # Sampler or BlendSampler
    val: object | None           # the validation Sampler of the cache or of one bare DIR
    val_sets: dict = field(default_factory=dict)  # name -> Sampler (--val-data NAME=DIR)
    meta: dict = field(default_factory=dict)      # config.json's "data"
    train_windows: int = 0       # windows per epoch (one source) for the epoch warning


def open_training_data(spec: DataSpec, source: DataSource, seq_len: int, world: int,
                       rank: int) -> TrainingData:
    B = spec.batch_size
    if len(source.train) == 1 and source.train[0].name is None:
        windows = source.train[0].dataset.windows(seq_len)
        sampler: object = Sampler(windows, B, world, rank, spec.seed)
        n_windows = len(windows)
    else:
        sampler = BlendSampler([s.name for s in source.train],
                               [s.dataset.windows(seq_len) for s in source.train],
                               [s.weight for s in source.train], B, world, rank, spec.seed)
        n_windows = 0
    val, val_sets = None, {}
    for s in source.val:
        windows = s.dataset.windows(seq_len)
        if not len(windows):
            if source.cache:
                continue  # no documents held out, or too few for a window: no val_loss
            raise ConfigError("val_data", f"not enough tokens for one sequence of "
                              f"{seq_len + 1}", value=s.dataset.directory)
        one = Sampler(windows, B, world, rank, spec.seed, shuffle=False)
        if s.name is None:
            val = one
        else:
            val_sets[s.name] = one
    return TrainingData(sampler, val, val_sets, source.meta(), n_windows)


def epoch_warnings(data: TrainingData, end_position: int, max_epochs: float) -> list[str]:
    """A line per source that the run would read more than max_epochs times."""
    if hasattr(data.train, "epochs"):
        epochs = data.train.epochs(end_position)
    else:
        epochs = {"--data": end_position / max(1, data.train_windows)}
    return [f"warning: {name} is read {e:.3g} times by the end of the run, more than "
            f"--max-epochs {max_epochs:g} (lower its weight or the steps, or add data)"
            for name, e in epochs.items() if e > max_epochs]
