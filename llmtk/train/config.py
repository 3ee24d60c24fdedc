"""The run configuration: defaults < TOML file (--config) < command-line flags.

TOML keys are the flag names without the leading dashes, with '-' or '_'
(`batch-size = 8` or `batch_size = 8`); an optional [train] table is read the
same way. Unknown keys are a usage error, so a typo never silently trains the
wrong thing.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field

from llmtk.errors import UsageError


@dataclass
class TrainConfig:
    # data
    data: list[str] = field(default_factory=list)
    val_data: list[str] = field(default_factory=list)
    val_fraction: float = 0.0
    text_field: str = "text"
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
    dtype: str = "auto"                   # auto (bf16 on GPU, fp32 on CPU) | fp32 | bf16
    parallel: str = "auto"                # auto (ddp when world > 1) | none | ddp | fsdp
    compile: bool = False
    activation_checkpointing: bool = False
    # logging, eval, sampling
    log_every: int = 10
    eval_every: int = 0                   # 0: only at the end when there is val data
    eval_batches: int = 10
    sample_every: int = 0
    prompt: str = "\n"
    sample_tokens: int = 64
    # checkpoints and safety
    checkpoint_every: int = 0             # 0: only at the end and on SIGTERM/SIGUSR1
    keep_checkpoints: int = 3
    resume: str = "auto"                  # auto | never | PATH
    init_from: str | None = None
    on_nan: str = "skip"                  # skip | stop
    max_bad_steps: int = 5
    on_spike: str = "none"                # none | rollback
    spike_factor: float = 3.0
    quiet: bool = False
    # fine-tuning and task evaluation (issue 16; llmtk.train.finetune, docs/train.md "SFT")
    sft: bool = False                     # instruction data: loss on assistant tokens only
    template: str = "auto"                # SFT data layout: auto | chat | prompt | alpaca
    chat_template: str = "auto"           # auto (the tokenizer's, else llmtk) | llmtk | FILE
    packing: bool = True                  # pack examples (document-masked) or pad each
    lora_rank: int | None = None          # LoRA adapters of this rank; the base is frozen
    lora_alpha: float | None = None       # default: the rank (scale 1)
    lora_targets: str = "q,k,v,o,gate,up,down"
    lora_dropout: float = 0.0
    eval_tasks: list[str] = field(default_factory=list)
    eval_bad_cases: int = 5
    eval_max_new_tokens: int = 128

    def check(self) -> None:
        """Raise UsageError naming the first bad option."""
        if not self.data:
            raise UsageError("--data is required (JSONL/zstd files, directories or globs)")
        if not self.out:
            raise UsageError("--out is required (the run directory)")
        for name in ("steps", "batch_size", "grad_accum", "eval_batches", "sample_tokens"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be >= 1")
        for name in ("warmup", "log_every", "eval_every", "sample_every", "checkpoint_every",
                     "keep_checkpoints", "max_bad_steps"):
            if getattr(self, name) < 0:
                raise UsageError(f"--{name.replace('_', '-')} must be >= 0")
        if self.log_every == 0:
            raise UsageError("--log-every must be >= 1")
        if not 0.0 <= self.val_fraction < 1.0:
            raise UsageError("--val-fraction must be in [0, 1)")
        if self.lr <= 0:
            raise UsageError("--lr must be > 0")
        choices = {"schedule": ("cosine", "wsd", "constant"), "device": ("auto", "cpu", "cuda"),
                   "dtype": ("auto", "fp32", "bf16"), "parallel": ("auto", "none", "ddp", "fsdp"),
                   "on_nan": ("skip", "stop"), "on_spike": ("none", "rollback")}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise UsageError(f"--{name.replace('_', '-')} must be one of "
                                 f"{', '.join(allowed)}, got {getattr(self, name)!r}")
        if not 0.0 < self.decay_fraction <= 1.0:
            raise UsageError("--decay-fraction must be in (0, 1]")
        self._check_finetune()

    def _check_finetune(self) -> None:
        if self.template not in ("auto", "chat", "prompt", "alpaca"):
            raise UsageError(f"--template must be one of auto, chat, prompt, alpaca, got "
                             f"{self.template!r}")
        if self.lora_rank is not None:
            from llmtk.train.lora import parse_targets

            if self.lora_rank < 1:
                raise UsageError("--lora-rank must be >= 1")
            parse_targets(self.lora_targets)
            if not 0.0 <= self.lora_dropout < 1.0:
                raise UsageError("--lora-dropout must be in [0, 1)")
        if self.eval_bad_cases < 0 or self.eval_max_new_tokens < 1:
            raise UsageError("--eval-bad-cases must be >= 0 and --eval-max-new-tokens >= 1")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}


def load_toml(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except OSError as e:
        raise UsageError(f"--config {path}: cannot read: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"--config {path}: invalid TOML: {e}") from None
    if isinstance(raw.get("train"), dict):
        raw = {**{k: v for k, v in raw.items() if k != "train"}, **raw["train"]}
    out = {}
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name not in FIELDS:
            raise UsageError(f"--config {path}: unknown key {key!r}")
        if name in ("data", "val_data", "eval_tasks") and isinstance(value, str):
            value = [value]
        out[name] = value
    return out


def resolve_config(flags: dict, config_path: str | None) -> TrainConfig:
    """Defaults, then the TOML file, then every flag that was given (not None)."""
    values = load_toml(config_path) if config_path else {}
    for name, value in flags.items():
        if value is None or (name in ("data", "val_data", "eval_tasks") and not value):
            continue
        values[name] = value
    try:
        cfg = TrainConfig(**values)
    except TypeError as e:
        raise UsageError(f"bad configuration: {e}") from None
    cfg.check()
    return cfg
