"""Per-rank memory of a planned layout (`llmtk train --dry-run`): the parameters each kind
of rank holds, counted by llmtk.train.layout.dryrun on the meta device, priced with the same
formulas `llmtk estimate` uses for activations, FSDP buffers and overhead.

Where the two differ, the dry-run is the one that counts: exact parameters per rank (the
padded vocabulary, norm weights replicated over tp, the embedding on the first stage and
the head on the last instead of an even 1/pp of everything), and FSDP's sharding over
dp_shard only (HSDP replicas hold a copy each), where `estimate` divides every state
evenly by tp x pp x dp.
"""

from __future__ import annotations

from llmtk.compute import hardware
from llmtk.estimate import memory
from llmtk.estimate.emit import CUSTOM_BASE, gb2


def rank_rows(mcfg, plans, *, tp: int, pp: int, fsdp: bool, dp_shard: int, micro_batch: int,
              grad_accum: int, recompute: str, bf16: bool, gpu_name: str,
              lora_rank: int | None = None, lora_parts: float = 7, cp: int = 1,
              lora_experts: bool = False, ep: int = 1) -> dict:
    """{"gpu", "capacity", "rows": [{kind, rank, layers, params, weights, gradients,
    optimizer, recompute, fsdp_buffers, fsdp_held, activations, overhead, total, fits}]} in
    bytes (recompute: under full recompute the layer recomputed in backward, which holds
    its whole activations for that moment; activations: what forward saves): the
    first and the last pipeline stage and the busiest middle one (`shown`).

    Activations are the llmtk model's own (llmtk.estimate.activations.llmtk_saved_bytes:
    what its eager forward saves, measured exact on CPU in fp32 and bf16 autocast, one
    process, FSDP2 and tp 2: tests/test_train_memory.py), not Korthikanti's GPT-3 block,
    which `llmtk estimate` uses for any model. Under --cp each rank's T/cp tokens and the
    gathered keys and values, as `llmtk estimate` prices them (the same function). Under
    --ep a MoE layer's dispatch at the mean routing (moe_layer_bytes)."""
    from llmtk.estimate.activations import llmtk_saved_bytes, stage_bytes

    gpu = hardware.gpu(gpu_name)
    a = llmtk_saved_bytes(mcfg, micro_batch, mcfg.seq_len, elem=2 if bf16 else 4,
                          recompute=recompute, lora_rank=lora_rank, lora_parts=lora_parts,
                          tp=tp, weight_copies=bf16 and not fsdp,
                          residual=2 if bf16 and fsdp else 4, cp=cp,
                          lora_experts=lora_experts, ep=ep)
    rows = []
    for plan in plans:
        act = stage_bytes(a, mcfg.n_layer, plan.layers, embedding=plan.embedding,
                          head=plan.head, pp=pp, n_micro=grad_accum, pp_rank=plan.pp_rank,
                          local_stages=plan.stages)
        # FSDP2 gathers a block's parameters (current + prefetched) and holds one block's
        # unsharded gradients before the reduce-scatter: estimate's formula.
        buffers = memory.fsdp_buffer_bytes(plan.block_params,
                                           full_grads=not lora_rank,
                                           precision="bf16-mixed" if bf16 else "fp32") \
            if fsdp else 0.0
        # plan.params/trainable are after FSDP's sharding: x dp_shard is the stage's share
        held = memory.fsdp_held_bytes(plan.params * dp_shard, plan.trainable * dp_shard,
                                      precision="bf16-mixed" if bf16 else "fp32",
                                      dp_shard=dp_shard, pp=pp) \
            if fsdp else 0.0
        states = plan.weights + plan.gradients + plan.optimizer
        redo = a["recompute_peak"]  # full recompute: the layer recomputed in backward
        overhead, total = memory.with_overhead(states + buffers + held + act + redo)
        rows.append({"kind": plan.kind, "rank": plan.rank, "layers": plan.layers,
                     "params": plan.params, "weights": plan.weights,
                     "gradients": plan.gradients, "optimizer": plan.optimizer,
                     "recompute": redo, "fsdp_buffers": buffers, "fsdp_held": held,
                     "activations": act,
                     "overhead": overhead,
                     "total": total, "fits": total <= gpu.mem_bytes})
    return {"gpu": gpu.name, "capacity": gpu.mem_bytes, "rows": shown(rows)}


def shown(rows: list[dict]) -> list[dict]:
    """The rows worth a line: every kind but "middle stage" as it is, and of the middle
    stages the busiest (the first one of equals), so that the busiest rank of the layout
    is always among them."""
    middle = [r for r in rows if r["kind"] == "middle stage"]
    busiest = max(middle, key=lambda r: r["total"], default=None)  # max: the first of equals
    return [r for r in rows if r["kind"] != "middle stage" or r is busiest]


