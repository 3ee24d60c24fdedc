"""Draw an estimate (the dict from `plan.estimate`) as a rich table for people."""

from __future__ import annotations

from llmtk.estimate.memory import OVERHEAD_FIXED, OVERHEAD_FRACTION
from llmtk.io.console import buffered_console
from llmtk.units import duration, gb, sci, si

_RECOMPUTE_NOTE = {
    "none": "Korthikanti et al. 2022, attention scores stored",
    "selective": "Korthikanti et al. 2022, selective recompute (= flash/SDPA attention)",
    "full": "Korthikanti et al. 2022, full recompute: layer inputs only",
}
_OPT_NOTE = {"adamw": "AdamW m and v, fp32", "sgd": "SGD momentum, fp32",
             "adafactor": "Adafactor factored second moment, fp32"}


def render(r: dict, file) -> None:
    from rich.table import Table

    console, emit = buffered_console(file)
    run, model, fl, tm, mem = r["run"], r["model"], r["flops"], r["time"], r["memory"]

    title = (f"llmtk estimate: {model['name']} · {si(run['tokens'])} tokens · "
             f"{run['gpus']:,} x {run['gpu']} · {run['precision']} · MFU {run['mfu']:.0%}")
    console.print(f"[bold]{title}[/bold]")
    sections: list[tuple[str, list[tuple[str, str, str]]]] = []

    class _Rows:
        def add_row(self, what: str, value: str, note: str) -> None:
            sections[-1][1].append(("  " + what.strip(), value, note))

    t = _Rows()

    def section(name: str) -> None:
        sections.append((name, []))

    solve = r.get("solve")
    if solve:
        section("Answer (--solve)")
        if solve["for"] == "gpus":
            t.add_row("  GPUs needed", f"[bold]{solve['value']:,}[/bold]",
                      f"{run['gpu']} to finish in {solve['days']:g} days "
                      f"(exactly {solve['exact']:,.1f}, rounded up to "
                      f"{solve['rounded_to']})")
        elif solve["for"] == "tokens":
            t.add_row("  tokens", f"[bold]{si(solve['value'])}[/bold]",
                      f"trainable in {solve['days']:g} days on {run['gpus']:,} x {run['gpu']}")
        elif solve["for"] == "layout":
            _layout_rows(t, solve, run)
        else:
            t.add_row("  days", f"[bold]{solve['value']:,.1f}[/bold]",
                      f"on {run['gpus']:,} x {run['gpu']}")

    section("Model")
    t.add_row("  parameters", si(model["params"]), model["source"])
    if model["active_params"] != model["params"]:
        t.add_row("  active per token", si(model["active_params"]), "mixture of experts")
    t.add_row("  N: in matmuls", si(model["matmul_params"]),
              "the N of every FLOPs row (6N, 6·N·D, MFU): "
              + ("base and adapters; " if model["lora_params"] else "")
              + ("no input-embedding lookup or position table" if model["shape"]
                 else "all parameters (no shape to find the embedding lookup in)"))
    if model["lora_params"]:
        t.add_row("  trainable (LoRA)", si(model["lora_params"]),
                  f"rank {run['lora_rank']} on {run['lora_targets']}; base frozen")
    if model["shape"]:
        t.add_row("  shape", "", model["shape"]["text"])
    if model["note"]:
        t.add_row("  note", "", model["note"])

    section("Compute")
    tf = run["tokens_from"]
    tok_note = {"--tokens": "", "chinchilla": "no --tokens: Chinchilla's 20 x parameters",
                "solved": "solved"}[tf]
    t.add_row("  training tokens", si(run["tokens"]), tok_note)
    t.add_row("  FLOPs 6·N·D", sci(fl["total_6nd"]),
              f"Kaplan et al. 2020: 6 x {si(model['matmul_params'])} x {si(run['tokens'])}")
    if fl["attention_per_token"]:
        share = fl["attention_per_token"] / fl["per_token"]
        dense = "4N + 2 x adapters" if model["lora_params"] else "6N"  # frozen: no dW
        t.add_row("  FLOPs with attention", sci(fl["total"]),
                  f"PaLM: ({dense} + 12·L·H·Q·T)·D; attention is {share:.1%} of it")
        t.add_row("  causal work", sci(fl["total_causal"]),
                  f"({dense} + 6·L·H·Q·T)·D: a causal kernel does half the attention term; "
                  f"attention is {fl['attention_share_causal']:.1%} of it; the time rows "
                  "divide it by peak x MFU (llmtk train's MFU counts it so)")
    t.add_row("  model FLOPs per token", sci(fl["per_token"]),
              f"PaLM's count; causal {sci(fl['per_token_causal'])}, what --mfu (llmtk train's "
              "MFU) is measured against")
    if fl["hardware_total"] != fl["total_causal"]:
        t.add_row("  hardware FLOPs", sci(fl["hardware_total"]),
                  "+ one forward pass recomputed")

    section("Time and cost")
    if solve and solve["for"] == "layout":
        t.add_row("  wall clock", duration(tm["seconds"]),
                  f"optimizer steps x the modelled step time: effective MFU "
                  f"{solve['mfu_effective']:.1%} of {run['peak_flops_per_gpu'] / 1e12:,.0f} "
                  f"TFLOP/s")
    else:
        t.add_row("  wall clock", duration(tm["seconds"]),
                  f"{run['gpus']:,} GPUs at {run['mfu']:.0%} of "
                  f"{run['peak_flops_per_gpu'] / 1e12:,.0f} TFLOP/s ({run['precision']} "
                  "dense peak)")
    t.add_row("  GPU-hours", f"{tm['gpu_hours']:,.0f}", "")
    if tm["cost"] is not None:
        t.add_row("  cost", f"${tm['cost']:,.0f}", f"at ${tm['price_per_gpu_hour']:g} per GPU-hour")
    else:
        t.add_row("  cost", "-", "give --price-per-gpu-hour")
    t.add_row("  throughput", f"{tm['tokens_per_second_per_gpu']:,.0f}", "tokens/s per GPU")
    if run["steps"]:
        t.add_row("  optimizer steps", f"{run['steps']:,}",
                  f"global batch {run['global_batch']:,} x {run['seq_len']:,} = "
                  f"{si(run['tokens_per_step'])} tokens; grad accumulation "
                  f"{run['grad_accum_steps']}")
    if run["pp"] > 1:
        told = ("" if run["global_batch_from"] == "--global-batch"
                else f"; default: {run['global_batch_from']}, set --global-batch")
        modelled = solve and solve["for"] == "layout"  # the step time above adds it
        t.add_row("  pipeline bubble", f"{run['pipeline_bubble']:.1%}",
                  f"(pp-1)/(m+pp-1), 1F1B, m = {run['grad_accum_steps']} micro-batches "
                  f"(global batch {run['global_batch']:,} sequences{told}); "
                  + ("in the modelled step time" if modelled
                     else "MFU should already include it"))

    if r.get("search"):
        _search_rows(t, section, r["search"], run)

    step = r.get("step")
    if step and (run["cp"] > 1 or run["ep"] > 1) and not (solve and solve["for"] == "layout"):
        _traffic_rows(t, section, step, run)

    sp = " +sp" if run["sequence_parallel"] else ""
    cp = f" · cp {run['cp']}" if run["cp"] > 1 else ""
    ep = f" · ep {run['ep']}" if run["ep"] > 1 else ""
    section(f"Memory per GPU (dp {run['dp']} · tp {run['tp']}{sp} · pp {run['pp']}{cp}{ep} · "
            f"ZeRO-{run['zero']} · micro-batch {run['micro_batch']})")
    trainer = mem.get("activations_from") == "llmtk"  # --solve layout: llmtk train's bytes
    wb = "fp32" if run["precision"] == "fp32" or trainer else "bf16"
    t.add_row("  weights", gb(mem["weights"]), wb + (" (frozen base + adapters)"
                                                     if run["lora_rank"] else "")
              + (", as llmtk train keeps them (bf16 only inside autocast)"
                 if trainer and run["precision"] != "fp32" else ""))
    t.add_row("  gradients", gb(mem["gradients"]), wb)
    t.add_row("  fp32 master weights", gb(mem["master_weights"]),
              "" if mem["master_weights"] else "none: the fp32 weights are the masters"
              if trainer else "none in fp32 training")
    t.add_row("  optimizer states", gb(mem["optimizer"]), _OPT_NOTE[run["optimizer"]])
    if mem["fsdp_buffers"]:
        t.add_row("  FSDP gather buffers", gb(mem["fsdp_buffers"]),
                  "2 layers' weights + 1 layer's grads unsharded")
    if mem.get("fsdp_held"):
        t.add_row("  FSDP held through a step", gb(mem["fsdp_held"]),
                  "a pipeline stage's gathered weights, and its fp32 gradients whole "
                  "(ZeRO 3) until the step's one reduce-scatter")
    if mem["activations"] is None:
        t.add_row("  activations", "?", mem["note"])
    else:
        t.add_row("  activations", gb(mem["activations"]),
                  "the llmtk model's own, as llmtk train --dry-run counts them (--solve "
                  f"layout), recompute {run['recompute']}"
                  if mem.get("activations_from") == "llmtk" else _RECOMPUTE_NOTE[run["recompute"]])
    if mem.get("recompute_layer"):
        t.add_row("  recomputed layer", gb(mem["recompute_layer"]),
                  "full recompute: a layer's backward runs its forward again and holds its "
                  "activations for that moment")
    t.add_row("  overhead", gb(mem["overhead"]),
              f"{OVERHEAD_FIXED / 2**30:g} GiB context/workspaces + "
              f"{OVERHEAD_FRACTION:.0%} fragmentation")
    t.add_row("  [bold]total[/bold]", f"[bold]{gb(mem['total'])}[/bold]", "")
    cap = f"{gb(mem['capacity'])} ({run['gpu']}, {mem['capacity'] / 2**30:g} GiB)"
    used = f"{mem['total'] / mem['capacity']:.0%} used"
    if mem["fits"] is None:
        verdict = (f"[yellow]unknown[/yellow]: activations not counted; without them "
                   f"{used} of {cap}")
    elif mem["fits"]:
        verdict = f"[green]fits[/green] in {cap}: {used}"
    else:
        verdict = f"[red]does not fit[/red] in {cap}: {used}"
    t.add_row("  [bold]verdict[/bold]", "", verdict)
    if mem["llmtk_train_total"] is not None and not trainer:
        t.add_row("  as llmtk train holds it", gb(mem["llmtk_train_total"]),
                  "this layout in llmtk train (fp32 states, its model's own activations), "
                  "its busiest rank: what --solve layout, --emit-config and train --dry-run "
                  "print")
    if mem["max_micro_batch"] is not None:
        mb = mem["max_micro_batch"]
        per_seq = f"{gb(mem['activations_per_sample'])} activations per sequence"
        if mb:
            why = per_seq
        elif mem["states_fit"]:
            why = f"states fit, but not with even one sequence ({per_seq})"
        else:
            why = "the model states alone do not fit"
        t.add_row("  largest micro-batch", str(mb) if mb else "none", why)
    for s in r.get("suggestions", []):
        t.add_row("  would fit with", "", s)

    section("Inference weights")
    w = r["inference"]["weights"]
    t.add_row("  fp32 / bf16", f"{gb(w['fp32'])} / {gb(w['bf16'])}",
              f"{si(model['params'])} x 4 / x 2 bytes")
    t.add_row("  fp8 / int4", f"{gb(w['fp8'])} / {gb(w['int4'])}", "x 1 / x 0.5 bytes")
    kv = r["inference"]["kv_cache_per_token_bf16"]
    if kv:
        t.add_row("  KV cache", f"{kv / 1024:,.0f} KiB", "per token of context, bf16")

    sc = r["scaling"]
    c = sc["constants"]
    section("Scaling (Chinchilla)")
    t.add_row("  compute-optimal tokens", si(sc["chinchilla_tokens"]),
              f"20 x parameters (Chinchilla counts all, not N); this run: "
              f"{sc['tokens_per_param']:,.1f} tokens/param")
    t.add_row("  predicted loss", f"{sc['predicted_loss']:.3f}",
              f"{sc['source']}: E={c['E']:g} A={c['A']:g} B={c['B']:g} "
              f"α={c['alpha']:g} β={c['beta']:g}")
    t.add_row("  optimal at this compute", f"{si(sc['optimal_params'])} params",
              f"{si(sc['optimal_tokens'])} tokens, loss {sc['optimal_loss']:.3f}")
    for name, rows in sections:
        table = Table(title=f"[bold]{name}[/bold]", title_justify="left", show_header=False,
                      box=None, padding=(0, 1), pad_edge=False)
        table.add_column("what", width=26, no_wrap=True)
        table.add_column("value", width=19, justify="right", no_wrap=True)
        table.add_column("note", overflow="fold")
        for row in rows:
            table.add_row(*row)
        console.print()
        console.print(table)
    emit()


