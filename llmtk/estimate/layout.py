"""`llmtk estimate --solve layout`: the layouts llmtk train can run for a model on a GPU
count, and the time of one optimizer step under each (the cost model of docs/estimate.md).

The search space (`candidates`): tp a divisor of the GPUs per node that divides the heads,
key/value heads, MLP width and sequence length (tensor parallelism stays inside a node,
with sequence-parallel norms: torchtitan's plan, what `llmtk train --tp` runs); pp a
divisor of what is left, at most one stage per layer; dp the rest; ZeRO 3 (FSDP2) or 0
(whole copies), the two `llmtk train` runs; micro-batches of a power of two dividing the
rank's share of the global batch, at least pp of them per step under pp (train's 1F1B
needs one per stage); cp (context parallelism) a divisor of what tp leaves that splits
every sequence into 2·cp equal chunks (each rank a head and a tail chunk: the causal
work balanced) of at least MIN_CP_TOKENS/2 tokens; ep (expert parallelism, MoE models
only) a divisor of dp x cp (the ranks it borrows) and of the experts; cp and ep under
ZeRO 3 only (llmtk train shards over dp_shard x cp with FSDP2); recompute selective
(llmtk's SDPA attention never
stores the scores, so "none" is "selective") or full (activation checkpointing). Memory is
priced by the caller as `llmtk train --dry-run` counts it (plan._memory, llmtk_model), and
the caller asks llmtk train's own layout rules (llmtk.estimate.rules) whether it runs each.

The step time (`step_time`), per optimizer step of `global_batch` sequences:
  compute   model FLOPs (6N + attention) of the step's tokens, + one forward (1/3) under
            full recompute, over all GPUs at peak x MFU;
  tp        per layer and micro-batch, sequence parallelism's all-gathers and
            reduce-scatters of the (b, s/cp, h) activations: 4 in forward, 4 in backward,
            4 more under full recompute, each moving (tp-1)/tp of it over NVLink; not
            overlapped (no async TP);
  bubble    1F1B: the pipeline's compute and tp time x (pp - 1)/m, m micro-batches (a
            bubble fraction (pp - 1)/(m + pp - 1) of the step);
  pp        each micro-batch's activations sent to the next stage and its gradient back
            (the rank's 1/tp share), over the network when the run spans nodes (some
            stage boundary then does); exposed;
  cp        per layer and micro-batch, the all-gather of the whole sequence's K and V
            (the rank's kv heads: b·s·2·K·D/tp elements; each rank receives (cp-1)/cp of
            it) in forward and the reduce-scatter of dK, dV in backward, + the all-gather
            again under full recompute; exposed (Llama 3, sec. 3.3.2: the all-gather
            sits on the critical path, small beside O(s²) attention); NVLink while a cp
            group (cp x tp consecutive ranks) stays in one node, the network otherwise;
  ep        per MoE layer and micro-batch, the token all-to-alls: dispatch and combine
            in forward, their gradients in backward (+2 under full recompute), each
            sending tokens x top_k x d_model x bytes x (ep-1)/ep per rank (tokens: the
            rank's b·s/(cp·tp)), and one all-to-all of the E per-expert token counts
            (int64) before each dispatch; exposed (no overlap with expert compute);
            NVLink while ep x tp ranks stay in one node;
  fsdp      ZeRO 3: every micro-step all-gathers the rank's (tp x pp)-th of the bf16
            weights twice (forward, then backward: FSDP2 reshards after forward) and
            reduce-scatters its fp32 gradients (llmtk train syncs every micro-step, so
            no rank holds whole gradients; a pipeline stage once a step, at the last
            micro-batch), one collective per block, over dp x cp ranks (the cp
            ranks hold the same parameters), a MoE layer's experts (1/ep of them per
            rank) over dp x cp / ep; ZeRO 0: one fp32 gradient all-reduce per step.
            Over the network when the data-parallel group spans
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
# The fewest tokens of each sequence a cp rank holds (two chunks of half that). The cost
# model's MFU is a constant, so it cannot see that short chunks run matmuls and attention
# kernels below it, and with GQA's small K/V the cp all-gather looks cheaper than tp's
# traffic at any length: unbounded, it splits 8K sequences 4 ways. Llama 3 used no cp at
# 8K and cp 16 at 128K, 8K tokens per rank (Table 4): the bound is that published choice.
MIN_CP_TOKENS = 8192


@dataclass(frozen=True)
class Candidate:
    dp: int
    tp: int
    pp: int
    zero: int          # 0 or 3
    micro_batch: int
    recompute: str     # selective | full
    cp: int = 1        # context parallel: each rank holds 1/cp of every sequence
    ep: int = 1        # expert parallel: ep of the dp x cp ranks split the experts

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def __str__(self) -> str:
        parts = [f"dp {self.dp}", f"tp {self.tp}", f"pp {self.pp}"]
        parts += [f"cp {self.cp}"] if self.cp > 1 else []
        parts += [f"ep {self.ep}"] if self.ep > 1 else []
        return (" x ".join(parts) + f", ZeRO {self.zero}, micro-batch {self.micro_batch}, "
                f"recompute {self.recompute}")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def tp_sizes(spec: ModelSpec, n_gpus: int, per_node: int) -> list[int]:
    """Tensor-parallel sizes that split the model evenly inside one node."""
    return [t for t in _divisors(min(per_node, n_gpus))
            if n_gpus % t == 0 and per_node % t == 0
            and all(x % t == 0 for x in (spec.n_head, spec.kv_heads, spec.ffn, spec.seq_len))]


def cp_sizes(spec: ModelSpec, ranks: int) -> list[int]:
    """Context-parallel sizes for a sequence: divisors of `ranks` that cut it into 2·cp
    equal load-balanced chunks, each rank keeping at least MIN_CP_TOKENS tokens."""
    return [c for c in _divisors(ranks)
            if spec.seq_len % (2 * c) == 0 and spec.seq_len // c >= MIN_CP_TOKENS or c == 1]


def ep_sizes(spec: ModelSpec, borrowed: int) -> list[int]:
    """Expert-parallel sizes: divisors of the dp x cp ranks they borrow that divide the
    experts; 1 for a dense model."""
    if not spec.n_experts:
        return [1]
    return [e for e in _divisors(borrowed) if spec.n_experts % e == 0]


def candidates(spec: ModelSpec, n_gpus: int, per_node: int, global_batch: int,
               recompute: tuple[str, ...] = RECOMPUTE):
    """Every layout on n_gpus for a global batch of sequences (tensor parallelism within a
    node; the recompute modes given), before llmtk train's rules (llmtk.estimate.rules)
    are asked about it."""
    for tp in tp_sizes(spec, n_gpus, per_node):
        for cp in cp_sizes(spec, n_gpus // tp):
            for pp in _divisors(n_gpus // (tp * cp)):
                if pp > spec.n_layer:
                    continue
                dp = n_gpus // (tp * pp * cp)
                if global_batch % dp:
                    continue
                local = global_batch // dp
                for ep in ep_sizes(spec, dp * cp):
                    zeros = (3,) if cp > 1 or ep > 1 else (0, 3) if dp > 1 else (0,)
                    for zero in zeros:
                        for rc in recompute:
                            mb = 1
                            # train's 1F1B pipeline needs a micro-batch per stage at least
                            while local // mb >= pp:
                                if local % mb == 0:
                                    yield Candidate(dp, tp, pp, zero, mb, rc, cp, ep)
                                mb *= 2


def _collective(ranks: int, nbytes: float, bandwidth: float, latency: float,
                count: int = 1) -> float:
    """Seconds of `count` ring all-gathers or reduce-scatters that move `nbytes` (the full
    tensors) between them: each pays the ring's latency, the bytes are shared."""
    if ranks <= 1:
        return 0.0
    return (count * (ranks - 1) * latency
            + (ranks - 1) / ranks * nbytes / (bandwidth * LINK_EFFICIENCY))


