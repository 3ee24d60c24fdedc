"""One estimate: check the request, then compute FLOPs, time, cost, memory and scaling.

`estimate(Request(...))` returns a plain dict (the `--json` output; the table is
drawn from it). Every number is in base units: FLOPs, bytes, seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from llmtk.compute import flops as F
from llmtk.compute import hardware
from llmtk.compute.models import Dims, ModelSpec, build_spec, count_params
from llmtk.compute.placement import DEFAULT_LORA_TARGETS, stage_layers
from llmtk.errors import ConfigError
from llmtk.estimate import layout, memory, rules, scaling
from llmtk.estimate.emit import refusal

SOLVE = ("gpus", "days", "tokens", "layout")
INFERENCE_BYTES = {"fp32": 4, "bf16": 2, "fp8": 1, "int4": 0.5}


@dataclass(frozen=True)
class Request:
    """One estimate's inputs. Errors name a field (ConfigError); the command words it as
    its flag (`fit` is --scaling-fit, the others share their name)."""

    model: str | None = None
    params: float | None = None
    dims: Dims = field(default_factory=Dims)
    tokens: float | None = None
    gpus: str = "1xH100"
    gpus_per_node: int = 8
    mfu: float = 0.4
    price_per_gpu_hour: float | None = None
    dp: int | None = None
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    zero: int = 0
    sequence_parallel: bool = False
    micro_batch: int = 1
    global_batch: int | None = None
    recompute: str = "selective"
    optimizer: str = "adamw"
    precision: str = "bf16-mixed"
    lora_rank: int | None = None
    lora_targets: str = DEFAULT_LORA_TARGETS  # llmtk train's --lora-targets
    solve: str | None = None
    days: float | None = None
    fit: str = "besiroglu"


def _choice(key: str, value: str, choices) -> str:
    if value not in choices:
        raise ConfigError(key, f"expected one of {', '.join(choices)}, got {value!r}")
    return value


def lora_targets(req: Request) -> tuple[str, ...]:
    """--lora-targets as a tuple of llmtk train's target names (ConfigError if one is not)."""
    from llmtk.compute.placement import parse_lora_targets

    return tuple(parse_lora_targets(req.lora_targets))


def validate(req: Request) -> None:
    """Raise ConfigError for the first field that cannot be estimated as given."""
    _choice("recompute", req.recompute, memory.RECOMPUTE)
    _choice("optimizer", req.optimizer, tuple(memory.OPTIMIZER_BYTES))
    _choice("precision", req.precision, tuple(memory.PRECISION_BYTES))
    _choice("fit", req.fit, tuple(scaling.FITS))
    if req.solve is not None:
        _choice("solve", req.solve, SOLVE)
    if not 0 < req.mfu <= 1:
        raise ConfigError("mfu", f"must be in (0, 1], got {req.mfu:g}")
    if req.zero not in (0, 1, 2, 3):
        raise ConfigError("zero", f"expected 0, 1, 2 or 3 (FSDP = 3), got {req.zero}")
    for key in ("tp", "pp", "cp", "ep", "micro_batch", "gpus_per_node"):
        if getattr(req, key) < 1:
            raise ConfigError(key, f"must be >= 1, got {getattr(req, key)}")
    if req.dp is not None and req.dp < 1:
        raise ConfigError("dp", f"must be >= 1, got {req.dp}")
    if req.lora_rank is not None and req.lora_rank < 1:
        raise ConfigError("lora_rank", f"must be >= 1, got {req.lora_rank}")
    lora_targets(req)
    if req.solve == "layout":
        searched = {"dp": req.dp is not None, "tp": req.tp != 1, "pp": req.pp != 1,
                    "cp": req.cp != 1, "ep": req.ep != 1, "zero": req.zero != 0,
                    "micro_batch": req.micro_batch != 1,
                    "sequence_parallel": req.sequence_parallel}
        for key, given in searched.items():
            if given:
                raise ConfigError(key, "is what {0} layout chooses: leave it out",
                                  also=("solve",))
        if req.recompute == "none":  # full is honoured: only full-recompute layouts
            raise ConfigError("recompute", "none is selective in llmtk train (its SDPA "
                              "attention never stores the scores): leave it out, or give "
                              "full to search only full-recompute layouts")
    if req.solve in ("gpus", "tokens") and req.days is None:
        raise ConfigError("days", f"{{0}} {req.solve} needs the target duration in days",
                          also=("solve",))