def same_layout_estimate(mcfg, model: str | None, *, world: int, per_node: int, gpu_name: str,
                         tp: int, pp: int,
                         dp: int, sharded: bool, micro_batch: int, grad_accum: int,
                         recompute: str, bf16: bool, lora_rank: int | None, cp: int = 1,
                         ep: int = 1) -> float | None:
    """`llmtk estimate`'s per-GPU bytes of this layout as llmtk train holds it: the number
    `estimate --solve layout` and `--emit-config` print for it, computed by the same
    function from the same request: the preset and only the dimensions that differ from
    it, as the emitted file names them. `model`: the preset the shape came from, else None.
    None when estimate cannot price the layout."""
    from llmtk.errors import ConfigError
    from llmtk.estimate.plan import Request, estimate

    if getattr(mcfg, "n_experts", 0) and not _preset_experts(mcfg, model):
        return None  # estimate's dimension flags do not describe experts (yet)
    model, dims = _request_model(mcfg, model)
    req = Request(model=model, dims=dims, tokens=1e9, gpus=f"{world}x{gpu_name}",
                  gpus_per_node=per_node, dp=dp, tp=tp, pp=pp, cp=cp, ep=ep,
                  zero=3 if sharded else 0,
                  sequence_parallel=tp > 1, micro_batch=micro_batch,
                  global_batch=micro_batch * dp * grad_accum, recompute=recompute,
                  precision="bf16-mixed" if bf16 else "fp32", lora_rank=lora_rank)
    try:
        return estimate(req)["memory"]["llmtk_train_total"]
    except ConfigError:
        return None


def _preset_experts(mcfg, model: str | None) -> bool:
    """Whether `mcfg`'s experts are those of preset `model`."""
    from llmtk.compute.models import preset

    if model is None:
        return False
    p = preset(model)
    return (p.n_experts, p.top_k, p.n_shared_experts, p.expert_width, p.moe_every,
            p.first_dense) == (mcfg.n_experts, mcfg.top_k, mcfg.n_shared_experts,
                               mcfg.expert_ffn, mcfg.moe_every, mcfg.first_dense)


def _request_model(mcfg, model: str | None):
    """(preset, Dims) that make estimate's ModelSpec train's model `mcfg`: its preset if
    the head is tied as there, else a Llama-style preset tied as it is (emit.CUSTOM_BASE
    untied, tiny tied), with the dimensions that differ from the preset's."""
    from llmtk.compute.models import Dims, preset

    if model is None or preset(model).tie_embeddings != mcfg.tie_embeddings:
        model = "tiny" if mcfg.tie_embeddings else CUSTOM_BASE
    base = preset(model)
    pairs = {"layers": (mcfg.n_layer, base.n_layer), "d_model": (mcfg.d_model, base.d_model),
             "heads": (mcfg.n_head, base.n_head), "kv_heads": (mcfg.kv_heads, base.kv_heads),
             "ffn": (mcfg.hidden, base.ffn), "vocab": (mcfg.vocab_size, base.vocab_size),
             "seq_len": (mcfg.seq_len, base.seq_len)}
    return model, Dims(**{k: mine for k, (mine, theirs) in pairs.items() if mine != theirs})


def same_layout_line(estimated: float | None, busiest: float) -> str:
    """The dry-run's line quoting `same_layout_estimate` beside its own busiest rank."""
    if estimated is None:
        return "llmtk estimate, same layout: not priced (it cannot describe this model)"
    return (f"llmtk estimate, same layout: {gb2(estimated)} per GPU as llmtk train holds it "
            f"({(busiest - estimated) / estimated:+.1%} for the busiest rank here)")


def render(result: dict, title: str, file) -> None:
    """The per-rank table: GB (10^9 bytes) and GiB of the total."""
    gb = 1e9
    print(title, file=file)
    cols = ("weights", "gradients", "optimizer", "recompute", "fsdp_buffers", "fsdp_held",
            "activations", "overhead")
    head = ["rank kind (rank)", "layers", "params", *cols, "total GB", "total GiB", "fits"]
    lines = [head]
    for r in result["rows"]:
        lines.append([f"{r['kind']} ({r['rank']})", str(r["layers"]), f"{r['params'] / 1e9:.3f}B",
                      *(f"{r[c] / gb:.2f}" for c in cols), f"{r['total'] / gb:.2f}",
                      f"{r['total'] / 2**30:.2f}", "yes" if r["fits"] else "NO"])
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    for line in lines:
        print("  ".join(c.rjust(w) if i else c.ljust(w)
                        for i, (c, w) in enumerate(zip(line, widths, strict=True))), file=file)
    print(f"capacity: {result['capacity'] / gb:.1f} GB ({result['capacity'] / 2**30:.1f} GiB) "
          f"per {result['gpu']}; sizes in GB (1e9 bytes) unless GiB", file=file)
