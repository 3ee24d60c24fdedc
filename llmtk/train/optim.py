"""The optimizer and its schedule: the learning rate as a pure function of the step, and
the step's one collective, clipping and fused AdamW update, all on the device.

`Optimizer.update` is steps 3-4 of the trainer's step (trainer.py): one all-reduce of
[loss, per-parameter squared gradient norms]; the global grad norm, the clip factor and
the non-finite verdict computed from it on the device; the fused AdamW step skipped on
the device when the verdict is "not finite" (`found_inf`, as AMP's GradScaler does), so
no host sync decides it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class OptimSpec:
    """What the schedule (lr_at) and the Optimizer read of the configuration."""

    lr: float
    min_lr: float | None
    warmup: int
    schedule: str
    decay_fraction: float
    steps: int
    weight_decay: float
    beta1: float
    beta2: float
    grad_clip: float
    grad_accum: int


def lr_at(step: int, spec: OptimSpec) -> float:
    """Learning rate for the 0-based step: linear warmup, then cosine / WSD / constant
    (`spec`: its lr, min_lr, warmup, schedule, decay_fraction and steps)."""
    min_lr = spec.lr / 10 if spec.min_lr is None else spec.min_lr
    if step < spec.warmup:
        return spec.lr * (step + 1) / spec.warmup
    if spec.schedule == "constant":
        return spec.lr
    if spec.schedule == "wsd":  # warmup, stable, then a linear decay over the last fraction
        decay_start = spec.steps - max(1, int(spec.decay_fraction * spec.steps))
        if step < decay_start:
            return spec.lr
        frac = (step - decay_start + 1) / (spec.steps - decay_start)
        return spec.lr + frac * (min_lr - spec.lr)
    progress = (step - spec.warmup) / max(1, spec.steps - spec.warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0))) * (spec.lr - min_lr)


def warmup_warning(spec: OptimSpec) -> str:
    """What a run whose warmup is not shorter than the run does (it is allowed: a short
    smoke test may want it, but it is never what a long run meant)."""
    last = lr_at(spec.steps - 1, spec)
    return (f"warning: --warmup {spec.warmup} >= --steps {spec.steps}: the whole run warms up "
            f"(lr rises linearly to {last:.3g} at the last step, peak --lr {spec.lr:g}) and "
            f"never decays; lower --warmup to use the {spec.schedule} schedule")


class Optimizer:
    """AdamW over the trainable parameters of `built` (parallelize.Parallelized, laid out
    by `plan` over `dist`), with `cfg`'s schedule (lr_at), betas, weight decay and clip.
    `row_parts`: the metrics row's extra parts (StepLog.row_parts), where a MoE model's
    Balancer adds the experts' load."""

    def __init__(self, cfg: OptimSpec, built, plan, dist, row_parts: list | None = None):
        import torch

        from llmtk.train.layout.mesh import replicas
        from llmtk.train.model.moe import Balancer

        self.cfg, self.dist, self.parallel = cfg, dist, plan.parallel
        model = built.raw
        # Only what trains (LoRA freezes the base): clipped, updated, checked for NaN.
        self.params = [p for p in model.parameters() if p.requires_grad]
        names = [n for n, p in model.named_parameters() if p.requires_grad]
        # The squared-norm vector the step all-reduces spans the whole model's trainable
        # parameters (param_names), so one reduction serves every layout: a pipeline
        # stage puts its own at their `slots` and leaves zeros for the other stages'.
        self.param_names, self.slots = names, None
        # How many ranks hold each gradient element: the all-reduced squares are divided by
        # it, so a replicated shard (HSDP, DDP; a tied embedding's two pipeline copies)
        # counts once in the global norm.
        self.replicas = torch.tensor([float(replicas(p, dist.world)) for p in self.params],
                                     device=dist.device)
        self.loss_ranks = dist.world  # ranks whose losses are averaged: the last stage's
        if built.pipe is not None:
            self._pipeline_norms(names, built.trainable, plan.layout.pp)
        # AdamW, decoupled weight decay on matrices only (not norms), nanoGPT's grouping.
        # Fused: one kernel for all parameters, and it honours `found_inf` (the device-side
        # skip of a non-finite step), on CPU, CUDA, DDP and FSDP2's DTensors alike.
        decay = [p for p in self.params if p.dim() >= 2]
        no_decay = [p for p in self.params if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": cfg.weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
        self.opt = torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                                     fused=True)
        # MoE: the experts' loads ride on the step's all-reduce (llmtk.train.model.moe.Balancer)
        # and their share since the last row joins the metrics row (`row_parts`).
        self.balance = Balancer(model, getattr(plan.mcfg, "router_bias_rate", 0.0), plan.mcfg)
        if self.balance and row_parts is not None:
            row_parts.append(self.balance.row)

    def _pipeline_norms(self, names: list[str], whole_names: list[str], pp: int) -> None:
        """Under pp: param_names become the whole model's, slots where this rank's go, and
        replicas count the holders of each element over all stages (one all-reduce each
        of the holders and of the shards, once)."""
        import torch
        import torch.distributed as tdist

        from llmtk.train.layout.mesh import shards

        self.param_names = whole_names
        index = {n: i for i, n in enumerate(self.param_names)}
        dev = self.dist.device
        self.slots = torch.tensor([index[n] for n in names], dtype=torch.long, device=dev)
        holders = torch.zeros(len(self.param_names), device=dev)
        pieces = torch.zeros(len(self.param_names), device=dev)
        holders[self.slots] = 1.0
        pieces[self.slots] = torch.tensor([float(shards(p)) for p in self.params],
                                          device=dev)
        tdist.all_reduce(holders)  # ranks holding some piece of each parameter
        tdist.all_reduce(pieces, op=tdist.ReduceOp.MAX)
        self.replicas = holders / pieces
        self.loss_ranks = self.dist.world // pp

    def set_lr(self, step: int, scale: float) -> float:
        """The schedule's rate for the 0-based `step`, times `scale` (spike rollbacks)."""
        lr = lr_at(step, self.cfg) * scale
        for group in self.opt.param_groups:
            group["lr"] = lr
        return lr

    def update(self, loss_sum):
        """The step's one collective, then clip and step on the device. Returns the step's
        [loss, grad_norm, not_finite] and the per-parameter squared norms (device)."""
        import torch

        from llmtk.train.model.gpt import wide

        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        local = [g.to_local() if hasattr(g, "to_local") else g for g in grads]
        sq = wide(torch.stack(torch._foreach_norm(local))) ** 2  # (P,)
        if self.slots is not None:  # pp: this stage's among the whole model's (P_all,)
            sq = torch.zeros(len(self.param_names), device=sq.device).index_copy_(
                0, self.slots, sq)
        n = 1 + sq.numel()  # then the MoE layers' expert counts, summed over the ranks too
        loads = [self.balance.counts(sq.device).to(sq.dtype)] if self.balance else []
        vec = torch.cat([(loss_sum / self.cfg.grad_accum).view(1), sq, *loads])
        if self.dist.distributed:
            import torch.distributed as tdist

            reduced = vec.clone()
            tdist.all_reduce(reduced)
            # FSDP: each rank holds a shard of every gradient, so the squares add up; HSDP:
            # each shard is held by dp_replicate ranks; DDP: every rank holds the same full
            # gradients, the local norms are the global ones (kept as they are: exact).
            vec = torch.cat([reduced[:1] / self.loss_ranks,
                             reduced[1:n] / self.replicas if self.parallel == "fsdp" else sq,
                             reduced[n:]])
        loss, sq, loads = vec[0], vec[1:n], vec[n:]
        norm = sq.sum().sqrt()
        not_finite = (~(torch.isfinite(norm) & torch.isfinite(loss))).float()
        if self.cfg.grad_clip > 0:  # clip_grad_norm_'s rule, without its host sync
            torch._foreach_mul_(local, (self.cfg.grad_clip / (norm + 1e-6)).clamp(max=1.0))
        self.opt.found_inf = not_finite  # the fused kernel skips the update when it is 1
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        if self.balance:
            self.balance.update(loads, not_finite)
        return torch.stack([loss, norm, not_finite]), sq
