"""Pipeline parallelism: the model's blocks split into stages, run by
torch.distributed.pipelining's 1F1B or interleaved 1F1B schedule over the mesh's pp dimension.

The split (mesh.pipeline_split): stage s holds consecutive blocks, the first stage the
embedding, the last the final norm, the head and the loss. 1f1b runs one stage per pp rank;
interleaved-1f1b several (virtual) stages per rank, stage s on pp rank s % pp.

What stays as in one process:
  - names: a stage keeps the whole model's module names (layers is keyed "0".."n-1"), so
    a rank's parameters are named as in the whole model and DCP checkpoints reshard between
    pipeline layouts (pp 2 -> pp 1 and back);
  - microbatches: the step's --grad-accum micro-steps, each --batch-size windows of this
    dp rank, in order: a pipeline run reads the windows a one-process run reads, and the
    schedule divides the summed gradients by their number as the micro-steps divide the loss;
  - tied embeddings (Megatron-LM's way): the last stage holds a copy of the embedding matrix
    for the head, under the embedding's name; after the backward the first and the last
    stage's gradients are summed, so both copies take the same update and stay equal;
  - the init: every rank draws the whole model's initial weights in the same order
    (model.init_weights skips nothing, a block of another stage is drawn and discarded);
    after it each pp rank but the first draws (dropout) from a stream of its own
    (parallelize.seed_rank_stream).

The split and the schedule are two steps of parallelize.parallelize: each stage is
fully_shard-ed (FSDP2) over the dp sub-mesh after tensor parallelism, as the whole model
is without pp, and materialised and initialised between them. The targets (and SFT's
document ids) reach every stage as keyword arguments; the last stage computes the loss
from the targets, every stage takes the sequence length and device from them (rotary
tables) and builds its attention mask from the document ids. The shapes between stages
are given up front (static metadata), so no stage runs a trial forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from llmtk.train.model.gpt import (
    GPT,
    head_loss,
    positions,
    rotary_tables,
    run_blocks,
    wide,
    wide_dtype,
)
from llmtk.train.model.moe import carry_aux, layers_aux


class StagePart(nn.Module):
    """Stage blocks `ids` of `model` (the modules themselves, under their whole-model names),
    with the embedding when `first` and the final norm and head when `last`.

    forward(x, targets, doc=None, scale=None): x is the ids (B, T) on the first stage, the
    residual stream (B, T/tp, C) elsewhere; returns the residual stream, or on the last
    stage the mean loss (times `scale`[0], SFT's micro-step share of the step's tokens)."""

    def __init__(self, model: GPT, ids, first: bool, last: bool):
        super().__init__()
        self.cfg, self.first, self.last = model.cfg, first, last
        if first or (last and model.cfg.tie_embeddings):
            # On the last stage of a tied model: the head's copy, named as the embedding so
            # that its checkpoint entries (and optimizer state) are the embedding's.
            self.tok_emb = model.tok_emb
        self.layers = nn.ModuleDict({str(i): model.layers[str(i)] for i in ids})
        if last:
            self.norm, self.lm_head = model.norm, model.lm_head
        self.recompute = model.activation_checkpointing
        self._rope: tuple | None = None  # derived, not state: made on the first forward

    def holds(self, key: str) -> bool:
        """Whether whole-model state-dict entry `key` belongs to this part."""
        head, _, rest = key.partition(".")
        if head == "layers":
            return rest.partition(".")[0] in self.layers
        return head in self._modules

    def forward(self, x: torch.Tensor, targets: torch.Tensor, doc: torch.Tensor | None = None,
                scale: torch.Tensor | None = None) -> torch.Tensor:
        if self._rope is None:
            self._rope = rotary_tables(self.cfg, device=targets.device)
        cos, sin, mask = positions(*self._rope, targets.shape[1], doc)
        if self.first:
            x = self.tok_emb(x)  # (B, T, C); tensor parallel: (B, T/tp, C)
        training = torch.is_grad_enabled()
        x = run_blocks(self.layers.values(), x, cos, sin, mask, self.recompute and training)
        # A MoE layer's auxiliary losses: as GPT.forward adds them to the loss (times the
        # micro-step's scale, as the loss is), but in this stage's own backward.
        aux = layers_aux(self.layers.values(), training)
        if not self.last:
            return carry_aux(x, aux if aux is None or scale is None else aux * scale[0])
        loss = head_loss(self.norm(x), self.lm_head.weight, targets, self.cfg.vocab_size)
        if aux is not None:
            aux = aux.to(loss.dtype)
            loss = loss + (aux - aux.detach())  # 0 in value: the loss stays the cross-entropy
        return loss if scale is None else loss * scale[0]


class Pipeline:
    """This rank's stages and the schedule that runs them; built by `schedule`."""

    def __init__(self, parts: list[StagePart], stage_ids: list[int], n_stages: int, group,
                 act_shape: tuple, act_dtype, tied_group):
        self.parts, self.stage_ids, self.n_stages = parts, stage_ids, n_stages
        self.group, self.pp = group, group.size()  # the pp dimension's process group
        self.act_shape, self.act_dtype = act_shape, act_dtype  # the residual stream's
        self.tied_group = tied_group  # first and last stage (tied embeddings), or None
        self.has_first, self.has_last = 0 in stage_ids, n_stages - 1 in stage_ids
        self.schedule = None  # set by schedule(): it calls _loss
        self.loss_hook = lambda loss: loss  # the trainer's Faults.loss (tests inject NaN)

    def _loss(self, out: torch.Tensor, _target) -> torch.Tensor:
        return self.loss_hook(out)  # the last stage's output is its loss already

    def step(self, batches: list[tuple], scales: list[float] | None = None) -> torch.Tensor:
        """Forward and backward of the step's microbatches (`batches`: one (x, y[, doc])
        per micro-step); returns the sum of their losses on a last-stage rank, else 0.
        Gradients end reduced over dp (FSDP2) and divided by the number of microbatches."""
        x = torch.cat([b[0] for b in batches])   # (M*B, T)
        y = torch.cat([b[1] for b in batches])
        kwargs = {"targets": y}
        if len(batches[0]) > 2:                  # SFT: document ids, for every stage's mask
            kwargs["doc"] = torch.cat([b[2] for b in batches])
        if scales is not None:                   # one value per window, split like the rest
            # (on the CPU: a list copied to the GPU would wait for it, a host sync per step;
            # a 0-dim CPU tensor multiplies a GPU loss as a plain number)
            kwargs["scale"] = torch.tensor(scales).repeat_interleave(batches[0][0].shape[0])
        losses: list = []
        self.schedule.step(*((x,) if self.has_first else ()),
                           target=y if self.has_last else None, losses=losses,
                           return_outputs=False, **kwargs)
        if not self.has_last:
            return torch.zeros((), device=x.device)
        return wide(torch.stack([loss.detach() for loss in losses])).sum()

    def sync_tied(self) -> None:
        """Tied embeddings: sum the first stage's gradient of the matrix with the last
        stage's (the head's), so the two copies take the same update."""
        if self.tied_group is None:
            return
        import torch.distributed as tdist

        weight = self.parts[0 if self.has_first else -1].tok_emb.weight
        grad = weight.grad
        if grad is None:  # LoRA: the base is frozen
            return
        tdist.all_reduce(grad.to_local() if hasattr(grad, "to_local") else grad,
                         group=self.tied_group)

    @torch.no_grad()
    def forward_only(self, x: torch.Tensor, y: torch.Tensor,
                     doc: torch.Tensor | None = None) -> torch.Tensor | None:
        """The mean loss of one batch through every stage, forward only (evaluation): each
        rank runs its stages in stage order, receiving the residual stream from the rank
        before and sending it on. The loss on a last-stage rank, else None."""
        import torch.distributed as tdist

        for s, part in zip(self.stage_ids, self.parts, strict=True):
            if s == 0:
                h = x
            else:
                h = torch.empty((x.shape[0], *self.act_shape[1:]), dtype=self.act_dtype,
                                device=x.device)
                tdist.recv(h, group=self.group, group_src=(s - 1) % self.pp)
            out = part(h, y, doc)
            if s == self.n_stages - 1:
                return out
            tdist.send(out.to(self.act_dtype).contiguous(), group=self.group,
                       group_dst=(s + 1) % self.pp)
        return None