def gpus_to_buy(need: float, model_parallel: int, per_node: int) -> tuple[int, str]:
    """The GPU count to answer `--solve gpus` with: GPUs come in nodes, and every
    replica needs tp x pp of them. Within one node: the smallest power-of-two
    multiple of tp x pp that reaches `need` (1, 2, 4, 8 GPUs are what a node can
    be split into); beyond one node: whole nodes, each a multiple of tp x pp."""
    unit = model_parallel
    while unit < per_node and unit * 2 <= per_node and unit < need:
        unit *= 2
    if unit >= need and unit <= per_node:
        return unit, f"{unit} GPU{'s' if unit > 1 else ''} of one {per_node}-GPU node"
    step = math.lcm(model_parallel, per_node)
    n = max(step, math.ceil(need / step) * step)
    return n, f"whole {per_node}-GPU nodes" + (f" (multiple of tp x pp = {model_parallel})"
                                               if step != per_node else "")


def _layout(req: Request, n_gpus: int) -> tuple[int, int, int]:
    """(dp, tp, pp) with dp·tp·pp·cp = n_gpus (the cp ranks of a group read the same
    sequences, so dp counts the different batches of a step, as llmtk train's does)."""
    mp = req.tp * req.pp * req.cp
    names = "tp x pp" + (" x cp" if req.cp > 1 else "")
    sizes = f"{req.tp} x {req.pp}" + (f" x {req.cp}" if req.cp > 1 else "")
    if req.dp is not None:
        if req.dp * mp != n_gpus:
            raise ConfigError("dp", f"dp x {names} = {req.dp} x {sizes} = "
                              f"{req.dp * mp} is not the {n_gpus} GPUs of {{0}}", also=("gpus",))
        return req.dp, req.tp, req.pp
    if n_gpus % mp:
        raise ConfigError("gpus", f"{n_gpus} GPUs are not a multiple of {names} = {mp}")
    return n_gpus // mp, req.tp, req.pp


def _check_cp_ep(req: Request, spec: ModelSpec | None, dp: int) -> None:
    """The context- and expert-parallel sizes fit the model and the layout."""
    if spec is not None and req.cp > 1 and spec.seq_len % (2 * req.cp):
        raise ConfigError("cp", f"{req.cp} does not split the {spec.seq_len}-token sequence "
                          f"into 2 x {req.cp} equal chunks (a head and a tail chunk per rank, "
                          "the causal work balanced)", also=("seq_len",))
    if req.ep == 1:
        return
    if spec is not None and not spec.n_experts:
        why = (f": the {spec.name} preset carries its published counts, not its experts' "
               "shape" if spec.active_params is not None else "")
        raise ConfigError("ep", f"{req.ep} needs a mixture-of-experts model{why}")
    if spec is not None and spec.n_experts % req.ep:
        raise ConfigError("ep", f"{req.ep} does not divide the model's {spec.n_experts} "
                          "experts")
    if (dp * req.cp) % req.ep:
        raise ConfigError("ep", f"{req.ep} does not divide dp x cp = {dp} x {req.cp}: the "
                          "expert-parallel ranks are borrowed from them")