def _layout_rows(t, solve: dict, run: dict) -> None:
    """`--solve layout`: the chosen layout, its step time by part, and the runners-up."""
    c = solve["chosen"]
    names, sizes = "dp x tp x pp", f"{c['dp']} x {c['tp']} x {c['pp']}"
    extra = [dim for dim in ("cp", "ep") if c[dim] > 1]
    if extra:  # the label column is 26 wide
        names = "·".join(["dp", "tp", "pp", *extra])
        sizes = " x ".join(str(c[d]) for d in ("dp", "tp", "pp", *extra))
    t.add_row(f"  layout ({names})", f"[bold]{sizes}[/bold]",
              f"{c['text']}: the fastest of the {solve['fit']:,} layouts that fit "
              f"({solve['searched']:,} searched); global batch {solve['global_batch']:,} "
              f"sequences ({solve['global_batch_from']})")
    t.add_row("  step time", _s(c["step_s"]), _parts(c))
    t.add_row("  throughput", f"{c['tokens_per_s_per_gpu']:,.0f}",
              f"tokens/s per GPU: effective MFU {solve['mfu_effective']:.1%} "
              f"(--mfu {run['mfu']:g} for the matmuls)")
    t.add_row("  memory", gb(c["memory_bytes"]), "per GPU (the table below)")
    for a in solve["alternatives"]:
        t.add_row("  alternative", _s(a["step_s"]),
                  f"{a['text']}: {a['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU, "
                  f"{gb(a['memory_bytes'])}")


