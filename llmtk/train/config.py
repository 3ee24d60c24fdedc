"""The run configuration: defaults < TOML file (--config) < command-line flags.

TOML keys are the flag names without the leading dashes, with '-' or '_'
(`batch-size = 8` or `batch_size = 8`); an optional [train] table is read the
same way. Every command-line option has a key, the torchrun launch options too
(`nproc-per-node = 8`). Unknown keys are a usage error, so a typo never silently
trains the wrong thing.

Every value, from TOML and flags alike, is checked for its type and range before
any work starts; a bad one is a ConfigError naming the field, which the command words as
`FILE: key: message` (or `--flag: message`), exit 2. Values in a TOML file are checked as
it is read (the error names the file and the key as written there); `validate()` checks a
whole config once, the rules that relate several options included. Both configs are
frozen: they are built once, from defaults < file < flags.
The type comes from the field's annotation (an int is never a float, a bool or a
string: `steps = 2.7` and `steps = "5"` are refused, not rounded or parsed); the range
from RULES below. Floats must be finite (`1e400` and `nan` are refused).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field

from llmtk.compute.placement import DEFAULT_LORA_TARGETS
from llmtk.errors import ConfigError
from llmtk.io import tomlfile


@dataclass(frozen=True)
class TrainConfig:
    # data
    data: list[str] = field(default_factory=list)
    val_data: list[str] = field(default_factory=list)
    val_fraction: float = 0.0
    max_epochs: float = 4.0               # warn when a source is read more often than this
    text_field: str = "text"
    allow_html: bool = False              # train on documents that are web pages (markup)
    tokenizer: str = "bytes"
    cache_dir: str | None = None          # default OUT/cache
    out: str | None = None
    # model
    model: str = "tiny"
    layers: int | None = None
    d_model: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    ffn_hidden: int | None = None
    untied: bool = False
    # mixture of experts (llmtk.train.model.moe); None: the preset's (a dense model: experts 0)
    experts: int | None = None
    top_k: int | None = None
    shared_experts: int | None = None
    expert_ffn_hidden: int | None = None
    moe_every: int | None = None
    first_dense_layers: int | None = None
    router_score: str | None = None       # softmax | sigmoid
    router_bias_rate: float | None = None
    router_bias_rule: str | None = None   # sign | proportional
    router_aux_loss: float | None = None
    router_z_loss: float | None = None
    capacity_factor: float | None = None  # None: dropless
    # optimisation
    steps: int = 1000
    seq_len: int | None = None            # default: the preset's
    batch_size: int = 8                   # sequences per rank per micro-step
    grad_accum: int = 1
    lr: float = 3e-4
    min_lr: float | None = None           # default lr / 10
    warmup: int = 100
    schedule: str = "cosine"              # cosine | wsd | constant
    decay_fraction: float = 0.2           # wsd: the last fraction of steps decays to min_lr
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    seed: int = 0
    # runtime
    device: str = "auto"                  # auto | cpu | cuda
    dtype: str = "auto"                   # auto (bf16 on GPU, fp32 on CPU) | fp32 | bf16 | fp64
    parallel: str = "auto"                # auto (ddp when world > 1) | none | ddp | fsdp
    # the device mesh (llmtk.train.layout.mesh): pp x dp_replicate x dp_shard x cp x tp = world
    tp: int = 1                           # tensor-parallel degree (inside a node)
    pp: int = 1                           # pipeline stages
    dp_replicate: int = 1                 # HSDP: replicas, each sharded over dp_shard ranks
    dp_shard: int | None = None           # FSDP degree; None: the rest of the world
    cp: int = 1                           # context-parallel degree: 1/cp of every sequence
    ep: int = 1                           # expert-parallel degree (ranks of dp_shard x cp)
    pp_schedule: str = "1f1b"             # 1f1b | interleaved-1f1b
    pp_layers: str | None = None          # blocks per pipeline stage, "3,5"; None: even
    dry_run: bool = False                 # plan the layout per rank on the meta device, no run
    gpu: str = "H100"                     # --dry-run: the GPU whose memory each rank must fit
    compile: bool | None = None           # None: on for CUDA, off on CPU
    activation_checkpointing: bool = False
    doc_mask: bool = False                # attention kept inside each document of a window
    nccl_timeout: int = 3600              # seconds a collective may wait (checkpoint of a 7B)
    hang_timeout: int = 600               # seconds without progress on a rank (0: no watchdog)
    threads: int | None = None            # torch threads per process; None: runtime.pick_threads
    # logging, eval, sampling
    log_every: int = 10
    eval_every: int = 0                   # 0: only at the end when there is val data
    eval_batches: int = 10
    sample_every: int = 0
    prompt: str = "\n"
    sample_tokens: int = 64
    log_to: str = "none"                  # none | tensorboard | wandb | tensorboard,wandb
    grad_stats: str = "none"              # none | per-layer (llmtk/train/grad_stats.py)
    grad_stats_every: int = 0             # per-layer rows also every N steps (0: only on
                                          # non-finite and spike steps)
    # checkpoints and safety
    checkpoint_every: int = 0             # 0: only at the end and on SIGTERM/SIGUSR1
    keep_checkpoints: int = 3
    verify_every: int = 0                 # read back every N-th checkpoint's checksums (0: never)
    checkpoint_format: str = "auto"       # auto (dcp under FSDP, else full) | full | dcp
    async_checkpoint: bool = True         # dcp: write in the background while training goes on
    resume: str = "auto"                  # auto | never | PATH
    init_from: str | None = None
    on_nan: str = "skip"                  # skip | stop
    max_bad_steps: int = 5
    on_spike: str = "none"                # none | rollback
    spike_factor: float = 3.0
    quiet: bool = False
    # fine-tuning and task evaluation (llmtk.train.finetune, docs/train.md "SFT")
    sft: bool = False                     # instruction data: loss on assistant tokens only
    template: str = "auto"                # SFT data layout: auto | chat | prompt | alpaca
    chat_template: str = "auto"           # auto (the tokenizer's, else llmtk) | llmtk | FILE
    packing: bool = True                  # pack examples (document-masked) or pad each
    lora_rank: int | None = None          # LoRA adapters of this rank; the base is frozen
    lora_alpha: float | None = None       # default: the rank (scale 1)
    lora_targets: str = DEFAULT_LORA_TARGETS  # not `experts` (opt-in)
    lora_dropout: float = 0.0
    eval_tasks: list[str] = field(default_factory=list)
    eval_bad_cases: int = 5
    eval_max_new_tokens: int = 128

    def validate(self) -> None:
        """Raise ConfigError naming the first bad field: each value's type and range
        (`check_value`), then the rules that relate several fields."""
        _check_fields(self)
        # --dry-run plans the model and the layout only: no data, no run directory
        if not self.data and not self.dry_run:
            raise ConfigError("data", "is required (JSONL/zstd files, directories or globs)")
        if not self.out and not self.dry_run:
            raise ConfigError("out", "is required (the run directory)")
        if self.min_lr is not None and self.min_lr > self.lr:
            raise ConfigError("min_lr", f"{self.min_lr} must not exceed {{0}} ({self.lr})",
                              also=("lr",))
        from llmtk.train.loggers import parse_log_to

        parse_log_to(self.log_to)
        from llmtk.train.model.config import check_model_name
        from llmtk.train.model.hf import is_hf_spec

        if not is_hf_spec(self.init_from):  # hf:PATH brings its own shape
            check_model_name(self.model)  # here, not after the tokenization pass
        self._check_finetune()

    def _check_finetune(self) -> None:
        if self.lora_rank is not None:
            from llmtk.train.model.lora import parse_targets

            if self.lora_rank < 1:
                raise ConfigError("lora_rank", f"must be >= 1, got {self.lora_rank}")
            parse_targets(self.lora_targets)
            if not 0.0 <= self.lora_dropout < 1.0:
                raise ConfigError("lora_dropout", f"must be in [0, 1), got {self.lora_dropout}")
        if self.eval_bad_cases < 0:
            raise ConfigError("eval_bad_cases", f"must be >= 0, got {self.eval_bad_cases}")
        if self.eval_max_new_tokens < 1:
            raise ConfigError("eval_max_new_tokens",
                              f"must be >= 1, got {self.eval_max_new_tokens}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def section(cls, cfg):
    """The frozen dataclass `cls` (a component's section of the configuration: some of
    TrainConfig's fields, under the same names) filled from `cfg`, so that a component
    takes what it reads, not the whole configuration."""
    return cls(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cls)})


@dataclass(frozen=True)
class LaunchConfig:
    """torchrun's options: accepted in TOML under the same names as the flags."""

    nproc_per_node: int | None = None     # None: no torchrun (one process, or a worker)
    nnodes: int = 1
    node_rank: int | None = None          # None: c10d assigns it
    rdzv_endpoint: str | None = None
    rdzv_id: str = "llmtk"
    rdzv_backend: str = "c10d"
    max_restarts: int = 0
    rdzv_timeout: int | None = None       # seconds the nodes wait to join; None: torchrun's

    def validate(self, planning: bool = False) -> None:
        """Raise ConfigError naming the first bad field (planning: a --dry-run, which
        starts nothing and needs no rendezvous)."""
        _check_fields(self)
        if self.nnodes > 1 and not self.rdzv_endpoint and not planning:
            raise ConfigError("rdzv_endpoint", "HOST:PORT is required with {0} > 1",
                              also=("nnodes",))


def _at_least(low):
    return lambda v: None if v >= low else f"must be >= {low}, got {v}"


def _between(low, high, *, low_open=False, high_open=False):
    def rule(v):
        ok = (v > low if low_open else v >= low) and (v < high if high_open else v <= high)
        if ok:
            return None
        return f"must be in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}, " \
            f"got {v}"
    return rule


class _OneOf:
    """A rule admitting a fixed set of values; the command line offers them as choices."""

    def __init__(self, *choices: str):
        self.choices = choices

    def __call__(self, v):
        return None if v in self.choices else \
            f"must be one of {', '.join(self.choices)}, got {v!r}"


_one_of = _OneOf


RULES = {
    "steps": _at_least(1), "batch_size": _at_least(1), "grad_accum": _at_least(1),
    "eval_batches": _at_least(1), "sample_tokens": _at_least(1), "log_every": _at_least(1),
    "layers": _at_least(1), "d_model": _at_least(1), "heads": _at_least(1),
    "kv_heads": _at_least(1), "ffn_hidden": _at_least(1), "seq_len": _at_least(2),
    "warmup": _at_least(0), "eval_every": _at_least(0), "sample_every": _at_least(0),
    "checkpoint_every": _at_least(0), "keep_checkpoints": _at_least(0),
    "verify_every": _at_least(0),
    "max_bad_steps": _at_least(1), "seed": _between(0, 2**63 - 1),
    "val_fraction": _between(0.0, 1.0, high_open=True), "max_epochs": _at_least(0.0),
    "lr": _between(0.0, 1e6, low_open=True), "min_lr": _between(0.0, 1e6),
    "decay_fraction": _between(0.0, 1.0, low_open=True),
    "weight_decay": _between(0.0, 1e6), "beta1": _between(0.0, 1.0, high_open=True),
    "beta2": _between(0.0, 1.0, high_open=True), "grad_clip": _at_least(0.0),
    "spike_factor": _between(1.0, 1e6, low_open=True), "nccl_timeout": _at_least(1),
    "hang_timeout": _at_least(0),
    "threads": _at_least(1), "tp": _at_least(1), "pp": _at_least(1),
    "dp_replicate": _at_least(1), "dp_shard": _at_least(1), "cp": _at_least(1),
    "ep": _at_least(1),
    "pp_schedule": _one_of("1f1b", "interleaved-1f1b"),
    "schedule": _one_of("cosine", "wsd", "constant"), "device": _one_of("auto", "cpu", "cuda"),
    "dtype": _one_of("auto", "fp32", "bf16", "fp64"),
    "parallel": _one_of("auto", "none", "ddp", "fsdp"),
    "on_nan": _one_of("skip", "stop"), "on_spike": _one_of("none", "rollback"),
    "grad_stats": _one_of("none", "per-layer"), "grad_stats_every": _at_least(0),
    "checkpoint_format": _one_of("auto", "full", "dcp"),
    "template": _one_of("auto", "chat", "prompt", "alpaca"),
    "nproc_per_node": _at_least(1), "nnodes": _at_least(1), "node_rank": _at_least(0),
    "max_restarts": _at_least(0), "rdzv_backend": _one_of("c10d", "static"),
    "rdzv_timeout": _at_least(1),
    "experts": _at_least(0), "top_k": _at_least(1), "shared_experts": _at_least(0),
    "expert_ffn_hidden": _at_least(1), "moe_every": _at_least(1),
    "first_dense_layers": _at_least(0), "router_score": _one_of("softmax", "sigmoid"),
    "router_bias_rate": _between(0.0, 1e6),
    "router_bias_rule": _one_of("sign", "proportional"), "router_aux_loss": _between(0.0, 1e6),
    "router_z_loss": _between(0.0, 1e6), "capacity_factor": _between(0.0, 1e6, low_open=True),
    "text_field": lambda v: None if v else "must not be empty",
    "out": lambda v: None if v else "must not be empty",
}

TRAIN_FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}
LAUNCH_FIELDS = {f.name: f for f in dataclasses.fields(LaunchConfig)}
FIELDS = {**TRAIN_FIELDS, **LAUNCH_FIELDS}
assert set(RULES) <= set(FIELDS), set(RULES) - set(FIELDS)  # a rule names its field
TYPES = {**typing.get_type_hints(TrainConfig), **typing.get_type_hints(LaunchConfig)}


