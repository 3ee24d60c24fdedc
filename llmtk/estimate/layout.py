"""`llmtk estimate --solve layout`: the layouts llmtk train can run for a model on a GPU
count, and the time of one optimizer step under each (the cost model of docs/estimate.md).

The search space (`candidates`): tp a divisor of the GPUs per node that divides the heads,
key/value heads, MLP width and sequence length (tensor parallelism stays inside a node,
with sequence-parallel norms: torchtitan's plan, what `llmtk train --tp` runs); pp a
divisor of what is left, at most one stage per layer; dp the rest; ZeRO 3 (FSDP2) or 0
(whole copies), the two `llmtk train` runs; micro-batches of a power of two dividing the
rank's share of the global batch, at least pp of them per step under pp (train's 1F1B
needs one per stage); recompute selective (llmtk's SDPA attention never
stores the scores, so "none" is "selective") or full (activation checkpointing). Memory is
priced by the caller as `llmtk train --dry-run` counts it (plan._memory, llmtk_model).

The step time (`step_time`), per optimizer step of `global_batch` sequences:
  compute   model FLOPs (6N + attention) of the step's tokens, + one forward (1/3) under
            full recompute, over all GPUs at peak x MFU;
  tp        per layer and micro-batch, sequence parallelism's all-gathers and
            reduce-scatters of the (b, s, h) activations: 4 in forward, 4 in backward,
            4 more under full recompute, each moving (tp-1)/tp of it over NVLink; not
            overlapped (no async TP);
  bubble    1F1B: the pipeline's compute and tp time x (pp - 1)/m, m micro-batches (a
            bubble fraction (pp - 1)/(m + pp - 1) of the step);
  pp        each micro-batch's activations sent to the next stage and its gradient back
            (the rank's 1/tp share), over the network when the run spans nodes (some
            stage boundary then does); exposed;
  fsdp      ZeRO 3: every micro-step all-gathers the rank's (tp x pp)-th of the bf16
            weights twice (forward, then backward: FSDP2 reshards after forward) and
            reduce-scatters its fp32 gradients (llmtk train syncs every micro-step, so
            no rank holds whole gradients; a pipeline stage once a step, at the last
            micro-batch), one collective per block; ZeRO 0: one fp32 gradient
            all-reduce per step. Over the network when the data-parallel group spans
            nodes, NVLink otherwise. The gathers overlap the step's compute (FSDP2
            prefetches the next block), FSDP2's reductions each micro-step's backward,
            DDP's one reduction the last micro-step's backward (it buckets it), and
            under a pipeline nothing: only what they cannot hide shows.
A collective over p ranks of B bytes takes (p-1)·latency + (p-1)/p·B / (bandwidth x
LINK_EFFICIENCY) (ring algorithm; an all-reduce twice that).
"""

from __future__ import annotations

from dataclasses import dataclass

from llmtk.compute import hardware
from llmtk.compute.models import ModelSpec
from llmtk.compute.placement import stage_layers

# What NCCL achieves of a link's nominal bandwidth on large messages (its "bus bandwidth"
# on H100 NVLink and 400 Gb/s InfiniBand is ~75-85% of nominal in nccl-tests).
LINK_EFFICIENCY = 0.8
# Per ring step: one hop's latency inside a node (NVLink) and across nodes (RDMA).
LATENCY_INTRA = 10e-6
LATENCY_INTER = 20e-6
RECOMPUTE = ("selective", "full")


@dataclass(frozen=True)
class Candidate:
    dp: int
    tp: int
    pp: int
    zero: int          # 0 or 3
    micro_batch: int
    recompute: str     # selective | full

    def __str__(self) -> str:
        parts = [f"dp {self.dp}", f"tp {self.tp}", f"pp {self.pp}"]
        return (" x ".join(parts) + f", ZeRO {self.zero}, micro-batch {self.micro_batch}, "
                f"recompute {self.recompute}")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def tp_sizes(spec: ModelSpec, n_gpus: int, per_node: int) -> list[int]:
    """Tensor-parallel sizes that split the model evenly inside one node."""
    return [t for t in _divisors(min(per_node, n_gpus))
            if n_gpus % t == 0 and per_node % t == 0
            and all(x % t == 0 for x in (spec.n_head, spec.kv_heads, spec.ffn, spec.seq_len))]