def estimate(req: Request) -> dict:
    validate(req)
    spec = build_spec(req.model, req.dims)
    if spec is None and req.params is None:
        raise ConfigError("model", "give a preset ({0} llama3-8b), {1}, or {2}/{3}/{4}",
                          also=("model", "params", "layers", "d_model", "heads"))
    n_gpus, gpu = hardware.parse_gpus(req.gpus)
    peak = hardware.peak_flops(gpu, req.precision)

    # --- parameters -------------------------------------------------------------------
    counts = count_params(spec) if spec is not None else None
    total = req.params if req.params is not None else counts.total
    active = total if req.params is not None else counts.active
    trainable = total
    lora = None
    if req.lora_rank is not None:
        if spec is None:
            raise ConfigError("lora_rank", "needs the model's shape ({0} or {1}/{2}/{3}), not "
                              "only {4}", also=("model", "layers", "d_model", "heads", "params"))
        lora = memory.lora_params(spec, req.lora_rank, targets=lora_targets(req))
        trainable = lora
    n = n_flops(counts, active, lora)

    if spec is not None:
        if spec.n_head % req.tp:
            raise ConfigError("tp", f"{req.tp} does not divide the {spec.n_head} attention heads")
        if spec.ffn % req.tp:
            raise ConfigError("tp", f"{req.tp} does not divide the MLP width {spec.ffn}")
        if req.pp > spec.n_layer:
            raise ConfigError("pp", f"{req.pp} pipeline stages for {spec.n_layer} layers")

    # --- FLOPs --------------------------------------------------------------------------
    if spec is not None:
        per_token = F.model_flops_per_token(n, spec.n_layer, spec.n_head, spec.hd,
                                            spec.seq_len,
                                            trainable_fraction=trainable / n if lora else 1.0)
        attn = F.attention_flops_per_token(spec.n_layer, spec.n_head, spec.hd, spec.seq_len)
        attn_causal = F.attention_flops_per_token(spec.n_layer, spec.n_head, spec.hd,
                                                  spec.seq_len, causal=True)
    else:
        per_token = 6.0 * n
        attn = attn_causal = 0.0
    # The work a causal kernel does, what llmtk train's MFU (and so --mfu) is measured on:
    # the time rows divide it by peak x MFU (llmtk.compute.flops)
    work_per_token = per_token - attn + attn_causal
    per_token_6n = 6.0 * n

    # --- what to solve for --------------------------------------------------------------
    tokens = req.tokens
    tokens_from = "--tokens"
    solved = None
    if req.solve == "gpus":
        if tokens is None:
            tokens, tokens_from = scaling.chinchilla_tokens(total), "chinchilla"
        need = tokens * work_per_token / (peak * req.mfu * req.days * 86400)
        n_gpus, rounding = gpus_to_buy(need, req.tp * req.pp * req.cp, req.gpus_per_node)
        solved = {"for": "gpus", "value": n_gpus, "exact": need, "days": req.days,
                  "rounded_to": rounding}
    elif req.solve == "tokens":
        tokens = n_gpus * peak * req.mfu * req.days * 86400 / work_per_token
        tokens_from = "solved"
        solved = {"for": "tokens", "value": tokens, "days": req.days}
    if tokens is None:
        tokens, tokens_from = scaling.chinchilla_tokens(total), "chinchilla"
    if tokens <= 0:
        raise ConfigError("tokens", f"must be > 0, got {tokens:g}")

    if req.solve == "layout":
        solved, req = _solve_layout(req, spec, counts, total, trainable, n_gpus, gpu, peak,
                                    work_per_token)
    dp, tp, pp = _layout(replace(req, dp=None) if req.solve == "gpus" else req, n_gpus)
    _check_cp_ep(req, spec, dp)
    par = memory.Parallel(dp=dp, tp=tp, pp=pp, zero=req.zero,
                          sp=req.sequence_parallel and tp > 1, cp=req.cp, ep=req.ep)
    seq = spec.seq_len if spec is not None else None
    global_batch = req.global_batch if req.global_batch is not None else req.micro_batch * dp
    if global_batch < 1:
        raise ConfigError("global_batch", f"must be >= 1, got {global_batch}")
    if global_batch % (req.micro_batch * dp):
        raise ConfigError("global_batch", f"{global_batch} is not a multiple of micro-batch x "
                          f"dp = {req.micro_batch} x {dp}")
    accum = global_batch // (req.micro_batch * dp)

    # Whole optimizer steps, rounded up (the last one is not skipped): the table's, the
    # JSON's and the emitted config's `steps`.
    steps = math.ceil(tokens / (global_batch * seq)) if seq else None
    total_flops = tokens * per_token
    work = tokens * work_per_token
    seconds = F.time_seconds(work, n_gpus, peak, req.mfu)
    if req.solve == "layout":  # the modelled step: compute + communication + bubble
        seconds = steps * solved["chosen"]["step_s"]
        solved["mfu_effective"] = work / (seconds * n_gpus * peak)
    if req.solve == "days":
        solved = {"for": "days", "value": seconds / 86400}
    gpu_hours = seconds * n_gpus / 3600
    recompute_factor = {"none": 1.0, "selective": 1.0, "full": 4.0 / 3.0}[req.recompute]

    result = {
        "model": {
            "name": spec.name if spec else "custom",
            "source": spec.source if spec else "--params",
            "note": spec.note if spec else "",
            "shape": _shape(spec),
            "params": total,
            "active_params": active,
            "matmul_params": n,  # the N of every FLOPs row
            "trainable_params": trainable,
            "lora_params": lora,
        },
        "run": {
            "tokens": tokens, "tokens_from": tokens_from,
            "gpus": n_gpus, "gpu": gpu.name, "gpu_memory_bytes": gpu.mem_bytes,
            "precision": req.precision, "peak_flops_per_gpu": peak, "mfu": req.mfu,
            "dp": dp, "tp": tp, "pp": pp, "cp": req.cp, "ep": req.ep, "zero": req.zero,
            "sequence_parallel": par.sp,
            "tokens_per_rank": seq / req.cp if seq else None,  # of each sequence
            "micro_batch": req.micro_batch, "global_batch": global_batch,
            # (--solve layout fills in req's global batch: the solver says where it is from)
            "global_batch_from": solved["global_batch_from"] if req.solve == "layout"
                                 else "--global-batch" if req.global_batch is not None
                                 else "micro-batch x dp",
            "grad_accum_steps": accum, "seq_len": seq,
            "tokens_per_step": global_batch * seq if seq else None,
            "steps": steps,
            "recompute": req.recompute, "optimizer": req.optimizer, "lora_rank": req.lora_rank,
            "lora_targets": req.lora_targets if req.lora_rank else None,
            "pipeline_bubble": (pp - 1) / (accum + pp - 1) if pp > 1 else 0.0,
        },
        "flops": {
            "per_token_6n": per_token_6n,
            "per_token": per_token,
            "attention_per_token": attn,
            # the causal kernel's work (half PaLM's attention term): what --mfu is of
            "attention_per_token_causal": attn_causal,
            "per_token_causal": work_per_token,
            "attention_share_causal": attn_causal / work_per_token,
            "total_6nd": F.flops_6nd(n, tokens),
            "total": total_flops,
            "total_causal": work,
            "hardware_total": work * recompute_factor,
        },
        "time": {
            "seconds": seconds, "days": seconds / 86400, "gpu_hours": gpu_hours,
            "price_per_gpu_hour": req.price_per_gpu_hour,
            "cost": gpu_hours * req.price_per_gpu_hour if req.price_per_gpu_hour else None,
            "tokens_per_second_per_gpu": tokens / seconds / n_gpus,
        },
        "memory": _memory(spec, counts, total, trainable, req, par, accum, gpu,
                          llmtk_model=req.solve == "layout"),
        "inference": {
            "weights": {k: total * b for k, b in INFERENCE_BYTES.items()},
            "kv_cache_per_token_bf16": (2 * spec.n_layer * spec.kv_heads * spec.hd * 2
                                        if spec else None),
        },
        "scaling": _scaling(req.fit, total, tokens),
        "solve": solved,
        "step": (solved["chosen"] if req.solve == "layout"
                 else _step(spec, counts, total, trainable, req, dp, n_gpus, gpu, peak,
                            work_per_token, global_batch)),
    }
    result["memory"]["llmtk_train_total"] = (
        result["memory"]["total"] if req.solve == "layout"
        else _llmtk_train_total(result, spec, counts, total, trainable, req, par, accum, gpu))
    result["suggestions"] = _suggestions(result, spec, counts, total, trainable, req, par,
                                         accum, gpu)
    return result