def _type_problem(name: str, value) -> str | None:
    """Why `value` is not of field `name`'s declared type (None: it is)."""
    hint = TYPES[name]
    optional = typing.get_origin(hint) in (typing.Union, types.UnionType)
    if value is None:
        return None if optional else "must be given a value"
    base = next(a for a in typing.get_args(hint) if a is not type(None)) if optional else hint
    if typing.get_origin(base) is list:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return f"must be a string or a list of strings, got {value!r}"
        return None
    if base is bool:
        return None if isinstance(value, bool) else f"must be true or false, got {value!r}"
    if base is int:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"must be an integer, got {value!r}"
        return None
    if base is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"must be a number, got {value!r}"
        if not math.isfinite(value):
            return f"must be a finite number, got {value!r}"
        return None
    if base is str:
        return None if isinstance(value, str) else f"must be a string, got {value!r}"
    return None


def check_value(name: str, value) -> object:
    """The value of field `name`, checked (ConfigError otherwise) and in its field's form:
    a string for a list field becomes a one-item list, an int for a float field a float."""
    if name in ("data", "val_data", "eval_tasks") and isinstance(value, str):
        value = [value]
    problem = _type_problem(name, value)
    if problem is None and value is not None and name in RULES:
        problem = RULES[name](value)
    if problem:
        raise ConfigError(name, problem)
    if TYPES[name] in (float, float | None) and isinstance(value, int):
        value = float(value)
    return value


