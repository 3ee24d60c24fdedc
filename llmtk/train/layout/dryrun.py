"""`llmtk train --dry-run`: what each kind of rank of a layout would hold, without a GPU.

The model is built on the meta device (no memory, no init cost, any size), and every
parameter is assigned as a real run places it: the layers of a pipeline rank's stages
(RunPlan.split: --pp-layers, or even with the first stages taking one more),
the embedding on the first stage and the final norm and head on the last (under pp > 1
a tied head is a copy of the embedding on the last stage, its gradient summed with the
first stage's before each step, as Megatron-LM does), split over tp as the placement
table says (llmtk/compute/placement.py: matrices and adapters' halves split, norm weights
whole, the table apply_tp applies), and everything sharded over dp_shard by FSDP2. The
byte counts are the trainer's own: fp32 master weights, fp32 gradients and AdamW's two
fp32 moments per trainable parameter (16 bytes; LoRA's frozen base: 4), bf16 or fp32
activations. Under --ep each MoE layer's experts are split over the ep ranks and sharded
over the rest of dp_shard x cp, as expert_parallel.py places them.

Every pipeline rank is planned (one tp shard each; tp shards of a stage hold the same
amounts); llmtk.estimate.ranks prices them and shows the first, the busiest middle one
and the last.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmtk.compute.placement import tp_elements
from llmtk.train.layout.plan import RunPlan


@dataclass(frozen=True)
class RankPlan:
    kind: str                # "all layers", "first stage", "middle stage", "last stage"
    rank: int                # one global rank of this kind (tp shard 0, dp rank 0)
    pp_rank: int             # its coordinate on the pipeline dimension
    stages: int              # pipeline stages it runs (interleaved-1f1b: several)
    layers: int              # transformer blocks on this rank
    params: float            # parameter elements this rank holds (after tp and FSDP)
    trainable: float         # of which trained (LoRA: only the adapters)
    block_params: float      # one block's parameters on this rank before FSDP (its gather)
    weights: float           # bytes
    gradients: float
    optimizer: float
    embedding: bool          # holds the token embedding
    head: bool               # holds the final norm and the output head


def plan_ranks(plan: RunPlan) -> list[RankPlan]:
    """One RankPlan per kind of rank of the run `plan` (train/layout/plan.py)."""
    from llmtk.train.layout.parallelize import meta_model

    mcfg, layout = plan.mcfg, plan.layout
    model = meta_model(mcfg, plan.lora)  # parallelize's first steps
    tp, pp = layout.tp, layout.pp
    shard = layout.dp_shard * layout.cp  # FSDP2 shards over dp_shard x cp (mesh.dp_mesh)
    # Under --ep a MoE layer's experts are split over ep ranks, each rank's E/ep then
    # sharded by FSDP2 over the rest of dp_shard x cp (train/layout/expert_parallel.py):
    # a rank holds 1/(dp_shard x cp) of them, as of every other parameter, but gathers
    # only E/ep experts before the block runs.
    ep, expert_shard = layout.ep, layout.dp_shard * layout.cp
    # each block's (all, trainable, gathered) per tp shard, the experts per rank already
    # divided by their own sharding over `shard`: blocks differ when some are MoE layers
    blocks = []
    for block in model.layers.values():
        n = t = gathered = 0.0
        for name, p in block.named_parameters():
            size = tp_elements(name, p.numel(), tp)
            expert = ".experts." in f".{name}" and ep > 1
            held = size * shard / expert_shard if expert else size
            n += held
            t += held if p.requires_grad else 0.0
            gathered += size / ep if expert else size
        blocks.append((n, t, gathered))
    block_all = max(g for _, _, g in blocks)  # the largest gather FSDP2 makes

    def outer(module, prefix: str) -> tuple[float, float]:
        n = t = 0.0
        for name, p in module.named_parameters(prefix=prefix):
            n += tp_elements(name, p.numel(), tp)
            t += tp_elements(name, p.numel(), tp) if p.requires_grad else 0.0
        return n, t

    emb = outer(model.tok_emb, "tok_emb")
    norm = outer(model.norm, "norm")
    head = outer(model.lm_head, "lm_head")
    tied = mcfg.tie_embeddings
    # blocks per pp rank: its stages' (interleaved-1f1b: stage s is on rank s % pp)
    split = plan.split
    layers = [sum(split[s::pp]) for s in range(pp)]
    starts = [sum(split[:s]) for s in range(len(split))]
    ids = [[i for s in range(r, len(split), pp) for i in range(starts[s], starts[s] + split[s])]
           for r in range(pp)]
    # Every pipeline rank: a middle one may hold more than the first (--pp-layers), and
    # which middle rank is busiest depends on the activations in flight, which
    # llmtk.estimate.ranks prices; it shows the busiest of them.
    kinds = [(0, "all layers")] if pp == 1 else \
        [(r, "first stage" if r == 0 else "last stage" if r == pp - 1 else "middle stage")
         for r in range(pp)]
    plans = []
    for stage, kind in kinds:
        first, last = stage == 0, stage == pp - 1
        n = sum(blocks[i][0] for i in ids[stage])  # /shard below: experts' own share
        t = sum(blocks[i][1] for i in ids[stage])
        if first:
            n, t = n + emb[0], t + emb[1]
        if last:
            n, t = n + norm[0], t + norm[1]
            if not (tied and first):  # one stage: the head is the embedding's matrix
                n, t = n + head[0], t + head[1]
        n, t = n / shard, t / shard
        plans.append(RankPlan(
            kind=kind, rank=stage * layout.world // pp, pp_rank=stage,
            stages=len(split) // pp, layers=layers[stage], params=n,
            trainable=t, block_params=block_all, weights=4.0 * n, gradients=4.0 * t,
            optimizer=8.0 * t, embedding=first, head=last))
    return plans


@dataclass(frozen=True)
class DryRun:
    plan: RunPlan            # the run plan the launch resolves too (layout, split, model)
    vocab_from: str          # where its vocabulary size came from
    plans: list[RankPlan]


def dry_run(cfg, world: int) -> DryRun:
    """Plan `cfg` on `world` processes: the model shape, the layout (checked: a layout
    that cannot run is the same one-line error as at launch) and each kind of rank."""
    from llmtk.train.config import section
    from llmtk.train.model.config import PRESETS
    from llmtk.train.run_shape import ModelSpec, model_config

    if cfg.tokenizer != "bytes" or cfg.model not in PRESETS:
        from llmtk.text.tokenizer import load_tokenizer

        vocab, vocab_from = load_tokenizer(cfg.tokenizer).vocab_size, f"--tokenizer {cfg.tokenizer}"
    else:  # a planned run names no tokenizer yet: the preset's own vocabulary
        vocab, vocab_from = PRESETS[cfg.model].vocab_size, f"the {cfg.model} preset's"
    # what the launch refuses, the plan refuses (planned for GPUs)
    plan = RunPlan.resolve(cfg, world, model_config(section(ModelSpec, cfg), vocab), cuda=True)
    return DryRun(plan, vocab_from, plan_ranks(plan))
