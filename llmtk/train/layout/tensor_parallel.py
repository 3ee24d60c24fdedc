"""Tensor parallelism: Megatron-LM's split of every block, with DTensor's parallelize_module.

On the tp sub-mesh (torchtitan's plan for Llama, written for this model):

    tok_emb        vocabulary rows split (Shard(0)); each rank looks up the ids of its rows,
                   the partial embeddings are reduce-scattered along the sequence
    attn_norm,     sequence parallel: each rank normalises T/tp positions, so the
    mlp_norm, norm residual stream between blocks is (B, T/tp, C) on every rank
    attn, mlp      their input all-gathered to the whole sequence first
    attn.wqkv,     column-wise (output rows split): a rank computes H/tp query heads and
    mlp.w1, w3     K/tp kv heads (wqkv is grouped by kv head, so its rows are whole
                   groups), and FFN/tp hidden units
    attn.wo,       row-wise (input columns split): the partial outputs are
    mlp.w2         reduce-scattered back to the sequence-sharded residual stream
    lm_head        vocabulary rows split (Shard(0)), the same matrix as tok_emb when tied;
                   the loss reads it through model.chunked_cross_entropy's vocab-parallel
                   path: each rank's logits of its vocabulary rows, chunk by chunk, with the
                   log-sum-exp and the target logit combined over the tp group

LoRA adapters (train/model/lora.py) follow their base matrix, so each rank computes its part of
W x + s·B·A x with the base's own collectives and nothing more:

    column-wise base   A (r, in) replicated, B (out, r) split by rows like W: each rank's
                       B rows produce exactly its output columns (for wqkv each of B_q,
                       B_k, B_v by rows: the rank's query heads and kv heads, its kv groups)
    row-wise base      A (r, in) split by columns like W, B (out, r) replicated: A x is a
                       partial sum over the tp ranks, reduced with W x's

A replicated adapter's gradient leaves the backward as a partial sum over the tp group
(Partial); FSDP2, always applied on top, redistributes it to the parameter's Replicate
placement before its reduce-scatter. Adapters are initialised whole and sliced
(lora.init_lora), so a tp run starts from one process's adapters.

A mixture-of-experts layer (train/model/moe.py) in place of the MLP (_split_moe): its
input gathered to the whole sequence as the MLP's is, every token routed on every rank
(the router whole), each expert's hidden width split as the MLP's (w1, w3 by rows, w2 by
columns; under --ep over (ep, tp) together: expert_parallel.py), the shared experts
column- then row-wise; the rank's output, a partial sum, reduce-scattered back once.

Every rank of a tp group reads the same batch (Layout.dp_rank). A replicated parameter's
gradient (the norms') is the same on every rank of the group: DTensor all-reduces the
partial gradients of the sequence shards.
"""

from __future__ import annotations


def apply_tp(model, tp_mesh, experts: bool = True) -> None:
    """Split `model` (a llmtk GPT, on any device, before fully_shard) over `tp_mesh`;
    `experts`: split the MoE layers' experts too (False: expert parallelism places them,
    over ep and tp together: expert_parallel.apply_ep)."""
    from torch import nn
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import (
        PrepareModuleInput,
        SequenceParallel,
        parallelize_module,
    )

    from llmtk.compute.placement import (
        BLOCK_PLAN,
        COLWISE,
        MODEL_PLAN,
        REPLICATED,
        ROWWISE,
        VOCAB,
        WEIGHT_DIM,
    )
    from llmtk.train.model.moe import MoE

    ColwiseParallel, RowwiseParallel = _adapter_styles()
    # each module's split is the placement table's (llmtk/compute/placement.py)
    styles = {COLWISE: ColwiseParallel,  # -> (B, T, out / tp), plain
              ROWWISE: lambda: RowwiseParallel(output_layouts=Shard(1)),  # -> (B, T/tp, C)
              REPLICATED: SequenceParallel,  # the weight whole, the positions split
              # ids (B, T) on every rank -> (B, T/tp, C), a plain tensor: the residual stream
              VOCAB: lambda: RowwiseParallel(input_layouts=Replicate(),
                                             output_layouts=Shard(1))}
    # what attention and the MLP take in, not parameters: their input gathered from the
    # sequence-sharded residual stream, (x, cos, sin, mask) for attention
    inputs = {"attn": lambda: PrepareModuleInput(
                  input_layouts=(Shard(1), None, None, None),
                  desired_input_layouts=(Replicate(), None, None, None)),
              "mlp": lambda: PrepareModuleInput(input_layouts=(Shard(1),),
                                                desired_input_layouts=(Replicate(),))}

    tied = model.lm_head.weight is model.tok_emb.weight
    # SequenceParallel (and the untied head below) make new Parameters that require
    # gradients: a frozen base (LoRA) is frozen again at the end.
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    # norm -> a (B, T, C) DTensor sharded along T: head_loss; the head is placed below
    parallelize_module(model, tp_mesh, {name: styles[style]()
                                        for name, style in MODEL_PLAN.items()
                                        if name != "lm_head"})
    for block in model.layers.values():
        plan = {}
        moe = isinstance(block.mlp, MoE)
        for name, style in BLOCK_PLAN.items():
            parent = name.partition(".")[0]
            if moe and parent == "mlp":
                continue  # split below
            if parent in inputs and parent not in plan:
                plan[parent] = inputs[parent]()
            plan[name] = styles[style]()  # column- and row-wise: a LoRALinear's adapters too
        parallelize_module(block, tp_mesh, plan)
        if moe:
            _split_moe(block.mlp, tp_mesh, experts)
    # RowwiseParallel hands the embedding's reduce-scatter on as an AsyncCollectiveTensor;
    # a compiled first block given that subclass as its input returns a gradient that
    # DTensor's redistribute backward cannot take (torch 2.13). A copy is a plain tensor,
    # still on the autograd graph (wait() would cut the embedding off it), of (B, T/tp, C).
    model.tok_emb.register_forward_hook(
        lambda module, args, out: out.clone() if hasattr(out, "wait") else out)
    if tied:  # parallelize_module gave tok_emb a new (DTensor) Parameter: tie the head again
        model.lm_head.weight = model.tok_emb.weight
    else:  # the head's forward is never split: only its weight, which the loss reads
        model.lm_head.weight = nn.Parameter(distribute_tensor(
            model.lm_head.weight, tp_mesh, [Shard(WEIGHT_DIM[MODEL_PLAN["lm_head"]])]))
    for name, p in model.named_parameters():
        if name in frozen:
            p.requires_grad_(False)