def _llmtk_train_total(result, spec, counts, total, trainable, req, par, accum,
                       gpu) -> float | None:
    """Per-GPU bytes of this layout as llmtk train runs it (its busiest rank): the memory
    `--solve layout` prices, `--emit-config` writes in its header and `llmtk train
    --dry-run` quotes, one computation for all three. None when train cannot run the
    layout (llmtk.estimate.emit.refusal) or without a shape."""
    if spec is None or refusal(req, result["run"], spec) is not None:
        return None
    return _memory(spec, counts, total, trainable, req, par, accum, gpu,
                   llmtk_model=True)["total"]


def _step(spec, counts, total, trainable, req, dp, n_gpus, gpu, peak, work_per_token,
          global_batch) -> dict | None:
    """The cost model's optimizer step for the layout as given (llmtk.estimate.layout:
    compute at --mfu, and the tp, cp, ep, pipeline and data-parallel traffic), with the
    bytes a rank moves for cp and ep; None without a shape. The time rows above are
    FLOPs / MFU instead (an MFU measured on a real run already includes its traffic)."""
    if spec is None:
        return None
    c = layout.Candidate(dp, req.tp, req.pp, 3 if req.zero == 3 else 0, req.micro_batch,
                         "full" if req.recompute == "full" else "selective", req.cp, req.ep)
    t = layout.step_time(spec, c, global_batch=global_batch, flops_per_token=work_per_token,
                         params=total, peak=peak, mfu=req.mfu, gpu=gpu,
                         per_node=req.gpus_per_node,
                         elem=memory.ACTIVATION_BYTES[req.precision], trainable=trainable,
                         expert_params=_experts(spec, counts))
    tokens_step = global_batch * spec.seq_len
    return {**t, "text": str(c), "tokens_per_s_per_gpu": tokens_step / t["step_s"] / n_gpus}


