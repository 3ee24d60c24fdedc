"""Training memory per GPU: model states with ZeRO/FSDP sharding, activations, overhead.

Model states follow the ZeRO paper (Rajbhandari et al. 2020, sec. 3 and fig. 1):
mixed-precision AdamW keeps 2 bytes of weights, 2 of gradients and K = 12 of
optimizer state (4 fp32 master + 4 m + 4 v) per parameter, 16Ψ in all; stage 1
shards the K part over the Nd data-parallel ranks (4Ψ + 12Ψ/Nd), stage 2 the
gradients too (2Ψ + 14Ψ/Nd), stage 3 (= FSDP full sharding) everything (16Ψ/Nd).
Tensor and pipeline parallelism split the parameters over tp·pp GPUs first.

Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation
in Large Transformer Models", sec. 4), per layer with sequence s, micro-batch b,
hidden h, a heads and tensor-parallel size t, 16-bit activations:
  no parallelism             sbh(34 + 5as/h)
  tensor parallel            sbh(10 + 24/t + 5as/(ht))
  + sequence parallel        sbh(34 + 5as/h)/t
  + selective recompute      drops the 5as/h term (attention scores recomputed)
  full recompute             2sbh (only the layer input), /t with sequence parallel.
`layer_activation_bytes` derives those numbers term by term, so it also covers
SwiGLU MLPs, grouped-query attention, no-dropout models and fp32 activations, and
reduces to the paper's formulas for a GPT-3 block (tests check that).

Context parallelism (cp ranks, Llama 3's all-gather variant, what `llmtk train --cp`
runs): each rank holds s/cp of every sequence, so every term above is taken at s/cp,
and each layer all-gathers the keys and values of the whole sequence for its attention,
which keeps them for backward: + 2·s·b·(kv heads x head dim)/t elements per layer (not
under full recompute, where a layer keeps only its input).

Expert parallelism (ep ranks borrowed from dp x cp, torchtitan's arrangement): a MoE
layer's experts are split over the ep ranks, then FSDP/ZeRO shards each rank's experts
over the remaining dp·cp/ep ranks; every other parameter is sharded over dp·cp.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from llmtk.compute.models import ModelSpec
from llmtk.compute.placement import DEFAULT_LORA_TARGETS

# Bytes per parameter: (weights, gradients, fp32 master copy).
PRECISION_BYTES = {
    "bf16-mixed": (2, 2, 4),
    "fp16-mixed": (2, 2, 4),
    # FP8 training (Transformer Engine, DeepSeek-V3) casts to FP8 inside the matmuls
    # but keeps BF16 weights/gradients and FP32 masters: memory as bf16-mixed.
    "fp8": (2, 2, 4),
    "fp32": (4, 4, 0),
}
# Activation element size (the 16-bit "2" of Korthikanti's formulas).
ACTIVATION_BYTES = {"bf16-mixed": 2, "fp16-mixed": 2, "fp8": 2, "fp32": 4}
# Optimizer state bytes per trainable parameter (fp32 states). Adafactor's factored
# second moment is counted from the matrix shapes instead (see adafactor_state_elems).
OPTIMIZER_BYTES = {"adamw": 8, "sgd": 4, "adafactor": None}
RECOMPUTE = ("none", "selective", "full")

# The stated overhead: CUDA context, cuBLAS/NCCL workspaces (fixed), plus allocator
# fragmentation and temporary buffers (a fraction of everything else).
OVERHEAD_FIXED = 1.0 * 1024**3
OVERHEAD_FRACTION = 0.10


@dataclass(frozen=True)
class Parallel:
    dp: int = 1
    tp: int = 1
    pp: int = 1
    zero: int = 0
    sp: bool = False  # Megatron sequence parallelism (only meaningful with tp > 1)
    cp: int = 1       # context parallelism: each rank holds 1/cp of every sequence
    ep: int = 1       # expert parallelism: experts split over ep of the dp x cp ranks

    @property
    def shard_group(self) -> int:
        """The ranks that share one copy of the states under ZeRO/FSDP: the data-parallel
        ranks and the context-parallel ones (they hold the same parameters: FSDP2 shards
        over dp_shard x cp, as torchtitan does)."""
        return self.dp * self.cp


def model_state_bytes(
    n_params: float, *, precision: str, optimizer: str, par: Parallel,
    trainable: float | None = None, adafactor_elems: float | None = None,
    expert_params: float = 0.0, expert_trainable: float | None = None,
) -> dict[str, float]:
    """Per-GPU bytes of weights, gradients, fp32 master weights and optimizer states.

    n_params: all parameters stored. trainable: those that get gradients (LoRA
    adapters; default all). adafactor_elems: fp32 elements of Adafactor's factored
    state for the trainable parameters (required for optimizer='adafactor').
    expert_params: how many of n_params are routed experts' (with LoRA their adapters
    too), split over par.ep ranks and then sharded over the shard group's other
    shard_group/ep ranks; expert_trainable: how many of those are trained (default all;
    LoRA: the experts' adapters, the experts frozen).
    """
    if expert_params and par.ep > 1:
        expert_trained = expert_params if expert_trainable is None else expert_trainable
        dense = model_state_bytes(n_params - expert_params, precision=precision,
                                  optimizer=optimizer, par=par,
                                  trainable=None if trainable is None
                                  else trainable - expert_trained,
                                  adafactor_elems=adafactor_elems)
        # ep ranks each hold 1/ep of the experts; ZeRO then shards over the dp·cp/ep
        # ranks that hold the same experts
        expert = model_state_bytes(expert_params / par.ep, precision=precision,
                                   optimizer=optimizer, par=replace(
                                       par, dp=par.shard_group // par.ep, cp=1, ep=1),
                                   trainable=expert_trained / par.ep)
        return {k: dense[k] + expert[k] for k in dense}
    w, g, m = PRECISION_BYTES[precision]
    trainable = n_params if trainable is None else trainable
    per_opt = OPTIMIZER_BYTES[optimizer]
    opt = 4.0 * (adafactor_elems or 0.0) if per_opt is None else per_opt * trainable
    mp = par.tp * par.pp  # tensor and pipeline parallelism split every state first
    group = par.shard_group
    shard = {  # the data-parallel divisor of each state at each ZeRO stage
        "weights": group if par.zero >= 3 else 1,
        "gradients": group if par.zero >= 2 else 1,
        "master_weights": group if par.zero >= 1 else 1,
        "optimizer": group if par.zero >= 1 else 1,
    }
    full = {"weights": w * n_params, "gradients": g * trainable,
            "master_weights": m * trainable, "optimizer": opt}
    return {k: v / mp / shard[k] for k, v in full.items()}


def adafactor_state_elems(m: ModelSpec) -> float:
    """Adafactor (beta1 = 0, factored): r + c fp32 statistics per r x c matrix, and a full
    second moment for vectors (norm weights, biases)."""
    d, H, K, hd, f = m.d_model, m.n_head, m.kv_heads, m.hd, m.ffn
    mats = [(d, H * hd), (d, K * hd), (d, K * hd), (H * hd, d)]
    dense = [(d, f)] * (3 if m.glu else 2)
    vectors = (4 * d if m.norm == "layernorm" else 2 * d)
    if m.bias:
        vectors += H * hd + 2 * K * hd + d + (0 if m.glu else f) + d
    per_layer = sum(r + c for r, c in mats) + vectors
    # MoE layers: each expert's three matrices and the router instead of the dense MLP
    experts = (3 * (d + m.expert_width) * (m.n_experts + m.n_shared_experts)
               + d + m.n_experts)
    mlps = (m.n_layer - m.moe_layers) * sum(r + c for r, c in dense) + m.moe_layers * experts
    embed = (m.vocab_size + d) * (1 if m.tie_embeddings else 2)
    return float(m.n_layer * per_layer + mlps + embed
                 + (m.seq_len + d if m.learned_pos else 0))


def layer_activation_bytes(
    m: ModelSpec, micro_batch: int, *, tp: int = 1, sp: bool = False,
    recompute: str = "none", elem: int = 2, cp: int = 1,
) -> float:
    """Activation bytes one transformer layer keeps for backward (Korthikanti's accounting).

    Replicated across tensor-parallel ranks unless sequence parallel: the two norm
    inputs, the QKV and MLP inputs, the dropout masks. Split by tp: Q, K, V, the output
    projection input, the MLP intermediates, the attention scores. Under cp the rank's
    s/cp tokens, plus the keys and values of the whole sequence its attention gathered.
    """
    s_all, b, h = m.seq_len, micro_batch, m.d_model
    s = s_all / cp  # the rank's share of the sequence
    sb = s * b
    t = tp
    if recompute == "full":
        return elem * sb * h / (t if sp else 1)  # only the layer input is kept
    # MoE: the width a token passes through (its top_k + shared experts), layer mean
    hq, hkv, f = m.n_head * m.hd, m.kv_heads * m.hd, m.active_ffn
    mask = 1  # dropout masks: one byte per element
    replicated = 2 * elem * sb * h + elem * sb * h + elem * sb * h  # 2 norms, QKV in, MLP in
    if m.dropout:
        replicated += 2 * mask * sb * h  # after attention and after the MLP
    split = elem * sb * (hq + 2 * hkv) + elem * sb * hq  # Q, K, V; output projection input
    # GELU: its input and the fc2 input. SwiGLU (fused, as Megatron does): gate and up
    # projections (silu recomputed) and the fc2 input.
    split += (3 if m.glu else 2) * elem * sb * f
    if cp > 1:  # the all-gathered K and V of the whole sequence, kept for backward
        split += elem * s_all * b * 2 * hkv
    if recompute == "none":
        scores = m.n_head * s * s_all * b  # a·s²·b (the rank's queries x all keys)
        split += elem * scores  # softmax output (needed by the AV matmul)
        if m.dropout:
            split += mask * scores + elem * scores  # dropout mask and output
    return (replicated / (t if sp else 1)) + split / t


def embedding_activation_bytes(m: ModelSpec, micro_batch: int, *, tp: int, sp: bool,
                               cp: int = 1) -> float:
    """First stage: the embedding dropout mask (Korthikanti sec. 4.3)."""
    return (m.seq_len / cp * micro_batch * m.d_model / (tp if sp else 1)) if m.dropout \
        else 0.0


def output_activation_bytes(
    m: ModelSpec, micro_batch: int, *, tp: int, sp: bool, elem: int, cp: int = 1,
) -> float:
    """Last stage: final norm input, output projection input, and fp32 logits for the
    cross-entropy (vocab-parallel over tp), Korthikanti sec. 4.3; the rank's s/cp tokens."""
    sb = m.seq_len / cp * micro_batch
    return 2 * elem * sb * m.d_model / (tp if sp else 1) + 4 * sb * m.vocab_size / tp


def activation_bytes(
    m: ModelSpec, micro_batch: int, *, par: Parallel, recompute: str, elem: int,
    n_micro: int = 1,
) -> float:
    """Activation bytes on the busiest GPU (what forward saves; recompute_layer_bytes adds
    the layer recomputed in backward).

    With pipeline parallelism under 1F1B the first stage holds min(pp, n_micro)
    micro-batches of its L/pp layers in flight (L layers' worth when n_micro >= pp);
    the last stage holds one micro-batch plus the output layer. pp = 1: one GPU holds all.
    """
    per_layer = layer_activation_bytes(m, micro_batch, tp=par.tp, sp=par.sp,
                                       recompute=recompute, elem=elem, cp=par.cp)
    layers = math.ceil(m.n_layer / par.pp)
    emb = embedding_activation_bytes(m, micro_batch, tp=par.tp, sp=par.sp, cp=par.cp)
    out = output_activation_bytes(m, micro_batch, tp=par.tp, sp=par.sp, elem=elem, cp=par.cp)
    if par.pp == 1:
        return layers * per_layer + emb + out
    in_flight = min(par.pp, n_micro)
    first = in_flight * (layers * per_layer + emb)
    last = layers * per_layer + out
    return max(first, last)


def recompute_layer_bytes(m: ModelSpec, micro_batch: int, *, par: Parallel, recompute: str,
                          elem: int) -> float:
    """Under full recompute, a layer's backward first runs its forward again, so for that
    moment it holds everything it would have saved: one layer's selective activations on
    top of the checkpointed inputs (at 128K context ~31 GB for a llama3-8b layer in llmtk's
    model, as much as all the inputs). 0 otherwise."""
    if recompute != "full":
        return 0.0
    return layer_activation_bytes(m, micro_batch, tp=par.tp, sp=par.sp, recompute="selective",
                                  elem=elem, cp=par.cp)


def fsdp_buffer_bytes(block_params: float, *, precision: str, full_grads: bool = True) -> float:
    """ZeRO-3/FSDP all-gathers a layer's weights before use: the current and the prefetched
    layer are unsharded at once, plus one layer's full gradients before reduce-scatter.
    `block_params`: one block's parameters on one tensor-parallel rank (`block_params()`)."""
    w, g, _ = PRECISION_BYTES[precision]
    return (2 * w + (g if full_grads else 0)) * block_params


def fsdp_held_bytes(stage_params: float, stage_trainable: float, *, precision: str,
                    dp_shard: int, pp: int) -> float:
    """What FSDP2 holds unsharded through a step of `llmtk train`, beyond the gather
    buffers, on a rank whose stage has `stage_params` parameters (`stage_trainable` of
    them trained) per tp shard, before the data-parallel sharding.

    Without a pipeline, nothing: llmtk train reduce-scatters every micro-step's gradients.
    torch's pipeline stage turns gradient sync off for every micro-batch but the last, so
    FSDP2 keeps each block's whole gradient, in the fp32 reduce dtype, from the first
    micro-batch's backward to the step's reduce-scatter (FSDPParam.to_accumulated_grad_if_
    needed): 4 bytes per trained parameter where the states count a 1/dp_shard share; and
    it turns reshard-after-backward off (PipelineStage.backward_maybe_with_nosync), so the
    stage's gathered weights stay between one micro-batch's backward and the next one's
    forward. The gather buffers count two layers of each again: a small overcount, on the
    safe side."""
    if pp == 1:
        return 0.0
    return 4.0 * stage_trainable * (1 - 1 / dp_shard) + PRECISION_BYTES[precision][0] * stage_params


def with_overhead(subtotal: float) -> tuple[float, float]:
    """(overhead, total) for a subtotal of states + activations + buffers."""
    overhead = OVERHEAD_FIXED + OVERHEAD_FRACTION * subtotal
    return overhead, subtotal + overhead


def max_micro_batch(fixed: float, act_per_sample: float, capacity: float) -> int:
    """Largest micro-batch b with (fixed + b·act_per_sample)·(1 + frac) + fixed overhead
    <= capacity; 0 when even the states do not fit."""
    room = (capacity - OVERHEAD_FIXED) / (1 + OVERHEAD_FRACTION) - fixed
    if room <= 0 or act_per_sample <= 0:
        return 0
    return int(room // act_per_sample)


def block_params(m: ModelSpec, tp: int = 1, ep: int = 1) -> float:
    """One transformer block's parameters on one tensor-parallel rank, placed as the
    placement table says (llmtk.compute.placement): the matrices split over tp, the two
    norms whole on every rank (biases, which llmtk's GPT does not have, split with their
    matrices). ep: a MoE block's routed experts split over ep ranks (what FSDP gathers
    of them is the rank's E/ep)."""
    from llmtk.compute.placement import BLOCK_PLAN, tp_elements

    d, H, K, hd, f = m.d_model, m.n_head, m.kv_heads, m.hd, m.ffn
    norm = 2 * d if m.norm == "layernorm" else d
    numel = {"attn_norm": norm, "attn.wqkv": d * (H + 2 * K) * hd, "attn.wo": H * hd * d,
             "mlp_norm": norm, "mlp.w1": d * f, "mlp.w3": d * f if m.glu else 0,
             "mlp.w2": f * d}
    bias = (H * hd + 2 * K * hd + d + (0 if m.glu else f) + d) if m.bias else 0
    if m.n_experts:  # the largest block, a MoE one (FSDP gathers it whole): every expert's
        # matrices split over tp as the dense MLP's would be, the router whole
        e = d * m.expert_width * (m.n_experts / ep + m.n_shared_experts)
        numel.update({"mlp.w1": e, "mlp.w3": e, "mlp.w2": e})
        bias += tp * d * m.n_experts
    return float(sum(tp_elements(f"{module}.weight", numel[module], tp)
                     for module in BLOCK_PLAN) + bias / tp)


def lora_params(m: ModelSpec, rank: int, tp: int = 1,
                targets: tuple[str, ...] = tuple(DEFAULT_LORA_TARGETS.split(","))) -> float:
    """LoRA adapters (A: r x in, B: out x r) on the `targets` of every block (llmtk train's
    --lora-targets, its default: every linear layer but the routed experts): q, k, v, o
    and gate, up, down on a dense layer's MLP, on a MoE layer's shared experts (none
    without them), and with `experts` one adapter per routed expert on each of its
    w1, w3, w2. With `tp`, one tensor-parallel rank's share as llmtk train splits them
    with their base: on a column-wise base B split and A whole, on a row-wise one (wo, the
    MLP's out-projection) A split and B whole; an expert's adapters split on their side
    of the expert's hidden width (placement.EXPERT_ADAPTER_DIM). Under --ep the experts'
    adapters are counted whole, as the experts' weights are here (model_state_bytes
    splits them: expert_adapter_params)."""
    from llmtk.compute.placement import BLOCK_PLAN, adapter_split

    d, H, K, hd = m.d_model, m.n_head, m.kv_heads, m.hd

    def adapters(pairs) -> float:  # (target, module, in, out) -> elements per rank / rank
        total = 0.0
        for target, module, i, o in pairs:
            if target in targets:
                a_split, b_split = adapter_split(BLOCK_PLAN[module])
                total += i / (tp if a_split else 1) + o / (tp if b_split else 1)
        return total

    def mlp(f: int) -> list:
        return [("gate", "mlp.w1", d, f), *([("up", "mlp.w3", d, f)] if m.glu else []),
                ("down", "mlp.w2", f, d)]

    attn = adapters([("q", "attn.wqkv", d, H * hd), ("k", "attn.wqkv", d, K * hd),
                     ("v", "attn.wqkv", d, K * hd), ("o", "attn.wo", H * hd, d)])
    dense = attn + adapters(mlp(m.ffn))
    shared = m.n_shared_experts * m.expert_width
    moe = attn + (adapters(mlp(shared)) if shared else 0.0)
    if "experts" in targets:  # w1, w3: A (r, C) whole, B (H, r) by H; w2: A by H, B whole
        moe += m.n_experts * 3 * (d + m.expert_width / tp)
    n_moe = m.moe_layers
    return float(rank * ((m.n_layer - n_moe) * dense + n_moe * moe))


def expert_adapter_params(m: ModelSpec, rank: int | None, tp: int = 1,
                          targets: tuple[str, ...] = ()) -> float:
    """Of lora_params, the routed experts' adapters (`experts` among the targets; 0
    without LoRA): llmtk train splits them over --ep with the experts they adapt."""
    if not rank or "experts" not in targets:
        return 0.0
    return lora_params(m, rank, tp=tp, targets=("experts",))


def expert_params(m: ModelSpec) -> float:
    """The routed experts' parameters of the whole model (what ep splits): three SwiGLU
    matrices per expert per MoE layer; 0 for a dense model."""
    return float(m.moe_layers * m.n_experts * 3 * m.d_model * m.expert_width)
