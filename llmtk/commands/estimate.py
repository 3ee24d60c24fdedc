"""`llmtk estimate`: FLOPs, memory per GPU, time, GPU-hours, cost and Chinchilla tokens for a run.

Numbers are read as text and checked here (so `7B`, `1.4T` work and a bad value
is one line naming its option); the arithmetic lives in `llmtk.estimate`.
Nothing here imports torch unless --measure is given.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from llmtk.commands import configs
from llmtk.commands import options as o
from llmtk.compute.placement import DEFAULT_LORA_TARGETS

HELP = """\
FLOPs, memory per GPU, time, GPU-hours, cost and Chinchilla tokens for a training run.

Give a model by preset (--model), by size (--params) or by shape (--layers,
--d-model, --heads, ...), the tokens and the GPUs. Prints a table (or --json):
6ND and PaLM FLOPs, time and cost at --mfu, per-GPU memory with ZeRO/TP/PP and a
fits / does-not-fit verdict with the largest micro-batch, inference weight sizes,
and the Chinchilla-optimal budget. --solve layout picks the fastest data, tensor and
pipeline layout (and context/expert parallel, for long sequences and MoE) that
fits. --measure checks the memory model against the
real llmtk model built on CPU.

[bold]Examples[/bold]

  llmtk estimate --model llama3-8b --tokens 15T --gpus 1024xH100 --zero 1

  llmtk estimate --model llama2-70b --gpus 512xA100-80 --tp 8 --pp 4 \\
    --sequence-parallel

  llmtk estimate --model llama3-70b --tokens 2T --gpus H100 \\
    --solve gpus --days 30

  llmtk estimate --model llama3-70b --gpus 256xH100 --global-batch 512 \\
    --solve layout --emit-config run.toml

  llmtk estimate --model llama3-8b --seq-len 131072 --cp 8 --tokens 1T \\
    --gpus 64xH100 --zero 3 --recompute full

  llmtk estimate --params 535e9 --gpus 8xH200 --json | jq .inference.weights

  llmtk estimate --layers 4 --d-model 128 --heads 4 --vocab 257 \\
    --seq-len 256 --measure

  llmtk estimate --model llama3-8b --tokens 1T --gpus 64xH100 \\
    --search-trials 64 --proxy proxy.toml

  llmtk estimate --list