def _tied_group(layout, n_stages: int):
    """The process group of this rank and its counterpart holding the other copy of a
    tied embedding (first and last stage, same dp and tp coordinates). Every rank creates
    every pair's group, in the same order, as new_group requires."""
    import torch.distributed as tdist

    first_rank, last_rank = 0, (n_stages - 1) % layout.pp
    per_stage = layout.world // layout.pp
    me, mine = tdist.get_rank(), None
    for i in range(per_stage):
        pair = [first_rank * per_stage + i, last_rank * per_stage + i]
        group = tdist.new_group(pair)
        if me in pair:
            mine = group
    return mine


@dataclass
class Stages:
    """This rank's part of the split (`split_stages`): its stage numbers, their modules,
    and the module holding all of them (the optimizer's and the checkpoints' view)."""

    ids: list[int]
    parts: list[StagePart]
    holder: nn.Module
    n_stages: int


def split_stages(model: GPT, split, pp_rank: int, pp: int) -> Stages:
    """Split `model` (on the meta device, LoRA and tensor parallelism applied) into the
    stages of pipeline rank `pp_rank`: `split` gives each stage's blocks, in stage order
    (mesh.pipeline_split); stage s runs on pp rank s % pp."""
    n = len(split)
    starts = [sum(split[:s]) for s in range(n + 1)]
    stage_ids = [s for s in range(n) if s % pp == pp_rank]
    parts = [StagePart(model, range(starts[s], starts[s + 1]), s == 0, s == n - 1)
             for s in stage_ids]
    holder = parts[0] if len(parts) == 1 else StagePart(
        model, [i for s in stage_ids for i in range(starts[s], starts[s + 1])],
        0 in stage_ids, n - 1 in stage_ids)
    return Stages(stage_ids, parts, holder, n)


