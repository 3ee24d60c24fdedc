"""The parallel layout: one device mesh of five dimensions, in torchtitan's order.

    pp            pipeline stages (outermost: stages talk least, so they may span nodes)
    dp_replicate  data-parallel groups holding whole copies (HSDP's replicas)
    dp_shard      data-parallel ranks sharding one copy (FSDP2)
    cp            context-parallel ranks, each holding 1/cp of every sequence
    tp            tensor-parallel ranks splitting every matrix (innermost: inside a node)

A rank's coordinates follow from its global rank with tp varying fastest, so the ranks
of one tp group are consecutive (one node) and a pipeline stage is a contiguous block.
The product of the five is the world size; the FSDP degree (dp_shard) is inferred as the
rest of the world unless given. The ranks of one cp group read the same sequences, so
the number of different batches a step sees is dp_replicate x dp_shard.

Expert parallelism is not a dimension of its own: as in torchtitan, the ep ranks that
split a mixture-of-experts layer's experts are borrowed from dp_shard x cp, so ep must
divide their product.

This module is torch-free except for `build_mesh`, so `llmtk estimate` and the launcher can
plan and check a layout without importing torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llmtk.compute.placement import stage_layers
from llmtk.errors import ConfigError

DIMS = ("pp", "dp_replicate", "dp_shard", "cp", "tp")


@dataclass(frozen=True)
class Layout:
    pp: int = 1
    dp_replicate: int = 1
    dp_shard: int = 1
    cp: int = 1
    tp: int = 1
    ep: int = 1  # experts split over ep ranks of dp_shard x cp (not a mesh dimension)

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(getattr(self, d) for d in DIMS)

    @property
    def world(self) -> int:
        return math.prod(self.sizes)

    @property
    def dp(self) -> int:
        """Data-parallel degree: how many different batches one step sees."""
        return self.dp_replicate * self.dp_shard

    def coords(self, rank: int) -> dict[str, int]:
        """This rank's coordinate on each dimension (tp fastest)."""
        out = {}
        for d in reversed(DIMS):
            size = getattr(self, d)
            out[d] = rank % size
            rank //= size
        return {d: out[d] for d in DIMS}

    def dp_rank(self, rank: int) -> int:
        """Which of the dp batches this rank reads (the same for a whole tp group)."""
        c = self.coords(rank)
        return c["dp_replicate"] * self.dp_shard + c["dp_shard"]

    def to_dict(self) -> dict[str, int]:
        return {d: getattr(self, d) for d in (*DIMS, "ep")}

    def __str__(self) -> str:
        return " x ".join(f"{d} {getattr(self, d)}" for d in DIMS if getattr(self, d) > 1) \
            + (f" (ep {self.ep})" if self.ep > 1 else "") or "one process"


@dataclass(frozen=True)
class ParallelSpec:
    """The configuration's parallel section: --parallel and the mesh's degrees."""

    parallel: str = "auto"
    tp: int = 1
    pp: int = 1
    dp_replicate: int = 1
    dp_shard: int | None = None
    cp: int = 1
    ep: int = 1