def _link(ranks_spanned: int, per_node: int, nvlink: float) -> tuple[float, float]:
    """(bandwidth, latency) of a group whose ranks lie within `ranks_spanned` consecutive
    ranks: NVLink inside one node, the network beyond."""
    if ranks_spanned > per_node:
        return hardware.INTER_NODE, LATENCY_INTER
    return nvlink, LATENCY_INTRA


def cp_bytes(spec: ModelSpec, c: Candidate, elem: int = 2) -> float:
    """Bytes one rank receives in one layer's K/V all-gather for one micro-batch (and sends
    in the dK/dV reduce-scatter): (cp-1)/cp of the whole sequence's K and V of its tp
    share of the kv heads."""
    kv = c.micro_batch * spec.seq_len * 2 * spec.kv_heads * spec.hd * elem / c.tp
    return (c.cp - 1) / c.cp * kv


def ep_bytes(spec: ModelSpec, c: Candidate, elem: int = 2) -> float:
    """Bytes one rank sends in one token all-to-all of a MoE layer for one micro-batch:
    its tokens x top_k copies of d_model, the (ep-1)/ep of them bound for other ranks."""
    tokens = c.micro_batch * spec.seq_len / (c.cp * c.tp)
    return (c.ep - 1) / c.ep * tokens * spec.top_k * spec.d_model * elem