def _traffic_rows(t, section, step: dict, run: dict) -> None:
    """--cp/--ep given: their traffic per optimizer step in the cost model (docs/estimate.md)."""
    section("Context and expert parallel traffic (the cost model's step)")
    m = step["micro_batches"]
    if run["cp"] > 1:
        t.add_row("  cp K/V", gb(step["cp_bytes"]),
                  f"per GPU per step, {_s(step['cp_s'])}: all-gather K, V of the whole "
                  f"sequence and reduce-scatter dK, dV, per layer, {m} micro-batch"
                  f"{'es' if m > 1 else ''}")
    if run["ep"] > 1:
        t.add_row("  ep all-to-all", gb(step["ep_bytes"]),
                  f"per GPU per step, {_s(step['ep_s'])}: dispatch and combine, forward and "
                  "backward, per MoE layer")
    t.add_row("  modelled step", _s(step["step_s"]), _parts(step))


def _s(seconds: float) -> str:
    return f"{seconds:,.2f} s" if seconds >= 1 else f"{seconds * 1e3:,.2f} ms"


def _parts(c: dict) -> str:
    parts = [f"compute {_s(c['compute_s'])}"]
    if c["tp_s"]:
        parts.append(f"tp {_s(c['tp_s'])}")
    if c.get("cp_s"):
        parts.append(f"cp K/V {_s(c['cp_s'])}")
    if c.get("ep_s"):
        parts.append(f"ep all-to-all {_s(c['ep_s'])}")
    if c["bubble_s"]:
        parts.append(f"bubble {_s(c['bubble_s'])} ({c['bubble']:.0%})")
    if c["pp_s"]:
        parts.append(f"pp send {_s(c['pp_s'])}")
    if c["dp_comm_s"]:
        parts.append(f"data-parallel exposed {_s(c['dp_exposed_s'])} (of "
                     f"{_s(c['dp_comm_s'])}; the rest overlaps compute)")
    return " + ".join(parts)


