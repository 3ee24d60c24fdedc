"""The run plan: every fact derived from the configuration, worked out (and checked) once.

`RunPlan.resolve(cfg, world, mcfg, cuda)` cuts the configuration into its parallel
section (mesh.ParallelSpec) and the rest the plan reads (PlanSpec), decides the
data-parallel method and the mesh layout, splits the layers between pipeline stages, and
fixes the checkpoint format, the compile switch, the autocast dtype and the step's
windows. The launcher resolves it to refuse a layout before torchrun starts anything,
`--dry-run` to plan each rank, the trainer to build (train/layout/parallelize.py) and run
the model; none of them derives these facts again.

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
class PlanSpec:
    """What the run plan reads of the configuration beside its parallel section (ParallelSpec):
    the pipeline's split and schedule, the checkpoint format, compile, dtype, the step's
    batch, the seed, recomputation, LoRA, --sft and --doc-mask (config.section(PlanSpec,
    cfg))."""

    pp_layers: str | None
    pp_schedule: str
    checkpoint_format: str
    compile: bool | None
    dtype: str
    batch_size: int
    grad_accum: int
    seed: int
    activation_checkpointing: bool
    lora_rank: int | None
    lora_alpha: float | None
    lora_targets: str
    lora_dropout: float
    sft: bool = False
    doc_mask: bool = False


@dataclass(frozen=True)
class LoraSpec:
    """--lora-rank/-alpha/-targets/-dropout: add_lora's arguments."""

    rank: int
    alpha: float | None
    targets: str
    dropout: float

    @classmethod
    def of(cls, spec: PlanSpec) -> LoraSpec | None:
        """The plan section's LoRA settings; None when LoRA is off."""
        if not spec.lora_rank:
            return None
        return cls(spec.lora_rank, spec.lora_alpha, spec.lora_targets, spec.lora_dropout)


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
        spec = section(PlanSpec, cfg)
        check_trainable(layout, spec)
        check_model(layout, mcfg)
        split = pipeline_split(layout, mcfg.n_layer, spec.pp_layers, spec.pp_schedule)
        return cls(
            parallel=parallel, layout=layout, mcfg=mcfg, split=tuple(split),
            ckpt_format=spec.checkpoint_format if spec.checkpoint_format != "auto" else (
                "dcp" if parallel == "fsdp" else "full"),
            compiled=spec.compile if spec.compile is not None else
            compiles_by_default(layout, bool(spec.lora_rank), cuda),
            bf16=spec.dtype == "bf16" or (spec.dtype == "auto" and cuda),
            windows_per_step=spec.batch_size * layout.dp * spec.grad_accum,
            seed=spec.seed, lora=LoraSpec.of(spec),
            activation_checkpointing=spec.activation_checkpointing,
            pp_schedule=spec.pp_schedule, batch_size=spec.batch_size,
            grad_accum=spec.grad_accum)

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


def run_model(model, sft: bool, tok=None):
    """(tokenizer, ModelConfig) of the run whose model section (run_shape.ModelSpec) is
    `model` (its --init-from hf: folder resolved, see hf.resolve_init): --sft inherits both
    from an --init-from run unless given; else `tok` (loaded from --tokenizer if None)."""
    if sft:
        from llmtk.train.finetune import sft_model

        return sft_model(model)
    from llmtk.train.run_shape import model_config

    if tok is None:
        from llmtk.text.tokenizer import load_tokenizer

        tok = load_tokenizer(model.tokenizer)
    return tok, model_config(model, tok.vocab_size)
