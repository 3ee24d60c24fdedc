"""`llmtk train`: train a GPT-style model, one CPU process to many GPU nodes via torchrun.

Every option defaults to None here so that a TOML file (--config) can supply it;
the real defaults live in llmtk.train.config (TrainConfig, LaunchConfig), and the help's
`[default: …]` is read from there.
"""

from __future__ import annotations

from typing import Annotated

import typer

from llmtk.commands import configs, groups
from llmtk.commands import options as o
from llmtk.io import StreamOptions

SUMMARY = "Train a GPT-style model, one CPU process to many GPU nodes via torchrun."

HELP = f"""\
{SUMMARY}

Tokenizes the document streams once into a memory-mapped cache, trains with \
AdamW and a warmup + cosine/WSD schedule, writes OUT/metrics.jsonl and crash-safe \
checkpoints, and resumes from the newest complete checkpoint by itself.

[bold]Examples[/bold]

  llmtk train --data train.jsonl.zst --out runs/a --model tiny --steps 1000

  llmtk train --config run.toml --nproc-per-node 8

  llmtk train --config run.toml --nproc-per-node 8 --nnodes 4 \\
    --rdzv-endpoint node0:29500

  llmtk train --sft --init-from runs/a --data chat.jsonl --out runs/sft \\
    --steps 300

  llmtk train --sft --init-from runs/a --data alpaca.jsonl --lora-rank 8 \\
    --out runs/lora

  llmtk train --data train.jsonl.zst --out runs/a --eval-tasks arc.jsonl \\
    --eval-every 500

  llmtk train tokenizer --data train.jsonl.zst --vocab-size 32000 \\
    -o tokenizer.json

  llmtk train --init-from hf:models/base --data cpt.jsonl.zst --out runs/cpt \\
    --log-to tensorboard

  llmtk train export runs/a --hf hf/a

  llmtk plot-loss runs/a/metrics.jsonl -o loss.png

Exit status: 0 done (or checkpointed and stopped on SIGTERM/SIGUSR1), 1 a data or \
runtime error (including a stop on non-finite losses), 2 bad usage.
"""

DATA, MODEL, OPTIM, RUN, LOG, CKPT, LAUNCH = (
    "Data", "Model", "Optimisation", "Runtime", "Logging, eval and sampling",
    "Checkpoints and numerical safety", "Launch (torchrun)")
FT = "Fine-tuning (SFT, LoRA) and task evaluation"
PAR = "Parallel layout (device mesh: pp x dp-replicate x dp-shard x tp = processes)"


def _default_words(key: str) -> str | None:
    """How help shows the default of TrainConfig/LaunchConfig field `key`, read from the
    dataclass itself so that the default is written in one place (None: show none)."""
    import dataclasses

    from llmtk.train.config import FIELDS

    if key not in FIELDS:  # --config
        return None
    value = FIELDS[key].default
    if value is dataclasses.MISSING or value is None or value is False or value == "":
        return None  # a list, a value derived at run time, or a flag that is off
    if value is True:
        return "on"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _opt(*names: str, help: str, panel: str, default: str | None = None, **kw):
    """An option of the TrainConfig/LaunchConfig field of the same name. Its help ends with
    `[default: …]` from the field's default; `default` words it where the field's value is
    None because the real default is derived at run time (`lr/10`, `the preset's`)."""
    flag = next(n for n in names if n.startswith("--")).split("/")[0]
    shown = default or _default_words(flag[2:].replace("-", "_"))
    if shown:  # in the text, not typer's show_default: a string there prints as "(X)"
        help = f"{help} [dim]\\[default: {shown}][/dim]"
    return typer.Option(*names, help=help, rich_help_panel=panel, show_default=False, **kw)


app = groups.group(help=HELP, short_help=SUMMARY)