def candidates(spec: ModelSpec, n_gpus: int, per_node: int, global_batch: int,
               recompute: tuple[str, ...] = RECOMPUTE):
    """Every layout `llmtk train` can run on n_gpus for a global batch of sequences
    (tensor parallelism within a node; the recompute modes given)."""
    for tp in tp_sizes(spec, n_gpus, per_node):
        for pp in _divisors(n_gpus // tp):
            if pp > spec.n_layer:
                continue
            dp = n_gpus // (tp * pp)
            if global_batch % dp:
                continue
            local = global_batch // dp
            for zero in ((0, 3) if dp > 1 else (0,)):
                for rc in recompute:
                    mb = 1
                    # train's 1F1B pipeline needs a micro-batch per stage at least
                    while local // mb >= pp:
                        if local % mb == 0:
                            yield Candidate(dp, tp, pp, zero, mb, rc)
                        mb *= 2


def _collective(ranks: int, nbytes: float, bandwidth: float, latency: float,
                count: int = 1) -> float:
    """Seconds of `count` ring all-gathers or reduce-scatters that move `nbytes` (the full
    tensors) between them: each pays the ring's latency, the bytes are shared."""
    if ranks <= 1:
        return 0.0
    return (count * (ranks - 1) * latency
            + (ranks - 1) / ranks * nbytes / (bandwidth * LINK_EFFICIENCY))


def step_time(spec: ModelSpec, c: Candidate, *, global_batch: int, flops_per_token: float,
              params: float, peak: float, mfu: float, gpu, per_node: int,
              elem: int = 2, trainable: float | None = None) -> dict[str, float]:
    """Seconds of one optimizer step of layout `c` and its parts (see the module doc).
    params: all parameters; trainable: those with gradients (LoRA: the adapters; default
    all); flops_per_token: model FLOPs (6N + attention)."""
    n = c.dp * c.tp * c.pp
    nvlink = hardware.intra_node_bandwidth(gpu)
    m = global_batch // (c.dp * c.micro_batch)  # micro-batches per step per pipeline
    tokens = global_batch * spec.seq_len
    hw_flops = tokens * flops_per_token * (4 / 3 if c.recompute == "full" else 1.0)
    compute = hw_flops / (n * peak * mfu)

    act = c.micro_batch * spec.seq_len * spec.d_model * elem  # one (b, s, h) tensor, bytes
    layers = max(stage_layers(spec.n_layer, c.pp))  # the busiest stage
    per_layer = (12 if c.recompute == "full" else 8)
    tp = m * layers * per_layer * _collective(c.tp, act, nvlink, LATENCY_INTRA)

    bubble = (c.pp - 1) / (m + c.pp - 1)
    bubble_s = (compute + tp) * (c.pp - 1) / m  # 1F1B: (pp - 1) idle micro-batch slots

    # Stages are contiguous blocks of ranks (pp outermost): on more than one node some
    # boundary between stages crosses nodes, and every micro-batch waits for the slowest.
    link, lat = (hardware.INTER_NODE, LATENCY_INTER) if n > per_node else \
        (nvlink, LATENCY_INTRA)
    pp = 2 * m * (act / c.tp) / (link * LINK_EFFICIENCY) + 2 * m * lat if c.pp > 1 else 0.0

    # The data-parallel group: ranks tp apart inside one stage's block of dp x tp ranks.
    dp_spans_nodes = c.dp * c.tp > per_node
    link, lat = (hardware.INTER_NODE, LATENCY_INTER) if dp_spans_nodes else \
        (nvlink, LATENCY_INTRA)
    shard = params / (c.tp * c.pp)  # the parameters one data-parallel group shares
    grads = (params if trainable is None else trainable) / (c.tp * c.pp)
    if c.zero == 3:
        units = layers + 1  # FSDP2 gathers and reduces block by block (and the root)
        # bf16 (fp32) weights, twice a micro-step; fp32 gradients, every micro-step
        # (llmtk train), once a step under a pipeline (torch's stage defers them)
        gathers = 2 * m * _collective(c.dp, elem * shard, link, lat, count=units)
        reduce = (m if c.pp == 1 else 1) * _collective(c.dp, 4 * grads, link, lat,
                                                       count=units)
    else:
        gathers = 0.0
        reduce = 2 * _collective(c.dp, 4 * grads, link, lat)  # all-reduce = RS + AG
    # What hides it: the step's compute hides at most its own length of traffic (one
    # link carries all of it; FSDP2 prefetches the next block's gather); the gradient
    # reductions only backward (2/3 of the compute, 3/4 under full recompute): FSDP2's
    # each micro-step's own, DDP's one all-reduce the last micro-step's; under a pipeline
    # nothing (torch reduces after the last micro-batch).
    frac = 0.75 if c.recompute == "full" else 2 / 3
    backward = 0.0 if c.pp > 1 else compute * frac if c.zero == 3 else compute / m * frac
    exposed = max(0.0, gathers + reduce - compute, reduce - backward)
    step = compute + tp + bubble_s + pp + exposed
    return {"step_s": step, "compute_s": compute, "tp_s": tp, "bubble": bubble,
            "bubble_s": bubble_s, "pp_s": pp, "dp_comm_s": gathers + reduce,
            "dp_reduce_s": reduce, "dp_exposed_s": exposed, "micro_batches": m}