"""

EPILOG = "Exit status: 0 success, 1 runtime error, 2 bad usage. Sources: docs/estimate.md."

MODEL = "Model"
RUN = "Run"
PAR = "Parallelism and memory"
SEARCH = "Mixture search (llmtk mix search)"



def _opt(name: str, metavar: str, help: str, panel: str | None = None):
    return typer.Option(name, metavar=metavar, help=help, rich_help_panel=panel)


Text = str | None


def command(
    model: Annotated[Text, _opt("--model", "NAME", "Preset name (see --list), e.g. llama3-8b.",
                                MODEL)] = None,
    params: Annotated[Text, _opt("--params", "N", "Parameter count, e.g. 535e9 or 7B "
                                 "(overrides the preset's).", MODEL)] = None,
    layers: Annotated[Text, _opt("--layers", "N", "Transformer layers.", MODEL)] = None,
    d_model: Annotated[Text, _opt("--d-model", "N", "Hidden size.", MODEL)] = None,
    heads: Annotated[Text, _opt("--heads", "N", "Attention (query) heads.", MODEL)] = None,
    kv_heads: Annotated[Text, _opt("--kv-heads", "N", "Key/value heads (GQA); default = "
                                   "--heads.", MODEL)] = None,
    head_dim: Annotated[Text, _opt("--head-dim", "N", "Head dimension; default d_model / "
                                   "heads.", MODEL)] = None,
    ffn_hidden: Annotated[Text, _opt("--ffn-hidden", "N", "MLP hidden width; default SwiGLU "
                                     "8/3 x d_model rounded to 64.", MODEL)] = None,
    # the name before it matched `llmtk train --ffn-hidden`; still accepted, not shown
    ffn: Annotated[Text, typer.Option("--ffn", hidden=True)] = None,
    vocab: Annotated[Text, _opt("--vocab", "N", "Vocabulary size (default 32000 for a custom "
                                "shape).", MODEL)] = None,
    seq_len: Annotated[Text, _opt("--seq-len", "N", "Sequence length (default: the preset's, "
                                  "or 2048).", MODEL)] = None,
    tokens: Annotated[Text, _opt("--tokens", "N", "Training tokens, e.g. 15e12 or 15T "
                                 "(default: Chinchilla's 20 x parameters).", RUN)] = None,
    gpus: Annotated[str, _opt("--gpus", "COUNTxGPU", "GPUs, e.g. 1024xH100 (see --list).",
                              RUN)] = "1xH100",
    gpus_per_node: Annotated[str, _opt("--gpus-per-node", "N", "GPUs per node: --solve gpus "
                                       "answers in whole nodes.", RUN)] = "8",
    mfu: Annotated[str, _opt("--mfu", "FRACTION", "Model FLOPs utilisation, 0-1.", RUN)] = "0.4",
    price: Annotated[Text, _opt("--price-per-gpu-hour", "DOLLARS", "Dollars per GPU-hour, for "
                                "the cost line.", RUN)] = None,
    precision: Annotated[str, _opt("--precision", "NAME", "bf16-mixed, fp16-mixed, fp8 or "
                                   "fp32.", RUN)] = "bf16-mixed",
    optimizer: Annotated[str, _opt("--optimizer", "NAME", "adamw, sgd (momentum) or "
                                   "adafactor.", RUN)] = "adamw",
    lora_rank: Annotated[Text, _opt("--lora-rank", "R", "Fine-tune LoRA adapters of this "
                                    "rank; the base is frozen.", RUN)] = None,
    lora_targets: Annotated[str, _opt("--lora-targets", "LIST", "With --lora-rank: the "
                                      "adapted matrices, as llmtk train's (q,k,v,o,gate,up,"
                                      "down,experts; experts: every routed expert's three).",
                                      RUN)] = DEFAULT_LORA_TARGETS,
    solve: Annotated[Text, _opt("--solve", "WHAT", "gpus, days, tokens or layout: answer 'how "
                                "many GPUs for --days 30?' or 'which dp x tp x pp is fastest "
                                "on --gpus?'.", RUN)] = None,
    days: Annotated[Text, _opt("--days", "DAYS", "Target wall-clock days for --solve "
                               "gpus|tokens.", RUN)] = None,
    scaling_fit: Annotated[str, _opt("--scaling-fit", "NAME", "Chinchilla loss fit: "
                                     "besiroglu (2024 replication) or hoffmann.", RUN)
                           ] = "besiroglu",
    dp: Annotated[Text, _opt("--dp", "N", "Data-parallel size (default: GPUs / (tp x pp)).",
                             PAR)] = None,
    tp: Annotated[str, _opt("--tp", "N", "Tensor-parallel size.", PAR)] = "1",
    pp: Annotated[str, _opt("--pp", "N", "Pipeline-parallel stages.", PAR)] = "1",
    cp: Annotated[str, _opt("--cp", "N", "Context-parallel size: each GPU holds 1/N of every "
                            "sequence (long context).", PAR)] = "1",
    ep: Annotated[str, _opt("--ep", "N", "Expert-parallel size (MoE): experts split over N "
                            "of the dp x cp GPUs.", PAR)] = "1",
    zero: Annotated[str, _opt("--zero", "STAGE", "ZeRO stage 0-3 (FSDP full sharding = 3).",
                              PAR)] = "0",
    sequence_parallel: Annotated[bool, typer.Option(
        "--sequence-parallel", help="Megatron sequence parallelism (with --tp > 1).",
        rich_help_panel=PAR)] = False,
    micro_batch: Annotated[str, _opt("--micro-batch", "N", "Sequences per GPU per forward "
                                     "pass.", PAR)] = "1",
    global_batch: Annotated[Text, _opt("--global-batch", "N", "Sequences per optimizer step "
                                       "(default micro-batch x dp).", PAR)] = None,
    recompute: Annotated[str, _opt("--recompute", "WHAT", "none, selective (= flash/SDPA "
                                   "attention) or full.", PAR)] = "selective",
    measure: Annotated[bool, typer.Option(
        "--measure", help="Build the llmtk model on CPU at this shape and compare measured "
        "with predicted bytes (needs torch; small shapes).")] = False,
    batch: Annotated[str, _opt("--batch", "N", "Batch size for --measure.")] = "2",
    emit_config: Annotated[Text, _opt(
        "--emit-config", "FILE", "Also write this layout as a TOML that `llmtk train "
        "--config FILE` reads (check it with `--dry-run`).", PAR)] = None,
    search_trials: Annotated[Text, _opt(
        "--search-trials", "K", "Also price a `mix search` of K proxy trainings (with "
        "--proxy), against this run.", SEARCH)] = None,
    proxy: Annotated[Text, _opt(
        "--proxy", "FILE", "The search's proxy: its `llmtk train --config` file (shape, steps, "
        "batch, seq-len); vocabulary: its `tokenizer`, else this model's.", SEARCH)] = None,
    list_: Annotated[bool, typer.Option("--list", help="List presets and GPUs, then exit.")
                     ] = False,
    json_out: o.Json = False,
) -> None:
    from llmtk.compute.models import Dims
    from llmtk.estimate.plan import Request, estimate
    from llmtk.units import parse_number as num

    if list_:
        _list(json_out)
        return

    def whole(opt, v, lo=1):
        return num(opt, v, integer=True, minimum=lo)

    dims = Dims(layers=whole("--layers", layers), d_model=whole("--d-model", d_model),
                heads=whole("--heads", heads), kv_heads=whole("--kv-heads", kv_heads),
                head_dim=whole("--head-dim", head_dim),
                ffn=whole("--ffn-hidden", ffn_hidden) if ffn is None else whole("--ffn", ffn),
                vocab=whole("--vocab", vocab), seq_len=whole("--seq-len", seq_len))
    if measure:
        from llmtk.commands.measure import measure_report

        measure_report(model, dims, batch=whole("--batch", batch), json_out=json_out,
                       file=sys.stdout, recompute=recompute,
                       lora_rank=whole("--lora-rank", lora_rank))
        return
    req = Request(
        model=model, params=num("--params", params), dims=dims,
        tokens=num("--tokens", tokens), gpus=gpus, mfu=num("--mfu", mfu),
        gpus_per_node=whole("--gpus-per-node", gpus_per_node),
        price_per_gpu_hour=num("--price-per-gpu-hour", price, allow_zero=True),
        dp=whole("--dp", dp), tp=whole("--tp", tp), pp=whole("--pp", pp),
        cp=whole("--cp", cp), ep=whole("--ep", ep),
        zero=whole("--zero", zero, lo=0), sequence_parallel=sequence_parallel,
        micro_batch=whole("--micro-batch", micro_batch),
        global_batch=whole("--global-batch", global_batch), recompute=recompute,
        optimizer=optimizer, precision=precision, lora_rank=whole("--lora-rank", lora_rank),
        lora_targets=lora_targets, solve=solve, days=num("--days", days), fit=scaling_fit,
    )
    if (search_trials is None) != (proxy is None):
        from llmtk.errors import UsageError

        raise UsageError("--search-trials and --proxy go together: K proxy trainings of "
                         "the proxy config FILE")
    with configs.flags_for(_flag):
        result = estimate(req)
        if proxy is not None:
            result["search"] = _price_search(result, model, dims, proxy,
                                             whole("--search-trials", search_trials))
        if emit_config:
            from llmtk.compute.models import build_spec
            from llmtk.estimate.emit import train_config
            from llmtk.io.atomic import write_file_atomically

            text = train_config(req, result, build_spec(model, dims))
            write_file_atomically(emit_config, text.encode())
    if json_out:
        _write_json(result)
    else:
        from llmtk.estimate.report import render

        render(result, sys.stdout)


def _price_search(result: dict, model, dims, path: str, trials: int) -> dict:
    """The search's price: the proxy read as `llmtk train --config` reads it, at the
    vocabulary of its `tokenizer` key, else this run's model's (a search trains on the
    target's token datasets)."""
    from llmtk.commands.proxy import read_proxy
    from llmtk.compute.models import build_spec, spec_from_config
    from llmtk.estimate.search import price_search

    target = build_spec(model, dims)
    vocab = target.vocab_size if target is not None else dims.vocab or 32000
    run = read_proxy("--proxy", path, vocab, named_tokenizer_first=True)
    return price_search(result, spec_from_config(run.shape), run.tokens, trials)


def _flag(key: str) -> str:
    """The flag of a Request or Dims field (`fit` is --scaling-fit, `ffn` --ffn-hidden; the
    rest share names)."""
    return {"fit": "--scaling-fit", "ffn": "--ffn-hidden"}.get(key) or configs.dashed(key)


def _write_json(obj) -> None:
    from llmtk.io.console import write_json

    write_json(sys.stdout, obj)  # strict: an infinite time or cost is "Infinity", not bare


def _list(json_out: bool) -> None:
    from llmtk.compute.hardware import GPU_LIST
    from llmtk.compute.models import PRESET_LIST, count_params

    if json_out:
        _write_json({
            "models": {m.name: {"params": count_params(m).total, "source": m.source}
                       for m in PRESET_LIST},
            "gpus": {g.name: {"bf16": g.bf16, "fp16": g.fp16, "fp8": g.fp8, "fp32": g.fp32,
                              "memory_gib": g.mem_gib, "source": g.source}
                     for g in GPU_LIST},
        })
        return
    from rich.table import Table

    from llmtk.io.console import buffered_console
    from llmtk.units import si

    console, emit = buffered_console(sys.stdout)
    t = Table(title="Model presets", title_justify="left")
    for col in ("name", "params", "shape", "source"):
        t.add_column(col)
    for m in PRESET_LIST:
        t.add_row(m.name, si(count_params(m).total), m.shape_text(), m.source)
    console.print(t)
    g = Table(title="GPUs (dense peak TFLOP/s)", title_justify="left")
    for col in ("name", "bf16", "fp16", "fp8", "fp32", "memory", "source"):
        g.add_column(col, justify="right" if col not in ("name", "source") else "left")

    def tf(x):
        return f"{x / 1e12:,.1f}" if x else "-"

    for x in GPU_LIST:
        g.add_row(x.name, tf(x.bf16), tf(x.fp16), tf(x.fp8), tf(x.fp32), f"{x.mem_gib:g} GiB",
                  x.source)
    console.print(g)
    emit()


def register(app: typer.Typer) -> None:
    app.command(name="estimate", help=HELP, epilog=EPILOG)(command)