@groups.main(app, help=HELP, no_args_is_help=True)
def command(
    data: Annotated[list[str] | None, _opt(
        "--data", help="Training documents (JSONL(.zst/.gz) files, directories or globs), or "
        "a token dataset DIR of `llmtk train tokenize`, or NAME=DIR:WEIGHT to blend several "
        "(tokens/NAME in metrics); repeat for several.", panel=DATA)] = None,
    val_data: Annotated[list[str] | None, _opt(
        "--val-data", help="Held-out documents for val_loss, or token datasets (NAME=DIR: "
        "val/NAME/loss each); repeatable.", panel=DATA)] = None,
    val_fraction: Annotated[float | None, _opt(
        "--val-fraction", help="Hold out this fraction of --data documents (by a stable "
        "hash of the text) when there is no --val-data.", panel=DATA)] = None,
    max_epochs: Annotated[float | None, _opt(
        "--max-epochs", help="Warn when the run would read a source more often than this.",
        panel=DATA)] = None,
    text_field: Annotated[str | None, _opt(
        "--text-field", help="The field that holds the text.", panel=DATA)] = None,
    tokenizer: Annotated[str | None, _opt(
        "--tokenizer", help="bytes (UTF-8 bytes + EOS) or a tokenizer.json file.",
        panel=DATA)] = None,
    cache_dir: Annotated[str | None, _opt(
        "--cache-dir", help="Where token caches live (shared by runs).",
        panel=DATA, default="OUT/cache", metavar="DIR")] = None,
    out: Annotated[str | None, _opt(
        "--out", help="The run directory: metrics.jsonl, config.json, checkpoints/.",
        panel=DATA, metavar="DIR")] = None,
    model: Annotated[str | None, _opt(
        "--model", help="A Llama-style preset of `llmtk estimate --list`: tiny, llmtk-124m, "
        "350m, 1b, 7b, llama2-7b, llama3-8b, mistral-7b, ...",
        panel=MODEL, metavar="NAME")] = None,
    layers: Annotated[int | None, _opt("--layers", help="Override the number of layers.",
                                       panel=MODEL, default="the preset's")] = None,
    d_model: Annotated[int | None, _opt("--d-model", help="Override the model width.",
                                        panel=MODEL, default="the preset's")] = None,
    heads: Annotated[int | None, _opt("--heads", help="Override the attention heads.",
                                      panel=MODEL, default="the preset's")] = None,
    kv_heads: Annotated[int | None, _opt(
        "--kv-heads", help="Key/value heads (< --heads: grouped-query attention).",
        panel=MODEL, default="the preset's")] = None,
    ffn_hidden: Annotated[int | None, _opt(
        "--ffn-hidden", help="SwiGLU hidden width.",
        panel=MODEL, default="8/3 d-model rounded up to 64")] = None,
    untied: Annotated[bool | None, _opt(
        "--untied", help="Separate input and output embeddings.", panel=MODEL)] = None,
    steps: Annotated[int | None, _opt("--steps", help="Optimizer steps.",
                                      panel=OPTIM)] = None,
    seq_len: Annotated[int | None, _opt(
        "--seq-len", help="Tokens per sequence.", panel=OPTIM,
        default="the preset's")] = None,
    batch_size: Annotated[int | None, _opt(
        "--batch-size", help="Sequences per process per micro-step; the global batch is "
        "batch-size x processes x grad-accum.", panel=OPTIM)] = None,
    grad_accum: Annotated[int | None, _opt(
        "--grad-accum", help="Micro-steps per optimizer step.", panel=OPTIM)] = None,
    lr: Annotated[float | None, _opt("--lr", help="Peak learning rate.",
                                     panel=OPTIM)] = None,
    min_lr: Annotated[float | None, _opt(
        "--min-lr", help="Final learning rate.", panel=OPTIM, default="lr/10")] = None,
    warmup: Annotated[int | None, _opt("--warmup", help="Linear warmup steps.",
                                       panel=OPTIM)] = None,
    schedule: Annotated[str | None, _opt(
        "--schedule", help="cosine, wsd (warmup-stable-decay) or constant.",
        panel=OPTIM)] = None,
    decay_fraction: Annotated[float | None, _opt(
        "--decay-fraction", help="wsd: the final fraction of steps that decays.",
        panel=OPTIM)] = None,
    weight_decay: Annotated[float | None, _opt(
        "--weight-decay", help="AdamW decoupled weight decay on matrices.",
        panel=OPTIM)] = None,
    beta1: Annotated[float | None, _opt("--beta1", help="AdamW beta1.",
                                        panel=OPTIM)] = None,
    beta2: Annotated[float | None, _opt("--beta2", help="AdamW beta2.",
                                        panel=OPTIM)] = None,
    grad_clip: Annotated[float | None, _opt(
        "--grad-clip", help="Clip the global gradient norm (0: off).",
        panel=OPTIM)] = None,
    seed: Annotated[int | None, _opt("--seed", help="Seed for init and data order.",
                                     panel=OPTIM)] = None,
    device: Annotated[str | None, _opt("--device", help="auto, cpu or cuda.",
                                       panel=RUN)] = None,
    dtype: Annotated[str | None, _opt(
        "--dtype", help="auto (bf16 autocast on GPU, fp32 on CPU), fp32 or bf16.",
        panel=RUN)] = None,
    parallel: Annotated[str | None, _opt(
        "--parallel", help="auto (DDP when several processes), none, ddp or fsdp (FSDP2).",
        panel=RUN)] = None,
    tp: Annotated[int | None, _opt(
        "--tp", help="Tensor-parallel degree: split every matrix over N ranks of a node.",
        panel=PAR)] = None,
    pp: Annotated[int | None, _opt(
        "--pp", help="Pipeline-parallel degree: split the layers into N stages.",
        panel=PAR)] = None,
    dp_replicate: Annotated[int | None, _opt(
        "--dp-replicate", help="HSDP: N replicas of the model, each sharded with FSDP2 over "
        "--dp-shard ranks.", panel=PAR)] = None,
    dp_shard: Annotated[int | None, _opt(
        "--dp-shard", help="FSDP2 degree (ranks sharding one replica).", panel=PAR,
        default="the world size / (tp x pp x dp-replicate)")] = None,
    pp_schedule: Annotated[str | None, _opt(
        "--pp-schedule", help="Pipeline schedule: 1f1b or interleaved-1f1b.",
        panel=PAR, metavar="NAME")] = None,
    dry_run: Annotated[bool | None, _opt(
        "--dry-run", help="Plan the layout for --nnodes x --nproc-per-node processes: build "
        "the model on the meta device and print each kind of rank's memory (no GPU, no "
        "data, nothing started).", panel=PAR)] = None,
    gpu: Annotated[str | None, _opt(
        "--gpu", help="--dry-run: the GPU whose memory every rank must fit (as `llmtk "
        "estimate --gpus`).", panel=PAR, metavar="NAME")] = None,
    compile: Annotated[bool | None, _opt(
        "--compile/--no-compile", help="torch.compile the model.", panel=RUN,
        default="on with CUDA, off on CPU")] = None,
    activation_checkpointing: Annotated[bool | None, _opt(
        "--activation-checkpointing", help="Recompute block activations in backward "
        "(less memory, about a third more compute).", panel=MODEL)] = None,
    nccl_timeout: Annotated[int | None, _opt(
        "--nccl-timeout", help="Seconds a collective may wait for the slowest rank (a 7B "
        "checkpoint write included).", panel=RUN)] = None,
    threads: Annotated[int | None, _opt(
        "--threads", help="torch CPU threads per process; on a machine busy with other jobs "
        "1 is often fastest.", panel=RUN,
        default="OMP_NUM_THREADS, else the process's share of the cores, at most 8")] = None,
    log_every: Annotated[int | None, _opt("--log-every", help="Steps per metrics row.",
                                          panel=LOG)] = None,
    eval_every: Annotated[int | None, _opt(
        "--eval-every", help="Steps between val_loss evaluations (0: at the end).",
        panel=LOG)] = None,
    eval_batches: Annotated[int | None, _opt(
        "--eval-batches", help="Global batches per evaluation.", panel=LOG)] = None,
    sample_every: Annotated[int | None, _opt(
        "--sample-every", help="Steps between samples written to the log (0: never).",
        panel=LOG)] = None,
    prompt: Annotated[str | None, _opt("--prompt", help="Prompt for --sample-every.",
                                       panel=LOG, default="a newline")] = None,
    sample_tokens: Annotated[int | None, _opt(
        "--sample-tokens", help="Tokens per sample.", panel=LOG)] = None,
    log_to: Annotated[str | None, _opt(
        "--log-to", help="Also log every metrics row and event to tensorboard (OUT/tensorboard) "
        "and/or wandb (OUT/wandb, offline unless WANDB_MODE is set), comma-separated. "
        "metrics.jsonl is always written.", panel=LOG,
        metavar="NAMES")] = None,
    grad_stats: Annotated[str | None, _opt(
        "--grad-stats", help="none or per-layer: write each layer's gradient norm "
        "(grad_norm/LAYER) to metrics.jsonl on non-finite and spike steps.", panel=LOG,
        metavar="MODE")] = None,
    grad_stats_every: Annotated[int | None, _opt(
        "--grad-stats-every", help="With --grad-stats per-layer: also every N steps "
        "(0: never).", panel=LOG)] = None,
    checkpoint_every: Annotated[int | None, _opt(
        "--checkpoint-every", help="Steps between checkpoints (0: only at the end and on "
        "SIGTERM/SIGUSR1).", panel=CKPT)] = None,
    keep_checkpoints: Annotated[int | None, _opt(
        "--keep-checkpoints", help="Keep the newest K checkpoints (0: all).",
        panel=CKPT)] = None,
    checkpoint_format: Annotated[str | None, _opt(
        "--checkpoint-format", help="auto (dcp under FSDP, full otherwise), full (one file "
        "per state) or dcp (torch's distributed checkpoint: each rank writes its own "
        "shard).",
        panel=CKPT)] = None,
    async_checkpoint: Annotated[bool | None, _opt(
        "--async-checkpoint/--no-async-checkpoint", help="dcp: write checkpoints in the "
        "background while training continues.", panel=CKPT)] = None,
    resume: Annotated[str | None, _opt(
        "--resume", help="auto (the newest complete checkpoint in OUT), never, or "
        "a checkpoint/run directory.", panel=CKPT)] = None,
    init_from: Annotated[str | None, _opt(
        "--init-from", help="Start from another run's weights, or from a Hugging Face "
        "Llama/Qwen2/Mistral folder with hf:PATH (its shape and tokenizer too), with a fresh "
        "optimizer and schedule.", panel=CKPT)] = None,
    on_nan: Annotated[str | None, _opt(
        "--on-nan", help="Non-finite loss or gradients: skip the step or stop.",
        panel=CKPT)] = None,
    max_bad_steps: Annotated[int | None, _opt(
        "--max-bad-steps", help="Stop (exit 1) after K consecutive skipped steps.",
        panel=CKPT)] = None,
    on_spike: Annotated[str | None, _opt(
        "--on-spike", help="none or rollback: on a loss spike go back to the last "
        "checkpoint, halve the lr and skip the batches that caused it.", panel=CKPT)] = None,
    spike_factor: Annotated[float | None, _opt(
        "--spike-factor", help="A spike is a loss above this times its running mean.",
        panel=CKPT)] = None,
    sft: Annotated[bool | None, _opt(
        "--sft", help="Instruction fine-tuning: --data holds messages, prompt/response or "
        "instruction/input/output records; loss on assistant tokens only.", panel=FT)] = None,
    template: Annotated[str | None, _opt(
        "--template", help="SFT record layout: auto (detected), chat, prompt "
        "or alpaca.", panel=FT)] = None,
    chat_template: Annotated[str | None, _opt(
        "--chat-template", help="auto (the tokenizer's Hugging Face chat template if it has "
        "one, else llmtk's role markers), llmtk, or a .jinja file.", panel=FT)] = None,
    packing: Annotated[bool | None, _opt(
        "--packing/--no-packing", help="Pack several examples per sequence (attention stays "
        "within an example) or pad one per sequence.", panel=FT)] = None,
    lora_rank: Annotated[int | None, _opt(
        "--lora-rank", help="Train LoRA adapters of this rank; the base stays frozen.",
        panel=FT)] = None,
    lora_alpha: Annotated[float | None, _opt(
        "--lora-alpha", help="LoRA scale numerator (scale = alpha / rank).",
        panel=FT, default="the rank")] = None,
    lora_targets: Annotated[str | None, _opt(
        "--lora-targets", help="Adapted matrices, a comma list of q,k,v,o,gate,up,down.",
        panel=FT)] = None,
    lora_dropout: Annotated[float | None, _opt(
        "--lora-dropout", help="Dropout on the adapters' input.", panel=FT)] = None,
    eval_tasks: Annotated[list[str] | None, _opt(
        "--eval-tasks", help="Task files scored at every --eval-every step and at the end, "
        "as `llmtk eval` does (repeatable).", panel=FT)] = None,
    eval_bad_cases: Annotated[int | None, _opt(
        "--eval-bad-cases", help="Bad cases per kind and task to write.",
        panel=FT)] = None,
    eval_max_new_tokens: Annotated[int | None, _opt(
        "--eval-max-new-tokens", help="Generation tasks: the longest answer.",
        panel=FT)] = None,
    config: Annotated[str | None, _opt(
        "--config", help="A TOML file with any of these options (flags win).",
        panel=DATA)] = None,
    quiet: Annotated[bool | None, _opt(*o.QUIET_FLAGS, help=o.QUIET_HELP, panel=LOG)] = None,
    nproc_per_node: Annotated[int | None, _opt(
        "--nproc-per-node", help="Start torchrun with this many processes per node.",
        panel=LAUNCH)] = None,
    nnodes: Annotated[int | None, _opt("--nnodes", help="Number of nodes.",
                                       panel=LAUNCH)] = None,
    node_rank: Annotated[int | None, _opt(
        "--node-rank", help="This node's rank (static rendezvous only; c10d assigns it).",
        panel=LAUNCH)] = None,
    rdzv_endpoint: Annotated[str | None, _opt(
        "--rdzv-endpoint", help="HOST:PORT of the rendezvous (required with --nnodes > 1).",
        panel=LAUNCH)] = None,
    rdzv_id: Annotated[str | None, _opt(
        "--rdzv-id", help="A job id shared by all nodes.", panel=LAUNCH)] = None,
    rdzv_backend: Annotated[str | None, _opt(
        "--rdzv-backend", help="c10d or static.", panel=LAUNCH)] = None,
    max_restarts: Annotated[int | None, _opt(
        "--max-restarts", help="torchrun restarts the workers this often on failure (they "
        "resume from the last checkpoint).", panel=LAUNCH)] = None,
    rdzv_timeout: Annotated[int | None, _opt(
        "--rdzv-timeout", help="Seconds the nodes wait for each other to join the "
        "rendezvous.", panel=LAUNCH, default="torchrun's, 600")] = None,
) -> None:
    # Every parameter but --config is a TrainConfig or LaunchConfig field of the same name.
    flags = {k: v for k, v in locals().items() if k != "config"}
    from llmtk.train.config import given

    # A ConfigError names a field; it reaches the user as the flag (or `FILE: key`).
    with configs.flags_for(configs.dashed, given(flags).keys(), config):
        _train(flags, config)