def _experts(spec, counts) -> float:
    """The routed experts' parameters (0 for a dense model or a published count)."""
    if spec is None or not spec.n_experts or counts.published:
        return 0.0
    return memory.expert_params(spec)


def n_flops(counts, active: float, lora: float | None) -> float:
    """The N of 6N, 6ND, PaLM's 6N + attention and llmtk train's MFU: the parameters one
    token's training multiplies by (count_params' `matmul`: the output head counts, the
    input-embedding lookup and a position table do not; MoE: the active experts'; LoRA:
    the frozen base and its adapters). `active` is --params when given: the shape's
    non-matmul part is taken from it. Chinchilla's law counts every parameter instead, so
    the Scaling rows use the total."""
    if counts is None:
        return active
    return active - (counts.active - counts.matmul) + (lora or 0.0)


def _solve_layout(req: Request, spec, counts, total, trainable, n_gpus, gpu, peak,
                  per_token) -> tuple[dict, Request]:
    """`--solve layout`: the fastest layout (llmtk.estimate.layout's cost model) whose
    memory, by this module's own formulas, fits the GPU. Returns (the answer, the request
    of the chosen layout) or raises ConfigError when no layout fits."""
    if spec is None:
        raise ConfigError("solve", "layout needs the model's shape ({0} or {1}/{2}/{3}), not "
                          "only {4}", also=("model", "layers", "d_model", "heads", "params"))
    gb = req.global_batch if req.global_batch is not None else n_gpus
    rows, smallest, searched = [], None, 0
    # --recompute full is the user's: search only it (selective is the default, searched
    # with full)
    modes = ("full",) if req.recompute == "full" else layout.RECOMPUTE
    ruled: dict[tuple, bool] = {}  # llmtk train's verdict per mesh (not per micro-batch)
    for c in layout.candidates(spec, n_gpus, req.gpus_per_node, gb, recompute=modes):
        mesh = (c.dp, c.tp, c.pp, c.cp, c.ep, c.zero)
        if mesh not in ruled:
            ruled[mesh] = rules.runs(spec, dp=c.dp, tp=c.tp, pp=c.pp, cp=c.cp, ep=c.ep,
                                     zero=c.zero)
        if not ruled[mesh]:
            continue  # llmtk train refuses it (its plan_layout / check_model)
        r = replace(req, dp=c.dp, tp=c.tp, pp=c.pp, cp=c.cp, ep=c.ep, zero=c.zero,
                    micro_batch=c.micro_batch, recompute=c.recompute, global_batch=gb,
                    sequence_parallel=c.tp > 1)
        searched += 1
        par = memory.Parallel(dp=c.dp, tp=c.tp, pp=c.pp, zero=c.zero, sp=c.tp > 1, cp=c.cp,
                              ep=c.ep)
        mem = _memory(spec, counts, total, trainable, r, par, gb // (c.micro_batch * c.dp),
                      gpu, llmtk_model=True)
        if smallest is None or mem["total"] < smallest[1]:
            smallest = (c, mem["total"])
        if not mem["fits"]:
            continue
        t = layout.step_time(spec, c, global_batch=gb, flops_per_token=per_token,
                             params=total, peak=peak, mfu=req.mfu, gpu=gpu,
                             per_node=req.gpus_per_node,
                             elem=memory.ACTIVATION_BYTES[req.precision],
                             trainable=trainable, expert_params=_experts(spec, counts))
        rows.append((c, t, mem["total"]))
    if not rows:
        if smallest is None:
            raise ConfigError("global_batch", f"{gb} sequences split over no data-parallel "
                              f"size of {n_gpus} GPUs (give a multiple of the GPU count)")
        c, need = smallest
        raise ConfigError("gpus", f"{spec.name} fits no layout of {n_gpus} x {gpu.name}: the "
                          f"smallest ({c}) needs {need / 1e9:,.1f} GB per GPU of "
                          f"{gpu.mem_bytes / 1e9:,.1f}; give more GPUs")
    # Fastest first, times rounded to steps of 0.1% (recomputation can only hide
    # communication that is exposed anyway); then no recompute, fewer micro-steps (bigger
    # matmuls run nearer the assumed MFU than the constant-MFU model can see), less memory.
    rows.sort(key=lambda x: (round(math.log(x[1]["step_s"]) / math.log(1.001)),
                             x[0].recompute == "full", x[0].cp, x[0].ep,
                             x[1]["micro_batches"], x[2]))
    tokens_step = gb * spec.seq_len

    def row(c, t, mem_total) -> dict:
        return {"dp": c.dp, "tp": c.tp, "pp": c.pp, "cp": c.cp, "ep": c.ep, "zero": c.zero,
                "micro_batch": c.micro_batch, "recompute": c.recompute, "text": str(c),
                "memory_bytes": mem_total, "tokens_per_s_per_gpu":
                tokens_step / t["step_s"] / n_gpus, **t}

    best = rows[0][0]
    answer = {"for": "layout", "value": str(best), "global_batch": gb,
              "global_batch_from": "--global-batch" if req.global_batch is not None
              else "one sequence per GPU (default)",
              "searched": searched,
              "fit": len(rows), "chosen": row(*rows[0]),
              "alternatives": [row(*x) for x in _distinct(rows)[1:6]]}
    chosen = replace(req, dp=best.dp, tp=best.tp, pp=best.pp, cp=best.cp, ep=best.ep,
                     zero=best.zero,
                     micro_batch=best.micro_batch, recompute=best.recompute, global_batch=gb,
                     sequence_parallel=best.tp > 1)
    return answer, chosen


