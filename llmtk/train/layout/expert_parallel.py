"""Expert parallelism (--ep): a mixture-of-experts layer's experts split over ep ranks, the
tokens sent to the ranks holding their experts and the outputs brought back, by all-to-all.

The ranks (torchtitan's arrangement). ep is not a dimension of the world mesh: its ranks
are borrowed from the data-parallel ones. dp_shard x cp is flattened into one dimension
(cp fastest, the name the context-parallel code gives it, "dp_shard_cp") and split into
(efsdp, ep), ep fastest: an ep group is ep consecutive ranks of dp_shard x cp, so it
takes cp ranks before dp_shard ones, and ranks of one node before another's. Each ep group
holds one copy of the experts: rank i of the group holds experts i*E/ep .. (i+1)*E/ep - 1.

The weights. Each expert weight (E, out, in) is a DTensor placed Shard(0) over ep (under
tp as well split over tp along the hidden width, [Shard(0), Shard(h)] on (ep, tp), as the
placement table splits experts without ep). FSDP2 then shards each rank's E/ep experts
over efsdp (= dp_shard x cp / ep; with dp_replicate also replicated, HSDP) as their own
FSDP group, inside the block's group that shards everything else over dp_shard (x cp) as
before. A rank's share of the model is therefore the same as without ep; what changes is
what it gathers before a block runs: E/ep experts instead of E.

Gradients. The all-to-all's backward sends each row's gradient back to the rank whose
token it was, so the gradient of a rank's experts sums the tokens of its whole ep group;
FSDP2's reduce-scatter over efsdp (and all-reduce over dp_replicate) adds the other groups'.
That is a sum over all dp_replicate x dp_shard x cp ranks, which the other parameters'
FSDP2 averages over. FSDP2 divides the experts' sum by its own group's size
(dp_replicate x efsdp), so the experts' weight gradients are scaled by 1/ep on the way
out of the backward (GroupedExperts.grad_scale; exact for a power-of-two ep). Not
set_gradient_divide_factor(dp): torch 2.13's FSDP2 divides an fp64 gradient twice then
(measured: 1/4 for a factor of 2; fp32 right). In the global grad norm each shard
counts once (optim.py divides the all-reduced squares by replicas(), the world over the
shards of a parameter's placements: efsdp x ep (x tp) for an expert weight).

One MoE layer's forward on a rank (AllToAll below), for its M = N*K kept assignments
sorted by expert (M rows, C = d_model):
  1. all_to_all_single of the per-expert counts (E int64), so that each rank knows how
     many rows it receives from each other rank for each of its experts (host sync: the
     split sizes are read on the host);
  2. all_to_all_single of the rows (M, C + 1): each row with its routing weight as one more
     column (exact: the weight is rounded to the rows' dtype where the experts apply it
     anyway), to the rank of its expert;
  3. the received rows, grouped by source rank, are regrouped by expert and run through
     the rank's E/ep experts (the grouped matmul, as without ep), then put back;
  4. all_to_all_single of the outputs (R, C) back to the ranks their tokens came from, in
     the order they were sent: the layer adds them into its tokens as without ep.
The backward runs 2 and 4 again, reversed (the gradients of the rows and of the outputs);
the counts have none. Dropless: a rank receives whatever its experts were chosen for; with
--capacity-factor each rank caps its own micro-batch's assignments before sending, as one
process caps its micro-batch.

Every rank of an ep group must run each MoE layer's forward and backward the same number
of times in the same order (every rank of FSDP2 does anyway): evaluation and sampling run
on all ranks under FSDP2 (train/layout/whole.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ExpertMeshes:
    """The sub-meshes expert parallelism uses (all share the world mesh's root)."""

    ep: object            # (ep,) the ranks whose experts together make one copy
    experts: object       # the experts' DTensor mesh: (ep,), or (ep, tp) under tp
    fsdp: object          # FSDP2's mesh for the experts: (efsdp,), or (dp_replicate, efsdp)


def expert_meshes(world_mesh, layout) -> ExpertMeshes:
    """The ep meshes of `layout` (a Layout with ep > 1) cut from `world_mesh` (collective:
    every rank calls it, in the same order)."""
    from torch.distributed.device_mesh import DeviceMesh

    ep = layout.ep
    efsdp = layout.dp_shard * layout.cp // ep
    flat = world_mesh["dp_shard", "cp"]._flatten("dp_shard_cp")
    split = flat._unflatten(0, (efsdp, ep), ("efsdp", "ep"))
    parts = [world_mesh["pp", "dp_replicate"], split, world_mesh["tp"]]
    sparse = DeviceMesh._concatenate(parts)  # (pp, dp_replicate, efsdp, ep, tp)
    return ExpertMeshes(
        ep=sparse["ep"],
        experts=sparse["ep", "tp"] if layout.tp > 1 else sparse["ep"],
        fsdp=sparse["dp_replicate", "efsdp"] if layout.dp_replicate > 1 else sparse["efsdp"])


def apply_ep(model, meshes: ExpertMeshes) -> None:
    """Place every MoE layer's experts of `model` (before fully_shard, on any device) over
    the ep ranks and give them the all-to-all dispatch."""
    from torch import nn
    from torch.distributed.tensor import Shard, distribute_tensor

    from llmtk.compute.placement import EXPERT_DIM
    from llmtk.train.model.lora import place_expert_adapters
    from llmtk.train.model.moe import MoE

    tp = meshes.experts.ndim > 1
    for module in model.modules():
        if not isinstance(module, MoE):
            continue
        experts = module.experts
        for name in ("w1", "w3", "w2"):
            p = getattr(experts, name)
            place = [Shard(0), Shard(EXPERT_DIM[name])] if tp else [Shard(0)]
            setattr(experts, name, nn.Parameter(distribute_tensor(
                p.detach(), meshes.experts, place), requires_grad=p.requires_grad))
        # LoRA's per-expert adapters (lora.LoRAExperts) go with the experts they adapt
        place_expert_adapters(experts, meshes.experts, ep=True, tp=tp)
        experts.dispatch = AllToAll(meshes.ep.get_group(), meshes.ep.size(), module.n)
        experts.grad_scale = 1.0 / meshes.ep.size()


def shard_experts(model, meshes: ExpertMeshes, mp) -> None:
    """FSDP2 over each MoE layer's experts on the efsdp mesh (before the block's own
    fully_shard, which then leaves them out)."""
    from torch.distributed.fsdp import fully_shard

    from llmtk.train.model.moe import MoE

    for module in model.modules():
        if isinstance(module, MoE):
            fully_shard(module.experts, mesh=meshes.fsdp, mp_policy=mp)


def regroup(counts):
    """counts (ep, e): rows received from each source rank for each local expert, in the
    order they arrive (source-major). -> (order, per_expert): the arrival index of each row
    in expert-major order (each expert's rows from rank 0, then rank 1, ...), and the rows
    per local expert (e,)."""
    import torch

    ep, e = counts.shape
    flat = counts.reshape(-1)
    starts = (flat.cumsum(0) - flat).view(ep, e)  # arrival index of each (source, expert)
    segs = counts.t().reshape(-1)  # (e * ep,) segment lengths, expert-major
    first = starts.t().reshape(-1)  # where each of them begins in the arrival order
    seg = torch.repeat_interleave(torch.arange(segs.numel(), device=counts.device), segs)
    offset = torch.arange(seg.numel(), device=counts.device) - (segs.cumsum(0) - segs)[seg]
    return first[seg] + offset, counts.sum(0)


class AllToAll:
    """GroupedExperts.dispatch under expert parallelism (steps 1-4 of the module
    docstring) over the process `group` of `ep` ranks, for a layer of `n` experts."""

    def __init__(self, group, ep: int, n: int):
        self.group, self.ep, self.n = group, ep, n
        # The rows this rank's experts received, summed over calls until a caller resets
        # it: routing need not split them evenly, and a rank's activations grow with them
        # (benchmarks/memory_check.py reads it). A host int: the split sizes are there.
        self.received = 0

    def __call__(self, compute, x, counts, scale):
        """compute(rows, counts per local expert, scale) on the rows of x (M, C) sorted by
        expert (counts (E,)), on the ranks holding their experts -> (M, C) in x's order."""
        import torch
        from torch.distributed._functional_collectives import all_to_all_single

        ep, e = self.ep, self.n // self.ep
        counts = counts.to(torch.int64)
        # 1. how many rows each rank receives, from whom, for which of its experts
        got = all_to_all_single(counts, None, None, group=self.group)  # (ep * e,)
        got = _plain(got).view(ep, e)
        send = counts.view(ep, e).sum(1).tolist()  # rows to each rank (host: split sizes)
        recv = got.sum(1).tolist()
        self.received += sum(recv)
        # 2. the rows with their routing weights, to their experts' ranks
        cols = x.shape[1]
        rows = x if scale is None else torch.cat([x, scale.to(x.dtype).unsqueeze(1)], 1)
        arrived = _plain(all_to_all_single(rows, recv, send, group=self.group))  # (R, C+1)
        # 3. expert-major, through this rank's experts, and back to the arrival order
        order, per_expert = regroup(got)
        # (indexing makes new rows with a row stride of C: a (1, C) slice of the (R, C + 1)
        # rows counts as contiguous with a stride of C + 1, which the grouped kernel refuses)
        out = compute(arrived[:, :cols][order], per_expert,
                      None if scale is None else arrived[:, cols][order])  # (R, C)
        back = torch.empty_like(out).index_copy(0, order, out)
        # 4. to the ranks the rows came from, in the order they were sent
        return _plain(all_to_all_single(back, send, recv, group=self.group))  # (M, C)


def _plain(t):
    """A functional collective's result waited for, as a plain tensor on the autograd graph
    (wait_tensor's backward is the identity). Left an AsyncCollectiveTensor, it would be
    waited for at its first use, but tools that look at the tensors autograd saves
    (llmtk.train.measure) find a wrapper without storage."""
    import torch

    return torch.ops._c10d_functional.wait_tensor(t)