def plan_layout(world: int, spec: ParallelSpec = ParallelSpec()) -> tuple[str, Layout]:
    """(the data-parallel method, the layout) for `world` processes, or a ConfigError naming
    the flag that does not fit. Method: none (one process), ddp (every rank a whole copy)
    or fsdp (FSDP2, HSDP when dp_replicate > 1)."""
    tp, pp, cp, ep, dp_replicate = spec.tp, spec.pp, spec.cp, spec.ep, spec.dp_replicate
    dp_shard = spec.dp_shard
    asked = (("tp", tp), ("pp", pp), ("cp", cp), ("ep", ep), ("dp_replicate", dp_replicate),
             ("dp_shard", dp_shard or 1))
    mesh_asked = any(v > 1 for _, v in asked)
    if spec.parallel == "ddp" and mesh_asked:
        what = next(k for k, v in asked if v > 1)
        raise ConfigError(what, "needs --parallel fsdp (or auto): DDP keeps a whole copy on "
                          "every rank, without a device mesh")
    if spec.parallel == "none" and world > 1:
        raise ConfigError("parallel", f"none runs one process, but there are {world}")
    fixed = tp * pp * dp_replicate * cp
    product = f"--tp {tp} x --pp {pp} x --dp-replicate {dp_replicate}" + \
        (f" x --cp {cp}" if cp > 1 else "")
    if dp_shard is None:
        if world % fixed:
            key = next((k for k, v in asked[:3] if v > 1), "dp_replicate")
            raise ConfigError(key, f"{product} = {fixed} does not divide the {world} "
                              "processes (--nnodes x --nproc-per-node)")
        dp_shard = world // fixed
    elif fixed * dp_shard != world:
        raise ConfigError("dp_shard", f"{product} x {{0}} {dp_shard} = {fixed * dp_shard} "
                          f"processes, but there are {world} (--nnodes x --nproc-per-node)",
                          also=("dp_shard",))
    if (dp_shard * cp) % ep:
        raise ConfigError("ep", f"{ep} does not divide --dp-shard {dp_shard} x --cp {cp} = "
                          f"{dp_shard * cp}: the expert-parallel ranks are borrowed from them")
    layout = Layout(pp=pp, dp_replicate=dp_replicate, dp_shard=dp_shard, cp=cp, tp=tp, ep=ep)
    if world == 1:
        return "none", layout
    if spec.parallel == "ddp" or (spec.parallel == "auto" and not mesh_asked):
        return "ddp", Layout(dp_replicate=world)
    return "fsdp", layout


def check_trainable(layout: Layout, spec) -> None:
    """What `llmtk train` runs: data parallelism (DDP, FSDP2, HSDP), tensor and pipeline
    parallelism under it, with LoRA, sampling and task evaluation; what was not tested
    under a layout is refused naming its flag (`spec`: the run plan's plan.PlanSpec)."""
    if layout.pp > 1:
        if spec.checkpoint_format == "full":  # rank 0 holds only the first stage
            raise ConfigError("checkpoint_format", f"full is not possible with --pp "
                              f"{layout.pp}: no rank holds the whole model; use dcp (the "
                              "default), and `llmtk train export` for one file")
        check_microbatches(layout.pp, spec.grad_accum, spec.pp_schedule)
    if layout.tp > 1 and spec.lora_rank and spec.compile:
        raise ConfigError("compile", f"is not supported with --tp {layout.tp} and "
                          "--lora-rank: compiled, the adapters' DTensor gradients came out "
                          "wrong (torch 2.13); leave --compile off (the default there)")
    if spec.doc_mask and spec.sft:
        raise ConfigError("doc_mask", "is for pre-training windows: --sft's packing keeps "
                          "attention inside each example already")
    if layout.cp > 1:
        check_context_parallel(layout, spec)


def check_context_parallel(layout: Layout, spec) -> None:
    """--cp N runs pre-training and --sft under FSDP2/HSDP and tp
    (train/layout/context_parallel.py); what was not built or tested with it is refused
    naming its flag."""
    cp = layout.cp
    for flag, on, why in (
            ("pp", layout.pp > 1, "a pipeline stage's schedule does not split the sequence"),
            ("lora_dropout", spec.lora_rank and spec.lora_dropout, "the ranks of a cp "
             "group share one random stream, so their tokens would get the same masks"),
            ("compile", spec.lora_rank and spec.compile, "with --lora-rank: not tested")):
        if on:
            raise ConfigError(flag, f"is not supported with --cp {cp} ({why})")


def compiles_by_default(layout: Layout, lora: bool, cuda: bool) -> bool:
    """--compile's default: on GPU, except for LoRA under tensor parallelism (above), under
    context parallelism (compiled runs tested on CPU only, never on a GPU yet) and under
    expert parallelism (never run compiled on a GPU yet: the dispatch reads its split
    sizes on the host, a graph break in every MoE layer); --compile still asks."""
    return cuda and not (layout.tp > 1 and lora) and layout.cp == 1 and layout.ep == 1


