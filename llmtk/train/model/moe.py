"""The mixture-of-experts feed-forward layer: E routed SwiGLU experts, a token-choice top-k
router, optional shared experts, and the two ways the field balances the experts' load.

Routing (Mixtral, Qwen3-MoE, DeepSeek-V3): the router is one linear map d_model -> E, run
in fp32 (bf16 logits flip near-tied top-k choices); its scores are softmax(logits)
(Mixtral, Qwen3) or sigmoid(logits) (DeepSeek-V3, `router_score`). Each token goes to the
K experts of highest score (+ the balancing bias below, for the choice only), and their
outputs are summed with the chosen scores renormalised to 1 (unless `router_norm_topk` is
off: Qwen3-MoE's norm_topk_prob false weights them by the scores themselves). Dropless by
default: every token reaches its K experts. With `capacity_factor` c an expert takes at most
ceil(c * N * K / E) of the N tokens' assignments of a micro-batch, the earliest first
(Switch); a dropped assignment adds nothing (the token keeps its residual and its other
experts).

Grouped compute: the N*K (token, expert) assignments are sorted by expert (a stable sort,
so tokens keep their order within an expert: deterministic), each expert's rows are then
one contiguous slice, and one batched matmul (`torch._grouped_mm`, with the slice ends as
offsets) runs every expert's slice against its own weights. Where that kernel does not
take the tensors (fp64, a width whose rows are not 16-byte aligned, a GPU before Hopper)
the fallback is a loop over the E experts, each one matmul over its contiguous slice: the
same arithmetic, E kernel launches instead of one, and a host sync to read the slice sizes.

Balancing:
- auxiliary loss (Switch / GShard, `router_aux_loss` a): a * E * sum_e f_e * P_e over a
  micro-batch, f_e the share of the assignments that chose expert e, P_e its mean score
  (sigmoid scores normalised per token first, as DeepSeek-V3's sequence-wise loss does);
  1 * a at a uniform load.
- auxiliary-loss-free bias (DeepSeek-V3, `router_bias_rate` r): a per-expert bias b added
  to the scores for the choice only (the weights stay the scores), updated after every
  optimizer step by b_e += r * sign(mean load - load_e) (`router_bias_rule` "sign"; or
  "proportional": r * clip((mean load - load_e) / mean load, -1, 1)), the load summed over
  the step's micro-batches and every data-parallel rank. Every rank must hold the same b,
  so the loads are reduced before the update; the layer only counts
  (`tokens_per_expert`, summed over micro-batches in its forward) and `Balancer` below
  appends every layer's counts to the step's one existing all-reduce (llmtk.train.optim:
  [loss, squared grad norms]): no extra collective, no host sync, and the update is
  skipped with the step when it is not finite.
  Why not update in the layer at the next forward: a layer cannot tell the first
  micro-batch of a step from the next one, and a collective inside a forward would have to
  be matched by every rank in the same order (pipeline stages run different layers).
  Activation checkpointing runs each forward twice: both counts double, and neither the
  sign of (mean - load), nor (mean - load) / mean, nor a share changes.
- router z-loss (ST-MoE, `router_z_loss` z): z * mean(logsumexp(logits)^2).
The auxiliary terms reach the gradient through the model's loss (GPT.forward), whose value
stays the cross-entropy alone, so loss curves compare with dense runs.

Shapes: N tokens (B*T), C d_model, E experts, K experts per token, H an expert's hidden
width, M kept assignments (N*K when dropless).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def _wide(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float64 if x.dtype == torch.float64 else torch.float32)


def grouped_mm_ok(x: torch.Tensor, w: torch.Tensor) -> bool:
    """Whether torch._grouped_mm takes x (M, in) against w (E, out, in) here: fp32/bf16
    (bf16 only on CUDA, sm90+, and under torch.compile), rows 16-byte aligned (measured on
    torch 2.13's CPU kernel: other widths raise)."""
    if not hasattr(torch, "_grouped_mm") or x.dtype != w.dtype:
        return False
    if torch.compiler.is_compiling() and x.dtype != torch.bfloat16:
        return False  # torch 2.13's fake (tracing) kernel takes bf16 only
    if x.device.type == "cuda":
        if x.dtype != torch.bfloat16 or torch.cuda.get_device_capability(x.device) < (9, 0):
            return False
    elif x.device.type != "cpu" or x.dtype not in (torch.float32, torch.bfloat16):
        return False
    size = x.element_size()
    return all(n * size % 16 == 0 for n in (w.shape[1], w.shape[2]))


def expert_matmul(x: torch.Tensor, w: torch.Tensor, counts: torch.Tensor,
                  grouped: bool | None = None) -> torch.Tensor:
    """x (M, in), rows sorted by expert (counts[e] rows for expert e), times each expert's
    w[e].T (w: (E, out, in)) -> (M, out). `grouped`: force the kernel (True) or the
    fallback loop (False); None: the kernel where it takes the tensors."""
    if grouped is None:
        grouped = grouped_mm_ok(x, w)
    if grouped:
        offs = counts.cumsum(0).to(torch.int32)  # (E,) each expert's slice end
        return torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)
    # The fallback: one matmul per expert over its contiguous slice (not per token).
    pieces = x.split(counts.tolist())
    return torch.cat([p @ w[e].t() for e, p in enumerate(pieces)])  # (M, out)