def step_time(spec: ModelSpec, c: Candidate, *, global_batch: int, flops_per_token: float,
              params: float, peak: float, mfu: float, gpu, per_node: int,
              elem: int = 2, trainable: float | None = None,
              expert_params: float = 0.0) -> dict[str, float]:
    """Seconds of one optimizer step of layout `c` and its parts (see the module doc).
    params: all parameters; trainable: those with gradients (LoRA: the adapters; default
    all); expert_params: the routed experts' share of params (split over c.ep);
    flops_per_token: the work per token the MFU is measured on (6N + causal attention)."""
    n = c.gpus
    nvlink = hardware.intra_node_bandwidth(gpu)
    m = global_batch // (c.dp * c.micro_batch)  # micro-batches per step per pipeline
    tokens = global_batch * spec.seq_len
    hw_flops = tokens * flops_per_token * (4 / 3 if c.recompute == "full" else 1.0)
    compute = hw_flops / (n * peak * mfu)

    # one (b, s, h) tensor of the rank's s/cp tokens, bytes
    act = c.micro_batch * spec.seq_len / c.cp * spec.d_model * elem
    layers = max(stage_layers(spec.n_layer, c.pp))  # the busiest stage
    per_layer = (12 if c.recompute == "full" else 8)
    tp = m * layers * per_layer * _collective(c.tp, act, nvlink, LATENCY_INTRA)

    passes = 3 if c.recompute == "full" else 2  # forward, backward (+ forward again)
    link, lat = _link(c.cp * c.tp, per_node, nvlink)  # a cp group: cp x tp ranks
    cp_step = m * layers * passes * cp_bytes(spec, c, elem)
    cp = cp_step / (link * LINK_EFFICIENCY) + m * layers * passes * (c.cp - 1) * lat \
        if c.cp > 1 else 0.0

    moe = round(spec.moe_layers * layers / spec.n_layer)  # the busiest stage's MoE layers
    link, lat = _link(c.ep * c.tp, per_node, nvlink)
    calls = m * moe * 2 * passes  # dispatch and combine, forward, backward (+ recompute)
    counts = m * moe * (passes - 1)  # one exchange of counts before each forward dispatch
    ep_step = calls * ep_bytes(spec, c, elem) + counts * 8 * spec.n_experts * (c.ep - 1) / c.ep
    ep = ep_step / (link * LINK_EFFICIENCY) + (calls + counts) * (c.ep - 1) * lat \
        if c.ep > 1 else 0.0

    bubble = (c.pp - 1) / (m + c.pp - 1)
    # 1F1B: (pp - 1) idle micro-batch slots of everything a micro-batch waits for
    bubble_s = (compute + tp + cp + ep) * (c.pp - 1) / m

    # Stages are contiguous blocks of ranks (pp outermost): on more than one node some
    # boundary between stages crosses nodes, and every micro-batch waits for the slowest.
    link, lat = (hardware.INTER_NODE, LATENCY_INTER) if n > per_node else \
        (nvlink, LATENCY_INTRA)
    pp = 2 * m * (act / c.tp) / (link * LINK_EFFICIENCY) + 2 * m * lat if c.pp > 1 else 0.0

    # The data-parallel group (FSDP's, with the cp ranks that hold the same parameters):
    # ranks tp apart inside one stage's block of dp x cp x tp ranks. A MoE layer's experts
    # are sharded over the dp x cp / ep ranks that hold the same ones, 1/ep of them each.
    group = c.dp * c.cp
    link, lat = _link(group * c.tp, per_node, nvlink)
    experts = expert_params / (c.tp * c.pp)
    dense = params / (c.tp * c.pp) - experts  # the parameters one data-parallel group shares
    trained = params if trainable is None else trainable
    grads = trained / (c.tp * c.pp) - (experts if trainable is None else 0.0)
    expert_grads = experts if trainable is None else 0.0
    if c.zero == 3:
        units = layers + 1  # FSDP2 gathers and reduces block by block (and the root)
        # bf16 (fp32) weights, twice a micro-step; fp32 gradients, every micro-step
        # (llmtk train), once a step under a pipeline (torch's stage defers them)
        gathers = 2 * m * (_collective(group, elem * dense, link, lat, count=units)
                           + _collective(group // c.ep, elem * experts / c.ep, link, lat,
                                         count=moe))
        reduce = (m if c.pp == 1 else 1) * (
            _collective(group, 4 * grads, link, lat, count=units)
            + _collective(group // c.ep, 4 * expert_grads / c.ep, link, lat, count=moe))
    else:
        gathers = 0.0
        reduce = 2 * (_collective(group, 4 * grads, link, lat)  # all-reduce = RS + AG
                      + _collective(group // c.ep, 4 * expert_grads / c.ep, link, lat))
    # What hides it: the step's compute hides at most its own length of traffic (one
    # link carries all of it; FSDP2 prefetches the next block's gather); the gradient
    # reductions only backward (2/3 of the compute, 3/4 under full recompute): FSDP2's
    # each micro-step's own, DDP's one all-reduce the last micro-step's; under a pipeline
    # nothing (torch reduces after the last micro-batch).
    frac = 0.75 if c.recompute == "full" else 2 / 3
    backward = 0.0 if c.pp > 1 else compute * frac if c.zero == 3 else compute / m * frac
    exposed = max(0.0, gathers + reduce - compute, reduce - backward)
    step = compute + tp + cp + ep + bubble_s + pp + exposed
    return {"step_s": step, "compute_s": compute, "tp_s": tp, "cp_s": cp, "ep_s": ep,
            "cp_bytes": cp_step, "ep_bytes": ep_step, "bubble": bubble,
            "bubble_s": bubble_s, "pp_s": pp, "dp_comm_s": gathers + reduce,
            "dp_reduce_s": reduce, "dp_exposed_s": exposed, "micro_batches": m}