def _distinct(rows: list) -> list:
    """The best row of each (dp, tp, pp, ZeRO, recompute): alternatives that differ in
    more than the micro-batch."""
    seen, out = set(), []
    for x in rows:
        key = (x[0].dp, x[0].tp, x[0].pp, x[0].cp, x[0].ep, x[0].zero, x[0].recompute)
        if key not in seen:
            seen.add(key)
            out.append(x)
    return out


def _shape(spec: ModelSpec | None) -> dict | None:
    if spec is None:
        return None
    return {"n_layer": spec.n_layer, "d_model": spec.d_model, "n_head": spec.n_head,
            "n_kv_head": spec.kv_heads, "head_dim": spec.hd, "ffn": spec.ffn,
            "vocab_size": spec.vocab_size, "seq_len": spec.seq_len, "glu": spec.glu,
            "n_experts": spec.n_experts, "top_k": spec.top_k,
            "n_shared_experts": spec.n_shared_experts, "expert_ffn": spec.expert_width,
            "moe_layers": spec.moe_layers,
            "norm": spec.norm, "tie_embeddings": spec.tie_embeddings, "dropout": spec.dropout,
            "text": spec.shape_text()}


def _memory(spec, counts, total, trainable, req, par, accum, gpu,
            llmtk_model: bool = False) -> dict:
    """Per-GPU memory. llmtk_model: what `llmtk train --dry-run` counts, for `--solve
    layout`: the trainer's own states (fp32 weights, frozen LoRA base included; fp32
    gradients), FSDP's buffers wherever train runs fully_shard (ZeRO 3, or replicas on a
    tp/pp mesh) and what it holds through a step (memory.fsdp_held_bytes), and the
    activations as the llmtk model saves them; else the ZeRO paper's states and
    Korthikanti's block."""
    ada = None
    if req.optimizer == "adafactor":
        if spec is None:
            ada = 0.0  # no shape to factor: the row/column statistics are negligible
        elif req.lora_rank is not None:
            ada = trainable  # small adapters: count an unfactored second moment
        else:
            ada = memory.adafactor_state_elems(spec)
    stored = total + (trainable if req.lora_rank else 0)
    mp = par.tp * par.pp
    experts = _experts(spec, counts)
    # LoRA's expert adapters (--lora-targets experts): split over ep with their experts,
    # and the experts frozen (only the adapters trained)
    lora = req.lora_rank if spec is not None else None
    targets = lora_targets(req) if lora else ()
    lora_shard = None
    if llmtk_model:
        # llmtk train keeps fp32 parameters and gradients under bf16 autocast (its masters
        # are its weights): fp32's bytes, and a frozen base costs 4 bytes, not 2. The
        # busiest rank's share, then ZeRO's sharding over dp.
        lora_shard = (memory.lora_params(spec, req.lora_rank, tp=par.tp, targets=targets)
                      if lora else None)
        stage, stage_trained = _stage_share(spec, counts, stored, trainable, par, lora_shard)
        in_stage = max(stage_layers(spec.n_layer, par.pp)) / spec.n_layer if par.pp > 1 \
            else 1.0
        adapters = (memory.expert_adapter_params(spec, lora, tp=par.tp, targets=targets)
                    if experts else 0.0) * in_stage
        states = memory.model_state_bytes(
            stage, precision="fp32", optimizer=req.optimizer,
            par=replace(par, tp=1, pp=1), trainable=stage_trained,
            adafactor_elems=None if ada is None else ada / mp,
            expert_params=experts / par.tp * in_stage + adapters,
            expert_trainable=adapters if lora else None)
    else:
        adapters = memory.expert_adapter_params(spec, lora, targets=targets) if experts else 0.0
        states = memory.model_state_bytes(
            stored, precision=req.precision, optimizer=req.optimizer, par=par,
            trainable=trainable, adafactor_elems=ada, expert_params=experts + adapters,
            expert_trainable=adapters if lora else None)
    fully_shard = req.zero == 3 or (llmtk_model and mp > 1)
    buffers = held = 0.0
    if fully_shard and counts is not None:
        # one block on one tp rank, as the placement table splits it (and its adapters,
        # the experts' E/ep of them)
        block = memory.block_params(spec, tp=par.tp, ep=par.ep) + (
            (lora_shard - adapters * (1 - 1 / par.ep)) / spec.n_layer if lora_shard else 0.0)
        buffers = memory.fsdp_buffer_bytes(block, precision=req.precision,
                                           full_grads=req.lora_rank is None)
    if fully_shard and llmtk_model:
        held = memory.fsdp_held_bytes(stage, stage_trained, precision=req.precision,
                                      dp_shard=par.shard_group if req.zero == 3 else par.cp,
                                      pp=par.pp)
    elem = memory.ACTIVATION_BYTES[req.precision]
    fixed = sum(states.values()) + buffers + held
    out = dict(states)
    out["fsdp_buffers"] = buffers
    out["fsdp_held"] = held
    out["model_states"] = sum(states.values())
    capacity = gpu.mem_bytes
    out["states_fit"] = memory.with_overhead(fixed)[1] <= capacity
    if spec is None:
        overhead, total_bytes = memory.with_overhead(fixed)
        # Without the shape the activations are unknown, so "fits" cannot be said; only
        # "does not fit" can, when the model states alone are too large.
        out.update(activations=None, activations_per_sample=None, overhead=overhead,
                   total=total_bytes, capacity=capacity,
                   fits=False if total_bytes > capacity else None,
                   max_micro_batch=None,
                   note="activations not counted: give the shape (--model or "
                        "--layers/--d-model/--heads)")
        return out
    if llmtk_model:
        from llmtk.estimate.activations import llmtk_busiest_bytes

        def activations(b: int) -> tuple[float, float]:
            return llmtk_busiest_bytes(spec, b, tp=par.tp, pp=par.pp, n_micro=accum,
                                       recompute=req.recompute, bf16=elem == 2,
                                       fsdp=par.zero == 3 or par.tp * par.pp > 1,
                                       lora_rank=req.lora_rank, cp=par.cp)
    else:
        def activations(b: int) -> tuple[float, float]:
            return (memory.activation_bytes(spec, b, par=par, recompute=req.recompute,
                                            elem=elem, n_micro=accum),
                    memory.recompute_layer_bytes(spec, b, par=par, recompute=req.recompute,
                                                 elem=elem))
    (act, redo), (act1, redo1) = activations(req.micro_batch), activations(1)
    out["activations_from"] = "llmtk" if llmtk_model else "korthikanti"
    overhead, total_bytes = memory.with_overhead(fixed + act + redo)
    # activations: what forward saves; recompute_layer: the layer recomputed in backward
    out.update(activations=act, recompute_layer=redo, activations_per_sample=act1 + redo1,
               overhead=overhead, total=total_bytes, capacity=capacity,
               fits=total_bytes <= capacity,
               max_micro_batch=memory.max_micro_batch(fixed, act1 + redo1, capacity), note="")
    return out