def _train(flags: dict, config: str | None) -> None:
    from llmtk.train.config import resolve_config, resolve_launch
    from llmtk.train.launch import is_worker, run_torchrun, torchrun_argv, worker_args

    cfg = resolve_config(flags, config)  # checked before torchrun starts anything
    launch = resolve_launch(flags, config, planning=cfg.dry_run)
    if cfg.dry_run:
        return _dry_run(cfg, launch)
    if (launch.nproc_per_node or launch.nnodes > 1) and not is_worker():
        from llmtk.train.parallel import check_trainable, plan_layout

        # A layout that cannot fit starts nothing.
        check_trainable(plan_layout((launch.nproc_per_node or 1) * launch.nnodes,
                                    parallel=cfg.parallel, tp=cfg.tp, pp=cfg.pp,
                                    dp_replicate=cfg.dp_replicate, dp_shard=cfg.dp_shard)[1],
                        cfg)
        import os

        if cfg.threads is None and "OMP_NUM_THREADS" not in os.environ:
            # torchrun would give each worker 1 thread; give it its share of the cores.
            from llmtk.train.runtime import default_threads

            os.environ["OMP_NUM_THREADS"] = str(default_threads(launch.nproc_per_node or 1))
        argv = torchrun_argv(
            nproc_per_node=launch.nproc_per_node or 1, nnodes=launch.nnodes,
            node_rank=launch.node_rank, rdzv_endpoint=launch.rdzv_endpoint,
            rdzv_id=launch.rdzv_id, rdzv_backend=launch.rdzv_backend,
            max_restarts=launch.max_restarts, rdzv_timeout=launch.rdzv_timeout,
            worker_args=worker_args())
        run_torchrun(argv)
        return

    from llmtk.train.trainer import train

    train(cfg)