def _check_fields(cfg) -> None:
    for f in dataclasses.fields(cfg):
        check_value(f.name, getattr(cfg, f.name))


def load_toml(path: str) -> dict:
    """{field name: checked value} from a TOML file; errors are `PATH: key: message`, the
    key as the file spells it."""
    raw = tomlfile.load(path)
    if isinstance(raw.get("train"), dict):
        raw = {**{k: v for k, v in raw.items() if k != "train"}, **raw["train"]}
    out = {}
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name not in FIELDS:
            raise ConfigError(key, "unknown key (the keys are the flag names, e.g. batch-size)",
                              source=path)
        try:
            out[name] = check_value(name, value)
        except ConfigError as e:
            raise ConfigError(key, e.message, source=path) from None
    return out


def _merged(flags: dict, config_path: str | None, fields: dict) -> dict:
    values = {k: v for k, v in (load_toml(config_path) if config_path else {}).items()
              if k in fields}
    values.update({name: check_value(name, value) for name, value in given(flags).items()
                   if name in fields})
    return values


def given(flags: dict) -> dict:
    """The flags that were given (not None; an empty list is a list option not given)."""
    return {name: value for name, value in flags.items() if value is not None and not (
        name in ("data", "val_data", "eval_tasks") and not value)}


def resolve_config(flags: dict, config_path: str | None) -> TrainConfig:
    """Defaults, then the TOML file, then every flag that was given (not None), validated."""
    cfg = TrainConfig(**_merged(flags, config_path, TRAIN_FIELDS))
    cfg.validate()
    return cfg


def resolve_launch(flags: dict, config_path: str | None, planning: bool = False) -> LaunchConfig:
    cfg = LaunchConfig(**_merged(flags, config_path, LAUNCH_FIELDS))
    cfg.validate(planning)
    return cfg