def _adapter_styles():
    """torch's ColwiseParallel and RowwiseParallel, extended to a LoRALinear's adapters
    (placed as the module docstring says). torch's own column-wise partition walks every
    parameter of the module, adapters included, and registers them under dotted names,
    which nn.Module refuses; a plain Linear is split exactly as torch splits it."""
    from torch import nn
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    from llmtk.compute.placement import ADAPTER_DIM, COLWISE, ROWWISE

    def adapters(module, mesh, style: str, src) -> None:
        for which, dim in ADAPTER_DIM[style].items():  # the placement table's
            params = getattr(module, which, {})
            place = Replicate() if dim is None else Shard(dim)
            for name, p in list(params.items()):
                params[name] = nn.Parameter(distribute_tensor(p, mesh, [place],
                                                              src_data_rank=src),
                                            requires_grad=p.requires_grad)

    # distribute_module calls the partition once per submodule (name "" is the Linear; the
    # adapters' ParameterDicts follow): the Linear's call places everything.
    class Colwise(ColwiseParallel):
        def _partition_linear_fn(self, name, module, device_mesh):
            if name:
                return
            for n, p in list(module.named_parameters(recurse=False)):  # weight (and bias)
                module.register_parameter(n, nn.Parameter(
                    distribute_tensor(p, device_mesh, [Shard(0)],
                                      src_data_rank=self.src_data_rank),
                    requires_grad=p.requires_grad))
            adapters(module, device_mesh, COLWISE, self.src_data_rank)

    class Rowwise(RowwiseParallel):
        def _partition_linear_fn(self, name, module, device_mesh):
            if name:
                return
            super()._partition_linear_fn(name, module, device_mesh)  # weight, bias only
            adapters(module, device_mesh, ROWWISE, self.src_data_rank)

    return Colwise, Rowwise


def _split_moe(moe, tp_mesh, experts: bool) -> None:
    """A MoE layer over the tp group, as the placement table says (MOE_PLAN: Megatron's
    split of experts without ep): its input gathered whole from the sequence-sharded
    stream, every token routed on every rank (the router whole), each expert's hidden
    width split like the dense MLP's (w1, w3 by rows, w2 by columns; `experts` False:
    apply_ep places them), the shared experts column- then row-wise. Each rank's output is
    then a partial sum over the group, reduce-scattered back to (B, T/tp, C) once."""
    from torch import nn
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import PrepareModuleInputOutput, parallelize_module

    from llmtk.compute.placement import EXPERT_DIM

    Colwise, Rowwise = _adapter_styles()
    plan = {"": PrepareModuleInputOutput(
        input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),),
        use_local_input=False, output_layouts=(Partial(),),
        desired_output_layouts=(Shard(1),), use_local_output=True)}
    if moe.shared is not None:  # (N, C) Replicate -> (N, H/tp) -> partial (N, C), local
        plan.update({"shared.w1": Colwise(), "shared.w3": Colwise(),
                     "shared.w2": Rowwise(input_layouts=Shard(-1), output_layouts=Partial())})
    parallelize_module(moe, tp_mesh, plan)
    moe.router.weight = nn.Parameter(distribute_tensor(  # whole: its gradient a partial sum
        moe.router.weight.detach(), tp_mesh, [Replicate()]),
        requires_grad=moe.router.weight.requires_grad)
    if experts:
        for name, dim in EXPERT_DIM.items():
            p = getattr(moe.experts, name)
            setattr(moe.experts, name, nn.Parameter(distribute_tensor(
                p.detach(), tp_mesh, [Shard(dim)]), requires_grad=p.requires_grad))
        from llmtk.train.model.lora import place_expert_adapters  # LoRA's, if any

        place_expert_adapters(moe.experts, tp_mesh, ep=False, tp=True)
    # each rank computes the auxiliary losses whole; their gradients join the partial sums
    moe.aux_scale = 1.0 / tp_mesh.size()