def _dry_run(cfg, launch) -> None:
    """The layout per kind of rank (train counts what each holds on the meta device) priced
    with estimate's formulas, and estimate's own table for the same layout beside it."""
    import sys

    from llmtk.estimate.ranks import rank_rows, render, same_layout_estimate
    from llmtk.train.dryrun import dry_run

    per_node = launch.nproc_per_node or 1
    world = per_node * launch.nnodes
    d = dry_run(cfg, world)
    bf16 = cfg.dtype != "fp32"  # a GPU run: bf16 autocast unless fp32 is asked for
    recompute = "full" if cfg.activation_checkpointing else "selective"
    lay = d.layout
    result = rank_rows(d.mcfg, d.plans, tp=lay.tp, pp=lay.pp, fsdp=d.parallel == "fsdp",
                       micro_batch=cfg.batch_size, grad_accum=cfg.grad_accum,
                       recompute=recompute, bf16=bf16, gpu_name=cfg.gpu,
                       lora=bool(cfg.lora_rank))
    m = d.mcfg
    render(result, f"{cfg.model}: {m.n_layer} layers x {m.d_model}, vocab {m.vocab_size} "
           f"({d.vocab_from}); {world} processes ({launch.nnodes} x {per_node}): {lay}; "
           f"{d.parallel}; micro-batch {cfg.batch_size}, grad-accum {cfg.grad_accum}, "
           f"{'bf16' if bf16 else 'fp32'}, recompute {recompute}", sys.stdout)
    est = same_layout_estimate(m, None if cfg.init_from else cfg.model, world=world,
                               per_node=per_node, gpu_name=cfg.gpu,
                               tp=lay.tp, pp=lay.pp, dp=lay.dp, sharded=lay.dp_shard > 1,
                               micro_batch=cfg.batch_size, grad_accum=cfg.grad_accum,
                               recompute=recompute, bf16=bf16, lora_rank=cfg.lora_rank)
    busiest = max(r["total"] for r in result["rows"])
    print(f"llmtk estimate, same layout: {est['total'] / 1e9:.2f} GB per GPU "
          f"({(busiest - est['total']) / est['total']:+.1%} for the busiest rank here)",
          file=sys.stdout)