def schedule(stages: Stages, plan, pp_mesh, device: str) -> Pipeline:
    """The schedule running this rank's (sharded, materialised) stages over the pp
    dimension, as `plan` (train/layout/plan.py) asks: its --pp-schedule, its --grad-accum
    microbatches of --batch-size windows."""
    from torch.distributed.pipelining import (
        PipelineStage,
        Schedule1F1B,
        ScheduleInterleaved1F1B,
    )

    mcfg, layout, n = plan.mcfg, plan.layout, stages.n_stages
    # Static shapes: a microbatch is --batch-size windows; under tensor parallelism the
    # residual stream between stages is sequence-sharded. FSDP2's bf16 policy computes
    # (and so passes on) the residual stream in bf16.
    B, T = plan.batch_size, mcfg.seq_len
    act_shape, act_dtype = (B, T // layout.tp, mcfg.d_model), \
        torch.bfloat16 if plan.bf16 else torch.get_default_dtype()  # fp32 (fp64: --dtype fp64)
    dev = torch.device(device)
    built = []
    def act():  # the residual stream: its gradient flows back to the stage before
        return torch.empty(act_shape, dtype=act_dtype, device="meta", requires_grad=True)

    for s, part in zip(stages.ids, stages.parts, strict=True):
        inp = torch.empty((B, T), dtype=torch.long, device="meta") if s == 0 else act()
        out = torch.empty((), dtype=wide_dtype(act_dtype), device="meta", requires_grad=True) \
            if s == n - 1 else act()
        built.append(PipelineStage(part, s, n, dev, input_args=inp, output_args=out,
                                   group=pp_mesh.get_group()))
    tied = _tied_group(layout, n) if mcfg.tie_embeddings else None
    pipe = Pipeline(stages.parts, stages.ids, n, pp_mesh.get_group(), act_shape, act_dtype,
                    tied)
    if plan.pp_schedule == "1f1b":
        pipe.schedule = Schedule1F1B(built[0], plan.grad_accum, loss_fn=pipe._loss)
    else:
        pipe.schedule = ScheduleInterleaved1F1B(built, plan.grad_accum, loss_fn=pipe._loss)
    return pipe