def local(t: torch.Tensor, grad_partial: bool = False) -> torch.Tensor:
    """The piece of `t` this rank holds: a DTensor's local tensor (tensor or expert
    parallel layouts, llmtk.train.layout), a plain tensor as it is. `grad_partial`: every
    rank of `t`'s mesh computes with the same values, but its gradient is only its part
    of the sum (a tp rank's experts see 1/tp of each hidden layer), so the gradient that
    comes back is marked Partial and summed over the mesh where it is reduced."""
    if not hasattr(t, "to_local"):
        return t
    if not grad_partial:
        return t.to_local()
    from torch.distributed.tensor import Partial

    return t.to_local(grad_placements=[Partial()] * len(t.placements))


class _GradScale(torch.autograd.Function):
    """x in forward; the gradient times `scale` in backward."""

    @staticmethod
    def forward(ctx, x, scale: float):
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.scale, None


def grad_scaled(x: torch.Tensor, scale: float) -> torch.Tensor:
    return x if scale == 1.0 else _GradScale.apply(x, scale)


class _CarryAux(torch.autograd.Function):
    """x in forward; in backward x's gradient, and a gradient of 1 for `aux` (Megatron-Core's
    MoEAuxLossAutoScaler): the auxiliary losses of a pipeline stage before the last reach
    the gradient in that stage's own backward, started from its output's gradient, without
    crossing the stage boundary as values."""

    @staticmethod
    def forward(ctx, x, aux):
        ctx.save_for_backward(aux)
        # A copy, not a view: FSDP2 hooks the stage's output for its backward, and warns
        # that an in-place op on a view would lose the hook. (One (B, T, C) copy per stage
        # and microbatch, beside the blocks' many saved activations of that size.)
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        (aux,) = ctx.saved_tensors
        return grad, torch.ones_like(aux)


def carry_aux(x: torch.Tensor, aux: torch.Tensor | None) -> torch.Tensor:
    """x, whose backward also gives `aux` (a 0-dim loss, or None: x as it is) the gradient
    it would have as a term of the model's loss (the caller scales it as the loss is)."""
    return x if aux is None else _CarryAux.apply(x, aux)


def layers_aux(blocks, training: bool) -> torch.Tensor | None:
    """The sum of the auxiliary losses of the MoE layers among `blocks` in their last
    forward (0-dim), or None: no MoE layer, or not a training forward."""
    aux = [b.mlp.aux for b in blocks if isinstance(b.mlp, MoE) and b.mlp.aux is not None]
    if not aux or not training:
        return None
    return torch.stack(aux).sum()