TOKENIZER_HELP = """\
Train a byte-level BPE tokenizer (tokenizer.json) on a document stream.

Uses the Hugging Face `tokenizers` library: GPT-2-style byte-level BPE, so any \
UTF-8 text is covered and nothing is unknown; <|endoftext|> is the EOS token.

[bold]Examples[/bold]

  llmtk train tokenizer --data train.jsonl.zst --vocab-size 32000 \\
    -o tokenizer.json

  llmtk train tokenizer --data corpus/ --sample-bytes 2G -o tok.json

  zstdcat web.jsonl.zst | head -100000 | llmtk train tokenizer -o tok.json

  llmtk train --data train.jsonl.zst --tokenizer tok.json --out runs/b

Memory: without --sample-bytes the library counts the words of every document (it \
grows with the corpus's vocabulary of words); with it, at most N bytes of text are \
held (the documents of smallest hash that fit, from all the inputs, the same ones for \
any order of them) and the counts are those of the sample.
"""


@app.command("tokenizer", help=TOKENIZER_HELP)
@configs.keys_are_flags
def tokenizer_command(
    data: Annotated[list[str] | None, typer.Option(
        "--data", help="Documents (files, directories, globs; '-' or none: stdin).")] = None,
    output: Annotated[str, typer.Option("-o", "--output", help="The tokenizer.json to write.")]
    = "tokenizer.json",
    vocab_size: Annotated[int, typer.Option("--vocab-size", help="Vocabulary size, "
                                            "including 256 byte tokens and EOS.")] = 32000,
    min_frequency: Annotated[int, typer.Option(
        "--min-frequency", help="Merge only pairs seen at least this often.")] = 2,
    text_field: Annotated[str, typer.Option("--text-field",
                                            help="The field that holds the text.")] = "text",
    sample_bytes: Annotated[str | None, typer.Option(
        "--sample-bytes", metavar="SIZE", help="Train on a deterministic sample of at most "
        "this much text (UTF-8 bytes: 2G, 500M, 1e9 or 2Gi), from all the inputs.")] = None,
    quiet: o.Quiet = False,
) -> None:
    import sys

    from llmtk.io import expand_inputs, read_docs
    from llmtk.text.tokenizer import sample_texts, train_bpe

    paths = expand_inputs(list(data or []))
    if paths == ["-"] and sys.stdin.isatty():
        from llmtk.errors import UsageError

        raise UsageError("no input: pass --data FILE or pipe documents into stdin")
    limit = None if sample_bytes is None else o.parse_bytes("--sample-bytes", sample_bytes)
    count = [0]

    def texts():
        for doc in read_docs(paths, text_field=text_field):
            count[0] += 1
            yield doc.text

    docs = texts() if limit is None else sample_texts(texts(), limit)
    size = train_bpe(iter(docs), vocab_size, output, min_frequency=min_frequency)
    if not quiet:
        on = f"{count[0]} documents" if limit is None else \
            f"a sample of {len(docs)} of {count[0]} documents " \
            f"({sum(len(t.encode('utf-8', 'surrogatepass')) for t in docs):,} bytes)"
        print(f"trained a {size}-token BPE tokenizer on {on} -> {output}", file=sys.stderr)