def _stage_share(spec, counts, stored, trained, par, lora_shard=None) -> tuple[float, float]:
    """(parameters, trained parameters) of the busiest rank per tp shard, before the
    data-parallel sharding, as llmtk train places them (llmtk.train.layout.dryrun, both
    reading llmtk.compute.placement): each block's matrices split over tp and its norms
    whole; the token tables split by vocabulary; the final norm whole. Under a pipeline,
    the first or the last stage, whichever holds more: its blocks (the first stages take
    one more when pp does not divide the layers) and the embedding table, or the final
    norm and the head (a tied head is a copy there). `lora_shard`: a tp rank's LoRA
    adapters (memory.lora_params with tp), all in the blocks."""
    t = par.tp
    if counts is None:
        return stored / t, trained / t
    if lora_shard is None:
        lora_shard = (stored - counts.total) / t  # no adapters: 0
    block = memory.block_params(spec, tp=t)
    if spec.n_experts:  # the mean block (block_params: the largest, a MoE one)
        block *= counts.per_layer / memory.block_params(spec)
    final_norm = 2 * spec.d_model if spec.norm == "layernorm" else spec.d_model
    if par.pp == 1:
        tables = (counts.total - spec.n_layer * counts.per_layer - final_norm) / t
        stage = spec.n_layer * block + tables + final_norm + lora_shard
        return stage, (lora_shard if lora_shard else stage)
    lora = lora_shard / spec.n_layer  # one block's, on one tp rank
    table = spec.vocab_size * spec.d_model / t
    split = stage_layers(spec.n_layer, par.pp)  # llmtk train's default split
    most, least = max(split), min(split)
    stage = max(most * (block + lora) + table, least * (block + lora) + table + final_norm)
    return stage, (most * lora if lora else stage)