class GroupedExperts(nn.Module):
    """E SwiGLU experts, stored stacked as nn.Linear weights are, (E, out, in):
    w1 gate and w3 up (E, H, C), w2 down (E, C, H).

    Under expert parallelism (llmtk.train.layout.expert_parallel) each weight is a DTensor
    whose local piece holds E/ep of the experts (and under tp 1/tp of their hidden width),
    and `dispatch` sends each row to the rank holding its expert and brings the outputs
    back in the rows' order; otherwise it is None and the rows are computed here."""

    def __init__(self, n: int, d: int, hidden: int):
        super().__init__()
        self.w1 = nn.Parameter(torch.empty(n, hidden, d))
        self.w3 = nn.Parameter(torch.empty(n, hidden, d))
        self.w2 = nn.Parameter(torch.empty(n, d, hidden))
        self.grouped: bool | None = None  # None: the kernel where it works (tests force)
        self.dispatch = None  # expert parallel: expert_parallel.AllToAll
        self.grad_scale = 1.0  # expert parallel: 1/ep (expert_parallel.apply_ep says why)

    def forward(self, x: torch.Tensor, counts: torch.Tensor,
                scale: torch.Tensor | None = None) -> torch.Tensor:
        """x (M, C) sorted by expert, counts (E,), scale (M,) each row's routing weight
        -> (M, C), scale[m] * expert(x[m]) (applied to the hidden activation: the down
        projection is linear, and H is the narrower side of a fine-grained expert)."""
        if self.dispatch is not None:
            return self.dispatch(self.compute, x, counts, scale)
        return self.compute(x, counts, scale)

    def compute(self, x: torch.Tensor, counts: torch.Tensor,
                scale: torch.Tensor | None) -> torch.Tensor:
        """forward's rows on this rank's experts: counts (E_local,) rows each."""
        w1, w3, w2 = (grad_scaled(local(w), self.grad_scale) for w in (self.w1, self.w3, self.w2))
        if torch.is_autocast_enabled(x.device.type):  # the kernel is not on autocast's list
            dt = torch.get_autocast_dtype(x.device.type)
            x, w1, w3, w2 = x.to(dt), w1.to(dt), w3.to(dt), w2.to(dt)
        h = F.silu(self.project(x, "w1", w1, counts)) \
            * self.project(x, "w3", w3, counts)  # (M, H)
        if scale is not None:
            h = h * scale.unsqueeze(-1).to(h.dtype)
        return self.project(h, "w2", w2, counts)  # (M, C)

    def project(self, x: torch.Tensor, name: str, w: torch.Tensor,
                counts: torch.Tensor) -> torch.Tensor:
        """x (M, in) sorted by expert through each expert's weight `name` (w, this rank's
        local (E, out, in), in compute's dtype) -> (M, out). LoRA's adapters add to it
        (lora.LoRAExperts)."""
        return expert_matmul(x, w, counts, self.grouped)