def _search_rows(t, section, s: dict, run: dict) -> None:
    """`--search-trials K --proxy FILE`: the K proxies beside the run (RegMix: ~2%)."""
    section(f"Mixture search ({s['trials']:,} proxy trainings, llmtk mix search)")
    t.add_row("  proxy", si(s["proxy_params"]),
              f"{s['proxy_shape']}; N in matmuls {si(s['proxy_matmul_params'])}")
    t.add_row("  tokens", si(s["tokens"]),
              f"{s['trials']:,} x {si(s['tokens_per_trial'])} (steps x batch x seq-len)")
    t.add_row("  FLOPs 6·N·D", sci(s["flops_6nd"]),
              f"{_percent(s['share_of_run_6nd'])} of the run's")
    t.add_row("  FLOPs with attention", sci(s["flops"]),
              f"{_percent(s['share_of_run'])} of the run's")
    t.add_row("  wall clock", duration(s["seconds"]),
              f"on the run's {run['gpus']:,} GPUs at {run['mfu']:.0%} MFU (small proxies "
              "reach less: a lower bound)")
    t.add_row("  GPU-hours", f"{s['gpu_hours']:,.1f}" if s["gpu_hours"] >= 0.1
              else f"{s['gpu_hours']:.2g}",
              f"{_percent(s['share_of_run_gpu_hours'])} of the run's (RegMix: 512 proxies, "
              "~2% of one 1B run)")
    if s["cost"] is not None:
        t.add_row("  cost", f"${s['cost']:,.0f}", "")


def _percent(x: float) -> str:
    """A share as a percentage with three significant digits (0.0123% as well as 12.3%)."""
    return f"{100 * x:.3g}%"