TOKENIZE_HELP = """\
Tokenize documents into a token-shard dataset that `llmtk train --data DIR` reads.

A task-array stage like the dedup stages: task K of N (--shard K/N) takes its own \
whole input files and writes OUT/part-K-of-N/ (token ids with EOS after every \
document, uint16 or uint32 by vocabulary; an index of document boundaries with \
each document's file, record and id; a manifest with the tokenizer's fingerprint \
and the counts), under a temporary name renamed when complete, then \
OUT/part-K-of-N.done; a rerun skips finished tasks. Several tasks writing into one \
OUT make one dataset, the same token stream as one task over all the inputs. \
Memory per task: one batch of 1 MiB of text (at most 1,024 documents) and its tokens.

[bold]Examples[/bold]

  llmtk train tokenize clean/ --tokenizer tok.json -o tokens/web/

  llmtk run --tasks 64 -- llmtk train tokenize clean/ --tokenizer tok.json \\
    --shard {shard} -o tokens/web/

  llmtk train --data web=tokens/web:0.8 --data code=tokens/code:0.2 \\
    --tokenizer tok.json --out runs/a

Exit status: 0 done (or already done), 1 a data or runtime error, 2 bad usage.
"""


@app.command("tokenize", help=TOKENIZE_HELP)
@configs.keys_are_flags
@o.stream_command(without=("output", "compress"))
def tokenize_command(
    out_dir: Annotated[str, typer.Option("-o", "--output", help="The dataset folder.",
                                         show_default=False)] = ...,  # type: ignore[assignment]
    tokenizer: Annotated[str, typer.Option(
        "--tokenizer", help="bytes (UTF-8 bytes + EOS) or a tokenizer.json file.")] = "bytes",
    *,
    stream: StreamOptions,
) -> None:
    import os

    from llmtk.io import StreamRun
    from llmtk.text.tokenizer import load_tokenizer
    from llmtk.train.tokens import tokenize_task

    # The `tokenizers` library encodes a batch on its thread pool, sized once per process.
    os.environ.setdefault("RAYON_NUM_THREADS", str(stream.workers))
    tok = load_tokenizer(tokenizer)
    with StreamRun("train tokenize", stream, output_dirs=[("-o", out_dir)]) as run:
        tokenize_task(run, tok, out_dir)