def check_model(layout: Layout, mcfg) -> None:
    """The model splits evenly: tp divides the heads, kv heads, FFN width, the padded
    vocabulary and the sequence length; pp leaves each stage at least one layer (the
    --pp-layers and --pp-schedule split: pipeline_split)."""
    tp = layout.tp
    for what, n in (("attention heads", mcfg.n_head), ("key/value heads", mcfg.kv_heads),
                    ("FFN width", mcfg.hidden), ("padded vocabulary", mcfg.padded_vocab),
                    ("sequence length", mcfg.seq_len)):  # sequence-parallel norms
        if n % tp:
            raise ConfigError("tp", f"{tp} does not divide the model's {n} {what}")
    cp = layout.cp
    if cp > 1 and mcfg.seq_len % (2 * cp * tp):
        raise ConfigError("cp", f"{cp}: the sequence length {mcfg.seq_len} must be a multiple "
                          f"of 2 x cp x tp = {2 * cp * tp} (each rank holds 2 chunks of every "
                          "sequence, split again over tp by the norms)")
    experts = getattr(mcfg, "n_experts", 0)
    if experts and cp > 1 and layout.pp > 1:
        # Refused for every model today (check_context_parallel); kept for MoE models
        # should that change, as no MoE run under both was tested.
        raise ConfigError("cp", f"{cp} with --pp {layout.pp} is not supported with a "
                          "mixture-of-experts model yet (each alone is)")
    if experts and cp > 1 and getattr(mcfg, "capacity_factor", None) is not None:
        # Each rank would cap its own part of a micro-batch: other tokens dropped than in
        # one process, which caps the whole micro-batch.
        raise ConfigError("cp", f"{cp} is not supported with --capacity-factor (a "
                          "mixture-of-experts model under cp is dropless)")
    if experts and layout.tp > 1 and mcfg.expert_ffn % layout.tp:
        raise ConfigError("tp", f"{layout.tp} does not divide the experts' hidden width "
                          f"{mcfg.expert_ffn}")
    if layout.ep > 1 and not experts:
        raise ConfigError("ep", f"{layout.ep} needs a mixture-of-experts model (--experts)")
    if layout.ep > 1 and experts % layout.ep:
        raise ConfigError("ep", f"{layout.ep} does not divide the model's {experts} experts")
    if getattr(mcfg, "qk_norm", False) and layout.tp > 1:
        raise ConfigError("tp", f"{layout.tp} is not supported with q/k norms (Qwen3) yet")
    if layout.pp > mcfg.n_layer:
        raise ConfigError("pp", f"{layout.pp} stages for {mcfg.n_layer} layers: each stage "
                          "needs at least one")


