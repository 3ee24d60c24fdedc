"""The run plan: every fact derived from the configuration, worked out (and checked) once.

`RunPlan.resolve(cfg, world, mcfg, cuda)` decides the data-parallel method and the mesh
layout, splits the layers between pipeline stages, and fixes the checkpoint format, the
compile switch, the autocast dtype and the step's windows. The launcher resolves it to
refuse a layout before torchrun starts anything, `--dry-run` to plan each rank, the
trainer to build (train/layout/parallelize.py) and run the model; none of them derives these
facts again.

Torch-free, so the launcher and `llmtk estimate` can plan without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmtk.train.layout.mesh import (
    Layout,
    ParallelSpec,
    check_model,
    check_trainable,
    compiles_by_default,
    pipeline_split,
    plan_layout,
)


@dataclass(frozen=True)
class LoraSpec:
    """--lora-rank/-alpha/-targets/-dropout: add_lora's arguments."""

    rank: int
    alpha: float | None
    targets: str
    dropout: float

    @classmethod
    def of(cls, cfg) -> LoraSpec | None:
        """The config's LoRA section; None when LoRA is off."""
        if not cfg.lora_rank:
            return None
        return cls(cfg.lora_rank, cfg.lora_alpha, cfg.lora_targets, cfg.lora_dropout)


@dataclass(frozen=True)
class RunPlan:
    parallel: str                 # none | ddp | fsdp
    layout: Layout
    mcfg: object                  # the ModelConfig trained
    split: tuple[int, ...]        # blocks per pipeline stage, in stage order
    ckpt_format: str              # full | dcp
    compiled: bool
    bf16: bool                    # bf16 autocast (fp32 master weights)
    windows_per_step: int         # windows of all dp ranks and micro-steps in one step
    # what parallelize needs from the configuration
    seed: int
    lora: LoraSpec | None
    activation_checkpointing: bool
    pp_schedule: str
    batch_size: int               # windows per rank per micro-step (a pipeline microbatch)
    grad_accum: int               # micro-steps per step (the pipeline's microbatches)

    @classmethod
    def resolve(cls, cfg, world: int, mcfg, cuda: bool) -> RunPlan:
        """The plan of TrainConfig `cfg` on `world` processes training model `mcfg`
        (`cuda`: on GPUs), or the ConfigError of the first option that cannot run."""
        from llmtk.train.config import section

        parallel, layout = plan_layout(world, section(ParallelSpec, cfg))
        check_trainable(layout, cfg)
        check_model(layout, mcfg)
        split = pipeline_split(layout, mcfg.n_layer, cfg.pp_layers, cfg.pp_schedule)
        return cls(
            parallel=parallel, layout=layout, mcfg=mcfg, split=tuple(split),
            ckpt_format=cfg.checkpoint_format if cfg.checkpoint_format != "auto" else (
                "dcp" if parallel == "fsdp" else "full"),
            compiled=cfg.compile if cfg.compile is not None else
            compiles_by_default(layout, bool(cfg.lora_rank), cuda),
            bf16=cfg.dtype == "bf16" or (cfg.dtype == "auto" and cuda),
            windows_per_step=cfg.batch_size * layout.dp * cfg.grad_accum,
            seed=cfg.seed, lora=LoraSpec.of(cfg),
            activation_checkpointing=cfg.activation_checkpointing,
            pp_schedule=cfg.pp_schedule, batch_size=cfg.batch_size, grad_accum=cfg.grad_accum)

    @property
    def tokens_per_step(self) -> int:
        return self.windows_per_step * self.mcfg.seq_len

    @property
    def sharded(self) -> bool:
        """The model's parameters are DTensor shards (DCP checkpoints load per rank)."""
        return self.parallel == "fsdp"

    @property
    def copied(self) -> bool:
        """Sampling and task evaluation run a gathered whole copy (tensor or pipeline
        parallel: the forward is not the plain model's), not the model itself."""
        return self.parallel == "fsdp" and (self.layout.tp > 1 or self.layout.pp > 1)


def run_model(cfg):
    """(tokenizer, ModelConfig) of the run `cfg` (its --init-from hf: folder resolved, see
    hf.resolve_init): --sft inherits both from an --init-from run unless given."""
    if cfg.sft:
        from llmtk.train.finetune import sft_model

        return sft_model(cfg)
    from llmtk.text.tokenizer import load_tokenizer
    from llmtk.train.run_shape import model_config

    tok = load_tokenizer(cfg.tokenizer)
    return tok, model_config(cfg, tok.vocab_size)
