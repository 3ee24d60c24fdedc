"""Activation memory of the llmtk training model (eager PyTorch, CPU, fp32), and what
`llmtk estimate` predicts for one of its training steps; `llmtk estimate --measure` checks
both against a real step (llmtk.train.measure).

The prediction for activations (`llmtk_saved_bytes`) describes what this model saves,
not Korthikanti's GPT-3 block; the difference is spelled out in docs/estimate.md and
printed next to it. A model config is read by its attributes (n_layer, d_model, hidden,
kv_heads, ...), so nothing here imports llmtk.train or torch.
"""

from __future__ import annotations

from dataclasses import replace

from llmtk.compute.models import ModelSpec
from llmtk.compute.placement import stage_layers
from llmtk.estimate import memory


def llmtk_saved_bytes(cfg, batch: int, seq: int, elem: int = 4,
                      recompute: str = "selective", lora_rank: int | None = None,
                      lora_parts: float = 7, tp: int = 1, weight_copies: bool = False,
                      residual: int = 4, cp: int = 1,
                      lora_experts: bool = False, ep: int = 1) -> dict[str, float]:
    """Bytes autograd keeps for backward in `llmtk.train.model.gpt.GPT` on one rank: eager,
    fp32 (elem=4) or under bf16 autocast (elem=2), with tp-way tensor parallelism as
    `llmtk train --tp` runs it (sequence-parallel norms).

    Per layer and token, in elements of C = d_model, f = MLP width, H/K heads/kv heads:
    - each RMSNorm (F.rms_norm on x.float(), decomposed): its fp32 input and x·rstd (2C,
      + rstd); under tp these are the rank's 1/tp of the sequence. Its output (C) is kept
      whole (gathered over the sequence for the matmuls); under autocast as the bf16 cast
      the matmul saves, one per matmul that reads it: 1 for the fused qkv, 2 for the MLP
      (w1 and w3 each cast it);
    - attention: q and k after rotary (new tensors: C and K·D), the SDPA output and the
      w_o input (a copy made by reshape): 3C + K·D; v is a view into the fused qkv output,
      which stays alive whole (C + 2·K·D) — SDPA's enable_gqa broadcasts K/V without
      copies; + SDPA's fp32 log-sum-exp, H per token; all split over tp by heads;
    - SwiGLU: w1 x, w3 x, silu(w1 x) and the product: 4f, split over tp.
    Once per model: the token ids (int64), the final norm's fp32 input and x·rstd (2C +
    rstd, split over tp; its output is not kept), and the chunked cross-entropy's
    gradients computed in forward: d/dh (C per token, whole) and d/dW of the padded head
    (fp32, Vp·C, a 1/tp row shard) plus its token count.

    cp: context parallelism as `llmtk train --cp` runs it (Llama 3's all-gather variant,
    llmtk/train/layout/context_parallel.py): every per-token term above counts the rank's
    seq/cp tokens, and each layer keeps its cp group's gathered K and V for backward,
    2·K·D per token of the whole sequence (split over tp by heads), and no longer the
    fused qkv output and the rotated keys one process keeps (C + 3·K·D per local token:
    the gather stacks its own copies of k and v). The one cp formula: `llmtk estimate` and
    `llmtk train --dry-run` both price cp with it, measured on CPU within +2.5% (fp32 and
    bf16 with GQA, tests/test_train_cp.py; not counted: the int64 index putting the
    gathered keys in order, 8·seq bytes a forward, the CPU's fp32 lower-right causal mask
    per chunk, which GPU kernels do not build, and --doc-mask's bool masks, B x L x
    (c+1)L per chunk of length L). With recompute="full" (the
    model's activation checkpointing) a layer keeps only its fp32 input, C per token (the
    rank's 1/tp of the sequence). SDPA never stores the attention scores, so "none" =
    "selective". weight_copies: bf16 autocast over fp32 weights (one process, DDP) saves
    the bf16 cast of every matmul weight it uses, 2 bytes per block matmul parameter
    (FSDP2 gathers bf16 weights instead: nothing to cast); not under full recompute,
    where the casts happen again in backward. residual: bytes of the residual stream, 4
    (fp32 weights, fp32 embedding output), or 2 under FSDP2 in bf16, whose embedding is
    gathered in bf16: then the norms' outputs are bf16 already (one per norm), a
    checkpointed layer's input is bf16, and each layer keeps two per-layer constants:
    its norms' weight.float() copies (2C fp32) and the rotary tables cast to bf16.

    With lora_rank r (llmtk train's LoRA, base frozen, `lora_parts` adapter inputs kept
    per token per layer, 7 = q,k,v,o,gate,up,down on a dense model, the layers' mean on a
    MoE one: llmtk.train.model.lora.adapted_per_token; no dropout; fp32): each adapter keeps A·x,
    r per token; a norm with a frozen weight does not keep x·rstd (-C per norm); the
    first layer's attention norm needs no gradient at all (its input, the frozen
    embedding's output, has none: -C - rstd); no token ids (the embedding gets no
    gradient), and the frozen head gets no d/dW. Measured exact on CPU (tests/test_sft.py,
    tests/test_estimate_measure.py, tests/test_train_memory.py, docs/estimate.md).
    """
    # MoE: the width a token passes through (top_k + shared experts), the layers' mean,
    # and moe_layer_bytes for what a MoE layer keeps beyond a dense MLP of that width
    C, f = cfg.d_model, getattr(cfg, "active_ffn", cfg.hidden)
    Vp = getattr(cfg, "padded_vocab", cfg.vocab_size)
    H, K, D = cfg.n_head, cfg.kv_heads, cfg.head_dim
    t = tp
    n = batch * seq / cp  # the rank's tokens
    # The MLP norm's output: one tensor both MLP matmuls read, unless autocast casts an
    # fp32 one to bf16 for each of them.
    casts = 2 if elem < residual else 1
    norm_split = 2 * C * 4 + 4  # fp32 input and x·rstd, rstd
    norms = 2 * norm_split / t + (1 + casts) * C * elem
    attn = ((4 * C + 3 * K * D) * elem + 4 * H) / t  # + the fp32 log-sum-exp
    mlp = 4 * f * elem / t
    gathered = 0.0
    if cp > 1:  # whole-sequence K, V kept; the local qkv output and rotated k are not
        gathered = (batch * seq * 2 * K * D - n * (C + 3 * K * D)) * elem / t
    first = 0  # the first layer's difference from the others
    if lora_rank:
        norms -= 2 * C * 4 / t  # frozen norm weights: x·rstd is not kept
        per_layer_lora = lora_parts * lora_rank * elem  # A·x of every adapter
        per_layer = n * (norms + attn + mlp + per_layer_lora) + gathered
        first = -n * (C * 4 + 4) / t
    else:
        per_layer = n * (norms + attn + mlp) + gathered
    per_layer += moe_layer_bytes(cfg, n, elem, t, ep)
    if lora_rank and lora_experts:
        per_layer += expert_adapter_bytes(cfg, n, lora_rank, elem, t)
    copies = 0.0
    if weight_copies and recompute != "full":
        copies = 2.0 * (C * (H * D + 2 * K * D) + H * D * C + 3 * C * f) / t
    per_layer += copies
    if residual < 4:  # bf16 weights (FSDP2): each norm's weight.float(), the rotary tables
        per_layer += 2 * C * 4 + 2 * seq / cp * (D // 2) * residual  # cast to bf16
    # Under full recompute a layer's backward first runs its forward again: for that
    # moment one layer holds everything it would have saved (the peak's transient; at
    # 128K context one llama3-8b layer is ~31 GB, as much as all the checkpointed inputs)
    recompute_peak = per_layer if recompute == "full" else 0.0
    if recompute == "full":
        per_layer, first = n * C * residual / t, 0
    inputs = 0 if lora_rank else n * 8 + 0.0  # token ids (int64): the embedding's gradient
    if lora_rank:  # the final norm's input and rstd, d/dh, the token count
        head = n * ((C * 4 + 4) / t + C * elem) + 8
    else:
        head = n * (norm_split / t + C * elem) + Vp * C * 4 / t + 8  # + the token count
    if residual < 4:
        head += C * 4  # the final norm's weight.float()
    layers = cfg.n_layer * per_layer + first
    return {"per_layer": per_layer, "layers": layers, "inputs": inputs, "head": head,
            "once": inputs + head, "total": layers + inputs + head,
            "recompute_peak": recompute_peak}


def moe_layer_bytes(cfg, n: int, elem: int = 4, tp: int = 1, ep: int = 1) -> float:
    """What a mixture-of-experts layer (llmtk.train.model.moe) keeps for n tokens beyond a
    dense SwiGLU MLP of its active width, averaged over the layers as active_ffn is: per
    (token, expert) assignment its copy of the token and its expert output (2C, whole on
    every tp rank: the layer gathers the sequence), the routing-weighted hidden activation
    (H, split over tp) and four int64 indices (its expert, its token, its sorted position,
    its kept position); per token the router's fp32 scores (E) and the weights' sum, with
    the z-loss its logits and log-sum-exp too; per layer the expert counts (12 bytes an
    expert), 16 bytes with the balance loss. Dropless (a capacity keeps fewer rows).
    Measured exact on CPU in fp32, one process (tests/test_train_ep.py). Under --ep a rank
    computes the rows its experts received instead of its own: the same on average, and
    expert_row_bytes more for each row above the mean. The dispatch keeps more: per
    assignment the outputs that came back (C, whole under tp: index_add keeps its source,
    and the expert's rank keeps its own copy of them) and the received row's place in
    expert order (int64, counted at the mean); the counts are of the rank's E/ep
    experts. Measured exact on CPU in fp32 under ep 2 and ep 2 x tp 2, each rank at its
    own routing (tests/test_train_ep.py)."""
    experts = getattr(cfg, "n_experts", 0)
    if not experts:
        return 0.0
    k, h = cfg.top_k, cfg.expert_ffn
    token = k * (2 * cfg.d_model * elem + h * elem / tp + 32) + experts * 4 + 4
    layer = 12 * experts / ep
    if ep > 1:
        token += k * (cfg.d_model * elem + 8)
    if getattr(cfg, "router_z_loss", 0):
        token += experts * 4 + 4
    if getattr(cfg, "router_aux_loss", 0):
        layer += 16
    return (n * token + layer) * cfg.moe_layers / cfg.n_layer


def expert_row_bytes(cfg, elem: int = 4, tp: int = 1) -> float:
    """What a rank keeps for each row its experts compute under --ep
    (llmtk.train.layout.expert_parallel.AllToAll), in one MoE layer: the row and its
    expert output (2C, whole on every tp rank; putting the outputs back in arrival order
    keeps them), the hidden layer's five intermediates (w1 x, w3 x, silu, their product
    and the routing-weighted product: 5H, split over tp), the row's place in expert order
    (int64) and its routing weight (which travels as one more column of the rows, in
    their dtype). Routing decides how many rows a rank receives; moe_layer_bytes counts
    the mean, N*K a layer, so a rank that receives R rows over the model's MoE layers
    keeps (R - mean) * this beyond the dry run's count. Measured exact on CPU in fp32:
    the bytes of two ranks of one run differ by this times their rows' difference
    (tests/test_train_ep.py)."""
    if not getattr(cfg, "n_experts", 0):
        return 0.0
    return 2 * cfg.d_model * elem + 5 * cfg.expert_ffn * elem / tp + 8 + elem


def expert_adapter_bytes(cfg, n: int, rank: int, elem: int = 4, tp: int = 1) -> float:
    """What LoRA's `experts` target (llmtk.train.model.lora.LoRAExperts) adds to a MoE
    layer's saved activations for n tokens, the layers' mean: per (token, expert)
    assignment each of its three adapters' A·x (3r) and the inputs their A's gradients
    need, which the frozen base's matmuls would not keep (the token's copy, C, and the
    expert's hidden activation, H, split over tp); per layer each adapter matmul's int64
    per-expert counts (3 x 8 bytes an expert). Measured exact on CPU in fp32, one process,
    as the difference from the same model without the target (tests/test_train_moe.py)."""
    experts = getattr(cfg, "n_experts", 0)
    if not experts:
        return 0.0
    token = cfg.top_k * (3 * rank + cfg.d_model + cfg.expert_ffn / tp) * elem
    return (n * token + 24 * experts) * cfg.moe_layers / cfg.n_layer


def in_flight(pp: int, pp_rank: int, n_micro: int, local_stages: int = 1) -> float:
    """How many microbatches' activations pipeline rank `pp_rank` holds at its peak, in
    units of all its layers' activations for one microbatch. 1F1B: stage r runs pp-r-1
    warm-up forwards before its first backward, so it holds min(pp - r, n_micro) (the
    first stage the most, the last one). Interleaved 1F1B (`local_stages` per rank): the
    schedule's own warm-up count (torch.distributed.pipelining: (v-1) microbatches per
    round plus 2 per later rank) plus one, of chunks each about 1/v of the rank's layers."""
    if pp == 1:
        return 1.0
    if local_stages == 1:
        return float(min(pp - pp_rank, n_micro))
    per_round = n_micro // max(1, n_micro // pp)
    warmup = (local_stages - 1) * per_round + 2 * (pp - 1 - pp_rank)
    return min(warmup + 1, n_micro * local_stages) / local_stages


def stage_bytes(a: dict, n_layer: int, layers: int, *, embedding: bool, head: bool,
                pp: int, n_micro: int, pp_rank: int, local_stages: int = 1) -> float:
    """Pipeline rank `pp_rank`'s share of `a` (llmtk_saved_bytes of the whole model): its
    layers, the token ids on the first stage (with LoRA's lighter first layer), times the
    microbatches it holds in flight (in_flight), and the head on the last stage (its loss's
    backward runs as soon as its forward: one microbatch). What forward saves: the layer
    recomputed in backward under full recompute is a["recompute_peak"], on top."""
    act = layers * a["per_layer"]
    if embedding:
        act += a["inputs"] + (a["layers"] - n_layer * a["per_layer"])
    act *= in_flight(pp, pp_rank, n_micro, local_stages)
    if head:
        act += a["head"]
    return act


def llmtk_busiest_bytes(m: ModelSpec, micro_batch: int, *, tp: int, pp: int, n_micro: int,
                        recompute: str, bf16: bool, fsdp: bool,
                        lora_rank: int | None = None, cp: int = 1) -> tuple[float, float]:
    """(the llmtk model's activations on its busiest rank for a layout, the layer
    recomputed in backward under full recompute, 0 otherwise), as `llmtk train --dry-run`
    counts them: `--solve layout` prices layouts for llmtk train with this.
    fsdp: the run's weights are FSDP2's (bf16 gathers), not one copy under autocast.
    lora_rank: adapters on all seven projections (llmtk train's default targets)."""
    from types import SimpleNamespace

    cfg = SimpleNamespace(d_model=m.d_model, hidden=m.ffn, active_ffn=m.active_ffn,
                          vocab_size=m.vocab_size,
                          n_head=m.n_head, kv_heads=m.kv_heads, head_dim=m.hd,
                          n_layer=m.n_layer)
    a = llmtk_saved_bytes(cfg, micro_batch, m.seq_len, elem=2 if bf16 else 4,
                          recompute=recompute, tp=tp, weight_copies=bf16 and not fsdp,
                          residual=2 if bf16 and fsdp else 4, lora_rank=lora_rank, cp=cp)
    per_stage = stage_layers(m.n_layer, pp)  # llmtk train's default split
    busiest = max(stage_bytes(a, m.n_layer, layers, embedding=s == 0, head=s == pp - 1, pp=pp,
                              n_micro=n_micro, pp_rank=s) for s, layers in enumerate(per_stage))
    return busiest, a["recompute_peak"]


def korthikanti_style_bytes(cfg, batch: int, seq: int, elem: int = 4,
                            recompute: str = "selective") -> float:
    """The big-model formula (memory.activation_bytes) applied to this shape, for contrast."""
    spec = replace(spec_of(cfg), seq_len=seq)
    return memory.activation_bytes(spec, batch, par=memory.Parallel(),
                                   recompute="full" if recompute == "full" else "selective",
                                   elem=elem)


def spec_of(cfg) -> ModelSpec:
    """estimate's view of a llmtk.train ModelConfig (duck-typed: no train import)."""
    return ModelSpec("measured", cfg.n_layer, cfg.d_model, cfg.n_head, cfg.vocab_size,
                     cfg.seq_len, n_kv_head=cfg.kv_heads, ffn_hidden=cfg.hidden,
                     tie_embeddings=True)


def predict(cfg, params: int, batch: int, recompute: str = "selective",
            lora_rank: int | None = None) -> dict:
    """What `llmtk estimate` predicts for the same step (with --lora-rank: the adapters'
    parameters, gradients and AdamW states on top of the frozen weights). params: the
    model's exact parameter count (llmtk.train.model.config.count_params)."""
    n = params
    trainable = memory.lora_params(spec_of(cfg), lora_rank) if lora_rank else None
    states = memory.model_state_bytes(n + (trainable or 0), precision="fp32", optimizer="adamw",
                                      par=memory.Parallel(), trainable=trainable)
    return {"params": n, "weights": states["weights"], "gradients": states["gradients"],
            "optimizer": states["optimizer"],
            "activations": llmtk_saved_bytes(cfg, batch, cfg.seq_len, recompute=recompute,
                                             lora_rank=lora_rank)["total"],
            "activations_korthikanti_style": korthikanti_style_bytes(cfg, batch, cfg.seq_len,
                                                                     recompute=recompute)}