def pipeline_split(layout: Layout, n_layer: int, spec: str | None = None,
                   schedule: str = "1f1b") -> list[int]:
    """Blocks per pipeline stage, in stage order. 1f1b: one stage per pp rank;
    interleaved-1f1b: several (virtual) stages per rank, stage s on rank s % pp (2 per
    rank unless --pp-layers gives another multiple of pp). --pp-layers "3,5" sets the
    blocks of each stage; the embedding is on the first stage, the final norm and the
    head on the last. Resolved once, by plan.RunPlan.resolve."""
    pp, interleaved = layout.pp, schedule == "interleaved-1f1b"
    if pp == 1:
        if spec:
            raise ConfigError("pp_layers", "needs --pp > 1 (it splits the layers between "
                              "pipeline stages)")
        if interleaved:  # else asked for and silently not run
            raise ConfigError("pp_schedule", "interleaved-1f1b needs --pp > 1 (it schedules "
                              "pipeline stages)")
        return [n_layer]
    if not spec:
        stages = 2 * pp if interleaved else pp
        if n_layer < stages:
            raise ConfigError("pp", f"{stages} stages ({'2 per rank, ' if interleaved else ''}"
                              f"--pp {pp}) for {n_layer} layers: each stage needs at least one")
        return stage_layers(n_layer, stages)
    try:
        split = [int(v) for v in spec.split(",")]
    except ValueError:
        raise ConfigError("pp_layers", f"must be comma-separated layer counts such as "
                          f"\"3,5\", got {spec!r}") from None
    if interleaved and (len(split) % pp or len(split) < 2 * pp):
        raise ConfigError("pp_layers", f"gives {len(split)} stages; interleaved-1f1b needs a "
                          f"multiple of --pp {pp}, at least {2 * pp} (several stages per rank)")
    if not interleaved and len(split) != pp:
        raise ConfigError("pp_layers", f"gives {len(split)} stages, but --pp is {pp} "
                          "(1f1b: one stage per rank)")
    if min(split) < 1:
        raise ConfigError("pp_layers", f"stage {split.index(min(split))} has {min(split)} "
                          "layers: each stage needs at least one")
    if sum(split) != n_layer:
        raise ConfigError("pp_layers", f"adds up to {sum(split)} layers, but the model has "
                          f"{n_layer}")
    return split


def check_microbatches(pp: int, n: int, schedule: str) -> None:
    """The pipeline's microbatches are the step's `n` (--grad-accum) micro-steps: refuse a
    count the schedule cannot run."""
    if schedule == "1f1b" and n < pp:
        raise ConfigError("grad_accum", f"{n} microbatches for --pp {pp}: 1f1b needs at "
                          f"least one per stage (--grad-accum >= {pp}; the bubble is "
                          f"(pp-1)/(grad-accum+pp-1), so several times pp keeps it small)")
    rounds = max(1, n // pp)
    if schedule == "interleaved-1f1b" and n % rounds:
        raise ConfigError("grad_accum", f"{n} microbatches for --pp {pp}: interleaved-1f1b "
                          f"runs them in {rounds} equal rounds (grad-accum // pp), which "
                          f"{n} does not divide; use a multiple of {pp}")


def build_mesh(layout: Layout, device: str):
    """The world's DeviceMesh with named dimensions DIMS (every process calls it)."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device.split(":")[0], layout.sizes, mesh_dim_names=DIMS)


def dp_mesh(mesh, layout: Layout):
    """The sub-mesh FSDP2 shards over: dp_shard, or (dp_replicate, dp_shard) for HSDP.
    Under --cp the cp ranks shard the model too, and their gradients (each from its own
    part of the same sequences) are averaged with the dp ranks': dp_shard x cp flattened
    into one dimension, "dp_shard_cp" (torchtitan's)."""
    if layout.cp == 1:
        return mesh["dp_replicate", "dp_shard"] if layout.dp_replicate > 1 else mesh["dp_shard"]
    flat = mesh["dp_shard", "cp"]._flatten("dp_shard_cp")
    # (torch warns that slicing a flattened dimension from the root will be deprecated;
    # HSDP has no other way to pair it with dp_replicate yet)
    return mesh["dp_replicate", "dp_shard_cp"] if layout.dp_replicate > 1 else flat


def shards(param) -> int:
    """Into how many distinct pieces `param` (a DTensor) is split; 1 for a plain tensor."""
    placements = getattr(param, "placements", None)
    if placements is None:
        return 1
    # Not Replicate = sharded: FSDP2 over a tensor-parallel Shard(0) places a
    # _StridedShard on the dp dimension, for which is_shard() is False.
    return math.prod(param.device_mesh.size(i) for i, p in enumerate(placements)
                     if not p.is_replicate())


def replicas(param, world: int) -> int:
    """How many ranks hold each element of `param`'s (gradient's) local values: the world
    over the number of distinct shards. A plain tensor (DDP, one process): every rank."""
    return world // shards(param)