class SharedExperts(nn.Module):
    """S shared experts, always on: one SwiGLU MLP of width S * H (DeepSeek's layout)."""

    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(d, hidden, bias=False)
        self.w3 = nn.Linear(d, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MoE(nn.Module):
    """The layer (see the module docstring). `aux` holds the last forward's auxiliary
    loss (a 0-dim tensor, 0 when both coefficients are 0) for GPT.forward to add."""

    def __init__(self, cfg):
        super().__init__()
        self.n, self.k = cfg.n_experts, cfg.top_k
        self.score, self.norm_topk = cfg.router_score, cfg.router_norm_topk
        self.aux_coef, self.z_coef = cfg.router_aux_loss, cfg.router_z_loss
        self.capacity_factor = cfg.capacity_factor
        self.router = nn.Linear(cfg.d_model, self.n, bias=False)
        self.experts = GroupedExperts(self.n, cfg.d_model, cfg.expert_ffn)
        self.shared = (SharedExperts(cfg.d_model, cfg.n_shared_experts * cfg.expert_ffn)
                       if cfg.n_shared_experts else None)
        # The balancing bias is state (checkpointed, the same on every rank); the counts
        # since the last optimizer step are not (the step consumes them: Balancer).
        self.register_buffer("expert_bias", torch.zeros(self.n))
        self.register_buffer("tokens_per_expert", torch.zeros(self.n), persistent=False)
        self.register_buffer("dropped", torch.zeros(()), persistent=False)
        self.aux: torch.Tensor | None = None
        # Under tp every rank computes the auxiliary losses whole, and their gradients are
        # summed over the tp group with the experts' partial ones: 1/tp each (apply_tp).
        self.aux_scale = 1.0
        # Under cp the ranks of this process group hold parts of the same micro-batch: the
        # balance loss's shares f_e are counted over all of them (count_over).
        self.count_group = None

    def route(self, h: torch.Tensor):
        """h (N, C) -> (logits (N, E) fp32, scores (N, E), chosen (N, K), weights (N, K))."""
        with torch.autocast(h.device.type, enabled=False):
            w = local(self.router.weight, grad_partial=True)  # tp: whole on every rank
            logits = F.linear(_wide(h), _wide(w))  # (N, E)
        scores = logits.softmax(-1) if self.score == "softmax" else logits.sigmoid()
        # The bias steers the choice only; the weights are the scores themselves.
        choice = scores.detach() + self.expert_bias.to(scores.dtype)
        chosen = choice.topk(self.k, dim=-1).indices  # (N, K)
        weights = scores.gather(1, chosen)  # (N, K)
        if self.norm_topk:
            weights = weights / weights.sum(-1, keepdim=True)
        return logits, scores, chosen, weights

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, C) -> (B, T, C). Under tp (apply_tp) x is the whole sequence, a
        Replicate DTensor, on every rank of the group; each computes every token's routing
        and its 1/tp of each expert's hidden width, so its output is a partial sum (the
        caller's reduce-scatter adds them), and so is x's gradient."""
        B, T, C = x.shape
        shared_in = x.reshape(-1, C)  # (N, C) tp: a DTensor for the shared experts' split
        h = local(shared_in, grad_partial=True)  # (N, C)
        N, K, E = h.shape[0], self.k, self.n
        logits, scores, chosen, weights = self.route(h)
        flat = chosen.reshape(-1)  # (N*K,) expert of each assignment, token-major
        counts = torch.bincount(flat, minlength=E)  # (E,)
        order = flat.argsort(stable=True)  # (N*K,) assignments grouped by expert
        kept, kept_counts = order, counts
        if self.capacity_factor is not None:
            cap = math.ceil(self.capacity_factor * N * K / E)
            starts = counts.cumsum(0) - counts  # (E,) first sorted row of each expert
            rank = torch.arange(N * K, device=h.device) - starts[flat[order]]  # within expert
            kept = order[rank < cap]  # (M,) the earliest `cap` of each expert
            kept_counts = counts.clamp(max=cap)
        token = kept // K  # (M,) the token of each kept assignment, grouped by expert
        out = self.experts(h[token], kept_counts, weights.reshape(-1)[kept])  # (M, C)
        # Each (weighted) output added into its token's row: on the CPU index_add adds in
        # this (expert-sorted, stable) order, so the sum is the same in every run and
        # layout; a GPU adds atomically (fast, not bit-reproducible).
        M = kept.shape[0]
        y = torch.zeros(N, C, dtype=out.dtype, device=h.device).index_add(0, token, out)
        if self.shared is not None:
            y = y + local(self.shared(shared_in))  # tp: a partial sum too
        if self.training and torch.is_grad_enabled():
            with torch.no_grad():  # this micro-batch's load, for the step's bias update
                self.tokens_per_expert += counts.to(self.tokens_per_expert.dtype)
                self.dropped += N * K - M
        self.aux = self.aux_loss(logits, scores, *self._balance_counts(counts, N * K)) \
            * self.aux_scale
        return y.view(B, T, C).to(x.dtype)

    def _balance_counts(self, counts: torch.Tensor, NK: int):
        """counts (E,) of this rank's NK = N * K assignments -> (counts, their total) for the
        balance loss's shares. Under cp (count_group) the micro-batch's sequences are split over
        the group: its counts are summed over it (one all-reduce of E numbers, training
        forwards only), so that f_e is the whole micro-batch's, as in one process; P_e stays
        the mean over this rank's tokens, and the gradients' average over the cp ranks
        (FSDP2 over dp_shard x cp, equal token counts) makes it the whole one's."""
        if self.count_group is None or not (self.aux_coef and self.training
                                            and torch.is_grad_enabled()):
            return counts, NK
        import torch.distributed as tdist

        total = counts.to(torch.float64)
        tdist.all_reduce(total, group=self.count_group)
        return total, total.sum()

    def aux_loss(self, logits, scores, counts, total) -> torch.Tensor:
        """The balance loss and the z-loss of one micro-batch (0-dim, fp32); counts (E,)
        the assignments per expert, `total` their sum (_balance_counts)."""
        aux = logits.new_zeros(())
        if self.aux_coef:
            probs = scores if self.score == "softmax" else scores / scores.sum(-1, keepdim=True)
            share = counts.to(probs.dtype) / total  # f_e (no gradient: a count)
            aux = aux + self.aux_coef * self.n * (share * probs.mean(0)).sum()
        if self.z_coef:
            aux = aux + self.z_coef * torch.logsumexp(logits, -1).square().mean()
        return aux

    @torch.no_grad()
    def init_weights(self, normal, std: float, residual_std: float) -> None:
        """normal(param, std) draws a whole parameter (model.init_whole_); the router and
        the shared experts are Linears, initialised by the model's loop."""
        normal(self.experts.w1, std)
        normal(self.experts.w3, std)
        normal(self.experts.w2, residual_std)
        self.expert_bias.zero_()
        self.tokens_per_expert.zero_()
        self.dropped.zero_()


def count_over(model, group) -> None:
    """Context parallelism: the MoE layers of `model` count the balance loss's shares over
    the process `group` (the cp ranks, which split each micro-batch's sequences)."""
    for m in model.modules():
        if isinstance(m, MoE):
            m.count_group = group