BATCH_HELP = """\
Print the documents behind one optimizer step's batch, or behind the batches a \
--on-spike rollback skipped.

Computed from the run's config.json (data, batch shape, world size, seed) and its \
rollback events: for each window of step N (every rank's, or --rank R's), the \
documents its tokens came from, with the input file, the record number in it, the \
`id` field, the span of the document's tokens in the window and the text read back \
from the file. Works for runs on token datasets (`llmtk train tokenize`) and on \
documents through the token cache (a cache of version 2 or later: a run started \
with an older llmtk is refused, with how to rebuild it). `llmtk diagnose` prints \
this command for each loss spike and non-finite step of an llmtk run.

[bold]Examples[/bold]

  llmtk train batch runs/a --step 1200

  llmtk train batch runs/a --step 1200 --rank 3 --json | llmtk contam-check \\
    --eval evals/

  llmtk train batch runs/a --skipped --json | jq -r .id

Exit status: 0 printed, 1 a missing or corrupt input, cache or dataset, 2 bad usage \
(no such step or rank, no rollback to list).
"""


@app.command("batch", help=BATCH_HELP)
@configs.keys_are_flags
def batch_command(
    run: Annotated[str, typer.Argument(help="The run directory.", show_default=False)],
    step: Annotated[int | None, typer.Option(
        "--step", help="The optimizer step (1-based).", show_default=False)] = None,
    skipped: Annotated[bool, typer.Option(
        "--skipped", help="The windows every --on-spike rollback skipped, instead of a "
        "step's.")] = False,
    rank: Annotated[int | None, typer.Option(
        "--rank", help="Only this rank's share (default: the whole global batch).")] = None,
    full: Annotated[bool, typer.Option("--full", help="The whole text, not its head.")]
    = False,
    json_out: Annotated[bool, typer.Option(
        "--json", help="One JSON document per line on stdout: step, rank and micro (or "
        "rollback), window, source, id, file, file_ordinal, record, tokens, text.")] = False,
) -> None:
    from llmtk.errors import UsageError
    from llmtk.io import Sink
    from llmtk.train.batch import batch_documents, skipped_documents

    if (step is None) == (not skipped):
        raise UsageError("give --step N or --skipped (one of them)")
    if skipped and rank is not None:
        raise UsageError("--rank goes with --step (a rollback skips whole global batches)")
    docs = skipped_documents(run) if skipped else batch_documents(run, step, rank)
    out = Sink(None)
    if json_out:
        import orjson

        for doc in docs:
            out.write(orjson.dumps(doc, option=orjson.OPT_APPEND_NEWLINE))
    else:
        for doc in docs:
            text = doc["text"] or ""
            if not full:
                text = text[:120].replace("\n", " ") + ("…" if len(text) > 120 else "")
            a, b = doc["tokens"]
            ident = "" if doc["id"] is None else f" id={doc['id']}"
            where = (f"rollback {doc['rollback']} (spike at step {doc['step']})" if skipped
                     else f"rank {doc['rank']} micro {doc['micro']}")
            out.write(f"{where} window {doc['window']} [{doc['source']}] {doc['file']}:record "
                      f"{doc['record']}{ident} tokens {a}-{b}: {text}\n".encode())
    out.commit()