def _scaling(fit_name: str, n: float, tokens: float) -> dict:
    fit = scaling.FITS[fit_name]
    n_opt, d_opt = fit.compute_optimal(6 * n * tokens)
    return {
        "fit": fit.name, "source": fit.source,
        "constants": {"E": fit.E, "A": fit.A, "B": fit.B, "alpha": fit.alpha, "beta": fit.beta},
        "chinchilla_tokens": scaling.chinchilla_tokens(n),
        "tokens_per_param": tokens / n,
        "predicted_loss": fit.loss(n, tokens),
        "optimal_params": n_opt, "optimal_tokens": d_opt,
        "optimal_loss": fit.loss(n_opt, d_opt),
    }


def _suggestions(result, spec, counts, total, trainable, req, par, accum, gpu) -> list[str]:
    """When the plan does not fit, the nearest changes that make it fit."""
    mem = result["memory"]
    if mem["fits"] is not False:  # fits, or unknown (activations not counted)
        return []
    tries = []
    for z in (1, 2, 3):
        if z > req.zero:
            tries.append((f"--zero {z}", replace(req, zero=z), replace(par, zero=z)))
    for rc in ("selective", "full"):
        if memory.RECOMPUTE.index(rc) > memory.RECOMPUTE.index(req.recompute):
            tries.append((f"--recompute {rc}", replace(req, recompute=rc), par))
    if req.micro_batch > 1:
        tries.append(("--micro-batch 1", replace(req, micro_batch=1), par))
    out = []
    for label, r, p in tries:
        m = _memory(spec, counts, total, trainable, r, p, accum, gpu)
        if m["fits"]:
            out.append(f"{label}: {m['total'] / 1e9:,.1f} GB per GPU")
    if not out and (req.zero < 3 or req.recompute != "full"):
        r = replace(req, zero=3, recompute="full", micro_batch=1)
        m = _memory(spec, counts, total, trainable, r, replace(par, zero=3), accum, gpu)
        if m["fits"]:
            out.append(f"--zero 3 --recompute full --micro-batch 1: "
                       f"{m['total'] / 1e9:,.1f} GB per GPU")
    if not out:
        out.append("more GPUs (--tp/--pp/--zero 3 over more ranks) or a smaller model")
    return out