class Balancer:
    """The step's side of the balancing: every MoE layer's counts since the last step as
    one vector for the optimizer's all-reduce, the bias update from the reduced counts,
    and the load since the last metrics row.

    `mcfg` (the ModelConfig): the vector spans the whole model's MoE layers, those of
    `model` at their places and zeros for the rest. Under pipeline parallelism `model` is
    a stage's (it holds some of the layers, or none), the vector has the same length on
    every rank, the all-reduce sums each layer's counts over the ranks that run it, each
    stage moves its own layers' bias, and every rank's metrics row has every layer's load."""

    def __init__(self, model, rate: float, mcfg):
        held = {name: m for name, m in model.named_modules() if isinstance(m, MoE)}
        self.n = getattr(mcfg, "n_experts", 0)
        self.names = [f"layers.{i}.mlp" for i in range(mcfg.n_layer) if mcfg.is_moe(i)] \
            if self.n else []
        self.layers = {name: held.get(name) for name in self.names}  # None: another stage's
        self.capped = bool(self.n) and mcfg.capacity_factor is not None
        self.rate = rate
        self.rule = getattr(mcfg, "router_bias_rule", "sign")
        self.window: torch.Tensor | None = None  # (L, E + 1) loads and drops since the row

    def __bool__(self) -> bool:
        return bool(self.names)

    def counts(self, device=None) -> torch.Tensor:
        """(L * (E + 1),) each layer's per-expert counts, then its dropped count (zeros for
        a layer of another pipeline stage), on `device` (None: the layers')."""
        held = [m for m in self.layers.values() if m is not None]
        if device is None:
            device = held[0].tokens_per_expert.device if held else "cpu"
        zeros = torch.zeros(self.n + 1, device=device)
        return torch.cat([zeros if m is None else
                          torch.cat([m.tokens_per_expert, m.dropped.view(1)]).to(device)
                          for m in self.layers.values()])

    def direction(self, load: torch.Tensor) -> torch.Tensor:
        """(L, E) each expert's bias step per unit rate from its layer's (L, E) load.
        sign moves every expert by the same amount however near it is to its share;
        proportional moves one far off its share (an idle expert: +1) up to the rate and
        one near it little, so a large rate corrects a collapse fast without making the
        balanced experts' bias jitter by the full rate every step."""
        mean = load.mean(1, keepdim=True)
        if self.rule == "sign":
            return torch.sign(mean - load)
        # a layer that saw no tokens (mean 0) has error 0, not 0/0
        return ((mean - load) / mean.clamp_min(1.0)).clamp(-1.0, 1.0)

    @torch.no_grad()
    def update(self, reduced: torch.Tensor, skip: torch.Tensor) -> None:
        """reduced: counts() summed over the ranks; skip: 1.0 when the step was not taken.
        b_e += rate * sign(mean load - load_e) (rule "sign", DeepSeek-V3) or
        rate * clip((mean load - load_e) / mean load, -1, 1) (rule "proportional"), on the
        device; the counts restart."""
        E = self.n
        table = reduced.view(len(self.layers), E + 1)  # (L, E + 1)
        load = table[:, :E]
        step = self.rate * self.direction(load) * (1 - skip)
        for i, m in enumerate(self.layers.values()):
            if m is None:
                continue
            m.expert_bias += step[i].to(m.expert_bias.dtype)
            m.tokens_per_expert.zero_()
            m.dropped.zero_()
        table = table.to(torch.float64)
        self.window = table if self.window is None else self.window + table

    def row(self) -> dict:
        """The metrics row's expert load since the last row (host sync): per MoE layer
        (its block number) each expert's share of the assignments (`expert_load/N`, a
        list), the imbalance max/mean share (`expert_imbalance/N`), with a capacity the
        dropped share (`expert_dropped/N`); `expert_imbalance` the largest of the layers."""
        if self.window is None:
            return {}
        table, self.window = self.window.cpu().tolist(), None
        out, worst = {}, 0.0
        for name, counts in zip(self.names, table, strict=True):
            layer = name.split(".")[1] if name.startswith("layers.") else name
            load, dropped = counts[:self.n], counts[self.n]
            total = sum(load)
            if not total:
                continue
            share = [c / total for c in load]
            imbalance = max(share) * self.n
            worst = max(worst, imbalance)
            out[f"expert_load/{layer}"] = [round(s, 5) for s in share]
            out[f"expert_imbalance/{layer}"] = round(imbalance, 4)
            if self.capped:
                out[f"expert_dropped/{layer}"] = round(dropped / total, 5)
        if out:
            out["expert_imbalance"] = round(worst, 4)
        return out
