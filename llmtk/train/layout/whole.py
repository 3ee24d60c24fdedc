"""The model that sampling (--sample-every) and task evaluation (--eval-tasks) run, whatever
the parallel layout: under tensor or pipeline parallelism a whole copy on rank 0.

Generating text is sequential, one token at a time over growing prompts: it gains nothing
from splitting the model's matrices or layers, and run through them it would need each
layout's own collective path (a tensor-parallel forward gathering its logits, a pipeline
passing activations between stages). Instead, one way for both:

  1. every rank takes part in gathering the model's full state: each parameter's
     DTensor (FSDP2 shards, tensor-parallel splits, both) is gathered whole and only the
     leader of each pipeline stage (its dp and tp coordinates 0) keeps a CPU copy;
  2. under --pp the stage leaders send their stages' tensors to rank 0 (the host gloo
     group), which merges them (`merge_stages`);
  3. rank 0 builds a plain GPT on its device (LoRA adapters applied, as one process
     trains them), loads the state and runs; the other ranks wait at a barrier. Nothing
     is broadcast: what is logged, rank 0 logs.

A layout whose model is not split (one process, DDP) uses rank 0's own model, without a
copy. Nor does FSDP2 alone (no tp, no pp): its forward is the plain model's, each block's
weights gathered as it runs and freed after, so every rank runs it in step (the same
tokens on every rank: the same logits, generators seeded alike) and rank 0 logs; a copy
there would put the whole fp32 model on rank 0's device, which is what FSDP2 is used to
avoid. Sampling the same weights with the same seed therefore gives the same text in every
layout. The cost under tp or pp is one gather of the weights and, on rank 0, a second copy
of them (fp32) while it samples or evaluates.
"""

from __future__ import annotations

import contextlib

from llmtk.errors import LlmtkError


def merge_stages(stages: list[dict]) -> dict:
    """One state dict from the pipeline stages' (each holds only its own keys, in stage
    order). A key held by two stages (a tied embedding and head split between the first
    and last stage) must hold the same values in both."""
    import torch

    merged: dict = {}
    for stage, sd in enumerate(stages):
        for key, value in sd.items():
            if key in merged and not torch.equal(merged[key], value):
                raise LlmtkError(f"pipeline stage {stage} holds {key} with other values than "
                                 "an earlier stage: the stages' copies went out of sync")
            merged.setdefault(key, value)
    return merged


def gather_state(model, layout, rank: int, host_group=None) -> dict | None:
    """The model's full state dict (CPU tensors) on rank 0, None on the other ranks;
    collective (every rank calls it)."""
    import torch.distributed as tdist
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    coords = layout.coords(rank)
    leader = all(v == 0 for d, v in coords.items() if d != "pp")  # of its pipeline stage
    mine = {}
    for key, value in get_model_state_dict(model).items():  # this rank's shards
        # full_tensor: a collective over the parameter's mesh (its stage's ranks), in the
        # same key order on each of them; one parameter at a time in device memory.
        whole = value.full_tensor() if hasattr(value, "full_tensor") else value
        if leader:
            mine[key] = whole.detach().to("cpu", copy=True)
        del whole
    if layout.pp == 1:
        return mine if rank == 0 else None
    stages = [None] * layout.world if rank == 0 else None
    tdist.gather_object(mine if leader else None, stages, dst=0, group=host_group)
    if rank != 0:
        return None
    return merge_stages([sd for sd in stages if sd is not None])  # leaders in stage order


def build_whole(mcfg, state: dict, device, lora: dict | None = None):
    """A plain GPT on `device` holding `state` (LoRA adapters applied, as trained, when
    lora gives add_lora's rank, alpha, targets and dropout), in eval mode. Built on the
    meta device: it draws no random numbers (the run's RNG streams stay as they were)."""
    import torch

    from llmtk.train.model.gpt import GPT, rotary_tables

    with torch.device("meta"):
        model = GPT(mcfg)
    if lora:
        from llmtk.train.model.lora import add_lora

        add_lora(model, **lora)
    model.to_empty(device=device)
    if mcfg.tie_embeddings:  # to_empty gave the head its own tensor
        model.lm_head.weight = model.tok_emb.weight
    model.load_state_dict(state)
    cos, sin = rotary_tables(mcfg, device=device)  # derived buffers, not in the state
    model.rope_cos.copy_(cos)
    model.rope_sin.copy_(sin)
    return model.eval()


@contextlib.contextmanager
def whole_model(built, plan, dist):
    """The whole model of `built` (parallelize.Parallelized, laid out by `plan` over
    `dist`), in eval mode: yielded to the ranks that run it, None to the others, which
    wait at the end until rank 0 is done with it. Rank 0 always runs it; under FSDP2 alone
    every rank does (its forward is collective), and only rank 0 may log or write what it
    computes."""
    rank0 = dist.rank == 0
    copy = plan.copied
    model = None
    try:
        if copy:
            state = gather_state(built.model, plan.layout, dist.rank, dist.groups.get("host"))
            if rank0:
                lora = plan.lora
                model = build_whole(plan.mcfg, state, dist.device, lora and dict(
                    rank=lora.rank, alpha=lora.alpha, targets=lora.targets,
                    dropout=lora.dropout))
            del state
        elif rank0 or plan.parallel == "fsdp":
            model = built.raw
            built.model.eval()
        yield model
    finally:
        if not copy:
            built.model.train()
        del model
        if copy and rank0 and dist.cuda:
            import torch

            torch.cuda.empty_cache()  # the copy's memory back to the training steps
        dist.barrier()
