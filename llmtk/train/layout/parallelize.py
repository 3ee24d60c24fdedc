"""Apply a run plan (train/layout/plan.py) to the model: one function, one order, every layout.

    1. build on the meta device (no memory, no init: any size)      meta_model
    2. LoRA adapters (before sharding, so tp and FSDP2 split them too)
    3. tensor parallelism over the mesh's tp dimension               tensor_parallel.apply_tp
       and the experts over the ep ranks (--ep)                      expert_parallel.apply_ep
    4. the pipeline split: this rank's stages                        pipeline.split_stages
    5. compile (each block's forward, the loss)
    6. FSDP2 / HSDP over the dp sub-mesh (fully_shard: lazy, fine on the meta device)
    7. materialise this rank's parameters on its device (to_empty)
    8. the seeded init: the whole model's draws in one order (GPT.init_weights, then
       lora.init_lora), each rank keeping its shards, from the CPU generator, so every
       layout starts from one process's weights
    9. DDP (it broadcasts rank 0's real weights, so it wraps the initialised model) and
       the pipeline's schedule (its stages are the materialised parts)

Steps that a layout does not have are skipped; none is reordered. Then each rank's
generator moves to a stream of its own (`seed_rank_stream`) for what the steps draw.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Parallelized:
    """The model as the trainer runs it."""

    model: object          # what a micro-step calls: the plain GPT, its DDP wrapper or the
                           # FSDP2 root (under pp: the holder; the pipeline runs the steps)
    raw: object            # the module holding this rank's parameters, whole-model names
    pipe: object | None    # --pp > 1: this rank's stages and their schedule (pipeline.py)
    n_params: int          # the whole model's parameters
    trainable: list[str]   # the whole model's trainable parameter names, in order


def meta_model(mcfg, lora=None):
    """Steps 1-2: a GPT of shape `mcfg` on the meta device, with LoRA adapters when
    `lora` (a plan.LoraSpec) is given (the base frozen)."""
    import torch

    from llmtk.train.model.gpt import GPT

    with torch.device("meta"):
        model = GPT(mcfg)
    if lora is not None:
        from llmtk.train.model.lora import add_lora

        add_lora(model, lora.rank, lora.alpha, lora.targets, lora.dropout)
    return model


def parallelize(plan, dist) -> Parallelized:
    """Build `plan`'s model for this rank of `dist` (every rank calls it: collective
    under tp, pp and FSDP2)."""
    import torch

    model = meta_model(plan.mcfg, plan.lora)
    model.activation_checkpointing = plan.activation_checkpointing
    n_params = sum(p.numel() for p in model.parameters())
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    layout, fsdp = plan.layout, plan.parallel == "fsdp"
    world_mesh = None
    if fsdp:
        from llmtk.train.layout.mesh import build_mesh

        world_mesh = build_mesh(layout, dist.device)
    if layout.cp > 1:  # each rank trains on its share of every window (context_parallel.py)
        from llmtk.train.layout.context_parallel import ContextParallel

        model.cp = ContextParallel.of_mesh(world_mesh["cp"])
        from llmtk.train.model.moe import count_over  # MoE: balance-loss shares over cp

        count_over(model, world_mesh["cp"].get_group())
    if layout.tp > 1:  # 3: tensor parallel first, then FSDP2 over the dp sub-mesh
        from llmtk.train.layout.tensor_parallel import apply_tp

        apply_tp(model, world_mesh["tp"], experts=layout.ep == 1)
    experts = None
    if layout.ep > 1:  # 3b: experts over the ep ranks (and tp), their own FSDP2 group
        from llmtk.train.layout.expert_parallel import apply_ep, expert_meshes

        experts = expert_meshes(world_mesh, layout)
        apply_ep(model, experts)
    stages = None
    parts = [model]
    if layout.pp > 1:  # 4: each stage is sharded by FSDP2 as the whole model is
        from llmtk.train.layout import pipeline

        stages = pipeline.split_stages(model, plan.split, world_mesh["pp"].get_local_rank(),
                                       layout.pp)
        parts = stages.parts
    if fsdp:  # 5-6
        _compile_and_shard(parts, plan, world_mesh, whole=stages is None, experts=experts)
    for part in parts:  # 7
        part.to_empty(device=dist.device)
    torch.manual_seed(plan.seed)  # 8: a freshly seeded generator, not what was drawn before
    model.init_weights()  # the whole model's draws; a rank keeps only its own
    if plan.lora is not None:
        from llmtk.train.model.lora import init_lora

        init_lora(model)
    raw, run, pipe = model, model, None
    if stages is not None:  # 9
        pipe = pipeline.schedule(stages, plan, world_mesh["pp"], dist.device)
        raw = run = stages.holder
    if plan.parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        # No buffer broadcast: every buffer is the same on every rank by construction (the
        # rotary tables; a MoE layer's bias, updated from all-reduced loads), and a MoE
        # layer's load counter is each rank's own until the step sums it (train/model/moe.py).
        run = DDP(model, device_ids=[dist.local_rank] if dist.cuda else None,
                  broadcast_buffers=False)
    if plan.compiled and not fsdp:
        # Compiling the DDP wrapper (not the inner model) lets dynamo split the graph at
        # DDP's bucket boundaries, so gradient all-reduces overlap the backward.
        run.compile()
    seed_rank_stream(plan, dist.rank)
    return Parallelized(run, raw, pipe, n_params, trainable)


def _compile_and_shard(parts, plan, world_mesh, whole: bool, experts=None) -> None:
    """Steps 5-6 under FSDP2: compile each block's forward and shard it, then the root
    (the whole model, or each pipeline stage). bf16: gather parameters in bf16, reduce
    gradients in fp32 (torchtitan's policy); the sharded master weights and the optimizer
    stay fp32."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from llmtk.train.layout.mesh import dp_mesh

    mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
          if plan.bf16 else MixedPrecisionPolicy())
    mesh = dp_mesh(world_mesh, plan.layout)
    for part in parts:
        for block in part.layers.values():
            if plan.compiled:
                # FSDP's all-gather/reshard hooks run around the compiled forward (eagerly,
                # in Module.__call__), never inside a graph, so nothing breaks it.
                block.forward = torch.compile(block.forward)
            if experts is not None:  # the experts first: the block's group leaves them out
                from llmtk.train.layout.expert_parallel import shard_experts

                shard_experts(block, experts, mp)
            fully_shard(block, mesh=mesh, mp_policy=mp)
        if whole and plan.compiled and plan.layout.tp == 1:
            # Under tensor parallelism the loss runs eagerly: its vocab-parallel chunks
            # all-reduce inside an autograd.Function, which dynamo does not trace.
            part.head_loss = torch.compile(part.head_loss)
        fully_shard(part, mesh=mesh, mp_policy=mp)


def seed_rank_stream(plan, rank: int) -> None:
    """Give this rank its own stream of the torch generator for what the steps draw
    (--lora-dropout's masks). The init leaves the generator in the same state on every
    rank, so every data-parallel rank would mask its own windows with the same masks,
    and every pipeline stage its layers with the first stage's (measured: all of stage
    1's masks in a step equal stage 0's). A tp group shares one stream (its ranks slice
    one draw, lora.LoRALinear._dropout); the first stage's first data-parallel rank
    keeps the stream a one-process run has. The streams are in the per-rank RNG state
    a checkpoint saves, so a resume continues them."""
    import hashlib

    import torch

    coords = plan.layout.coords(rank)
    pp_rank, dp_rank = coords["pp"], plan.layout.dp_rank(rank)
    if pp_rank == 0 and dp_rank == 0:
        return
    key = f"{plan.seed}/pp/{pp_rank}" + (f"/dp/{dp_rank}" if dp_rank else "")
    torch.manual_seed(int.from_bytes(hashlib.blake2b(
        key.encode(), digest_size=8).digest(), "little") >> 1)