EXPORT_HELP = """\
Write a checkpoint's model as one consolidated file (-o), or as a Hugging Face
transformers folder (--hf).

Works on full and DCP-sharded (FSDP2) checkpoints alike: the shards are gathered in \
this one process, no GPUs or process group needed. `-o FILE` holds the model's full \
state dict, its configuration and its tokenizer's fingerprint; \
`llmtk.train.load_model(FILE)` loads it (torch.load with weights_only=True works too). \
`--hf OUT_DIR` writes config.json (LlamaForCausalLM; Qwen2ForCausalLM for q/k/v-bias \
models), model.safetensors (fp32) and the tokenizer files (a byte-level run gets a \
tokenizer.json with the same ids, so text round-trips); the folder is written under a \
temporary name and renamed when complete, and loads with transformers' \
AutoModelForCausalLM.from_pretrained.

[bold]Examples[/bold]

  llmtk train export runs/a -o model.pt

  llmtk train export runs/a/checkpoints/step-0020000 -o step20k.pt

  llmtk train export runs/a --hf hf/a

  llmtk generate hf/a --prompt "Once upon a time" --temperature 0

Exit status: 0 written, 1 a corrupt checkpoint or a write error, 2 bad usage (no \
checkpoint there, OUT_DIR not empty, neither or both of -o and --hf).
"""


@app.command("export", help=EXPORT_HELP)
@configs.keys_are_flags
def export_command(
    checkpoint: Annotated[str, typer.Argument(help="A run directory, its checkpoints/ "
                                              "directory or one step-NNNNNNN directory.")],
    output: Annotated[str | None, typer.Option(
        "-o", "--output", help="The consolidated file to write.")] = None,
    hf: Annotated[str | None, typer.Option(
        "--hf", help="The Hugging Face folder to write (new or empty).")] = None,
    quiet: o.Quiet = False,
) -> None:
    import sys

    from llmtk.errors import UsageError

    if (output is None) == (hf is None):
        raise UsageError("train export: give -o FILE (one consolidated file) or --hf OUT_DIR "
                         "(a Hugging Face folder)")
    if hf is not None:
        from llmtk.train.hf import export_hf

        info = export_hf(checkpoint, hf)
        if not quiet:
            print(f"exported {info['checkpoint']} (step {info['step']}, {info['params']:,} "
                  f"parameters) as {info['architecture']} -> {info['out']}", file=sys.stderr)
        return
    from llmtk.train import export

    source = export(checkpoint, output)
    if not quiet:
        print(f"exported {source} -> {output}", file=sys.stderr)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="train")
