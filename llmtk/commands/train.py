"""`llmtk train`: train a GPT-style model, one CPU process to many GPU nodes via torchrun.

Every option defaults to None here so that a TOML file (--config) can supply it;
the real defaults live in llmtk.train.config (TrainConfig, LaunchConfig), and the help's
`[default: …]` is read from there.
"""

from __future__ import annotations

import enum
import inspect
from dataclasses import dataclass
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

  llmtk train verify runs/a

  llmtk plot-loss runs/a/metrics.jsonl -o loss.png

Exit status: 0 done (or checkpointed and stopped on SIGTERM/SIGUSR1), 1 a data or \
runtime error (including a stop on non-finite losses), 2 bad usage.
"""

DATA, MODEL, OPTIM, RUN, LOG, CKPT, LAUNCH = (
    "Data", "Model", "Optimisation", "Runtime", "Logging, eval and sampling",
    "Checkpoints and numerical safety", "Launch (torchrun)")
FT = "Fine-tuning (SFT, LoRA) and task evaluation"
MOE = "Mixture of experts (docs/train.md, Mixture of experts)"
PAR = "Parallel layout (device mesh: pp x dp-replicate x dp-shard x tp = processes)"


Opt = o.Opt

# One entry per TrainConfig and LaunchConfig field (and --config), in the order of the
# help; a field without one, or an entry without a field, fails at import. The value's
# range and choices are the field's too (its RULES entry).
OPTIONS: dict[str, Opt] = {
    "data": Opt(DATA,
        "Training documents (JSONL(.zst/.gz) files, directories or globs), or a token "
        "dataset DIR of `llmtk train tokenize`, or NAME=DIR:WEIGHT to blend several "
        "(tokens/NAME in metrics); repeat for several."),
    "val_data": Opt(DATA,
        "Held-out documents for val_loss, or token datasets (NAME=DIR: val/NAME/loss "
        "each); repeatable."),
    "val_fraction": Opt(DATA,
        "Hold out this fraction of --data documents (by a stable hash of the text) when"
        " there is no --val-data."),
    "max_epochs": Opt(DATA, "Warn when the run would read a source more often than this."),
    "text_field": Opt(DATA, "The field that holds the text."),
    "allow_html": Opt(DATA, "Train on documents that are HTML pages as they are (refused "
        "otherwise: run `llmtk clean` to extract their text)."),
    "tokenizer": Opt(DATA, "bytes (UTF-8 bytes + EOS) or a tokenizer.json file."),
    "cache_dir": Opt(DATA, "Where token caches live (shared by runs).", default="OUT/cache",
        metavar="DIR"),
    "out": Opt(DATA, "The run directory: metrics.jsonl, config.json, checkpoints/.", metavar="DIR"),
    "model": Opt(MODEL,
        "A Llama-style preset of `llmtk estimate --list`: tiny, llmtk-124m, 350m, 1b, "
        "7b, llama2-7b, llama3-8b, mistral-7b, ...", metavar="NAME"),
    "layers": Opt(MODEL, "Override the number of layers.", default="the preset's"),
    "d_model": Opt(MODEL, "Override the model width.", default="the preset's"),
    "heads": Opt(MODEL, "Override the attention heads.", default="the preset's"),
    "kv_heads": Opt(MODEL, "Key/value heads (< --heads: grouped-query attention).",
        default="the preset's"),
    "ffn_hidden": Opt(MODEL, "SwiGLU hidden width.", default="8/3 d-model rounded up to 64"),
    "untied": Opt(MODEL, "Separate input and output embeddings."),
    "experts": Opt(MOE, "Routed experts per MoE layer (0: a dense model).",
        default="the preset's"),
    "top_k": Opt(MOE, "Experts each token is routed to.", default="the preset's, else 2"),
    "shared_experts": Opt(MOE, "Always-on experts per MoE layer.", default="the preset's"),
    "expert_ffn_hidden": Opt(MOE, "An expert's SwiGLU hidden width.",
        default="--ffn-hidden"),
    "moe_every": Opt(MOE, "Every Nth layer (from --first-dense-layers on) is a MoE layer.",
        default="1"),
    "first_dense_layers": Opt(MOE, "The first N layers stay dense.", default="0"),
    "router_score": Opt(MOE, "Router scores: softmax (Mixtral, Qwen3) or sigmoid "
        "(DeepSeek-V3).", default="softmax"),
    "router_bias_rate": Opt(MOE, "Auxiliary-loss-free balancing: the per-expert bias "
        "step after each optimizer step (DeepSeek-V3; 0: off).", default="0.01"),
    "router_bias_rule": Opt(MOE, "How the bias moves: sign (rate x sign of the load "
        "error, DeepSeek-V3) or proportional (rate x the error over the mean load, "
        "clipped to +-1).", default="sign"),
    "router_aux_loss": Opt(MOE, "Switch/GShard load-balancing loss coefficient (0: off).",
        default="0"),
    "router_z_loss": Opt(MOE, "Router z-loss coefficient (0: off).", default="0"),
    "capacity_factor": Opt(MOE, "Each expert takes at most this times its even share of "
        "a micro-batch's tokens, the rest are dropped.", default="none: dropless"),
    "steps": Opt(OPTIM, "Optimizer steps."),
    "seq_len": Opt(OPTIM, "Tokens per sequence.", default="the preset's"),
    "batch_size": Opt(OPTIM,
        "Sequences per process per micro-step; the global batch is batch-size x "
        "processes x grad-accum."),
    "grad_accum": Opt(OPTIM, "Micro-steps per optimizer step."),
    "lr": Opt(OPTIM, "Peak learning rate."),
    "min_lr": Opt(OPTIM, "Final learning rate.", default="lr/10"),
    "warmup": Opt(OPTIM, "Linear warmup steps."),
    "schedule": Opt(OPTIM, "cosine, wsd (warmup-stable-decay) or constant."),
    "decay_fraction": Opt(OPTIM, "wsd: the final fraction of steps that decays."),
    "weight_decay": Opt(OPTIM, "AdamW decoupled weight decay on matrices."),
    "beta1": Opt(OPTIM, "AdamW beta1."),
    "beta2": Opt(OPTIM, "AdamW beta2."),
    "grad_clip": Opt(OPTIM, "Clip the global gradient norm (0: off)."),
    "seed": Opt(OPTIM, "Seed for init and data order."),
    "device": Opt(RUN, "auto, cpu or cuda."),
    "dtype": Opt(RUN, "auto (bf16 autocast on GPU, fp32 on CPU), fp32, bf16, or fp64 "
        "(every weight and sum in float64: for checking a layout against one process)."),
    "parallel": Opt(RUN, "auto (DDP when several processes), none, ddp or fsdp (FSDP2)."),
    "tp": Opt(PAR, "Tensor-parallel degree: split every matrix over N ranks of a node."),
    "pp": Opt(PAR, "Pipeline-parallel degree: split the layers into N stages."),
    "dp_replicate": Opt(PAR,
        "HSDP: N replicas of the model, each sharded with FSDP2 over --dp-shard ranks."),
    "dp_shard": Opt(PAR, "FSDP2 degree (ranks sharding one replica).",
        default="the world size / (tp x pp x dp-replicate x cp)"),
    "cp": Opt(PAR, "Context-parallel degree: each rank holds 1/N of every sequence."),
    "ep": Opt(PAR, "Expert-parallel degree: split each MoE layer's experts over N ranks "
        "borrowed from dp-shard x cp."),
    "pp_schedule": Opt(PAR,
        "Pipeline schedule: 1f1b or interleaved-1f1b (several stages per rank); the "
        "microbatches are the --grad-accum micro-steps.", metavar="NAME"),
    "pp_layers": Opt(PAR,
        "Blocks per pipeline stage, e.g. 3,5 (interleaved-1f1b: a multiple of --pp "
        "stages, stage s on rank s % pp).", default="even, 2 stages per rank when "
        "interleaved", metavar="N,N,..."),
    "dry_run": Opt(PAR,
        "Plan the layout for --nnodes x --nproc-per-node processes: build the model on "
        "the meta device and print each kind of rank's memory (no GPU, no data, nothing"
        " started)."),
    "gpu": Opt(PAR, "--dry-run: the GPU whose memory every rank must fit (as `llmtk estimate "
        "--gpus`).", metavar="NAME"),
    "compile": Opt(RUN, "torch.compile the model.",
        default="on with CUDA (not for --lora-rank under --tp, nor under --cp), off on CPU",
        flags=("--compile/--no-compile",)),
    "activation_checkpointing": Opt(MODEL,
        "Recompute block activations in backward (less memory, about a third more compute)."),
    "doc_mask": Opt(MODEL,
        "Attention stays inside each document of a packed window (EOS boundaries; rotary "
        "positions restart per document)."),
    "nccl_timeout": Opt(RUN,
        "Seconds a collective may wait for the slowest rank (a 7B checkpoint write included)."),
    "hang_timeout": Opt(RUN,
        "Seconds a rank may make no progress before the run ends naming it, with every "
        "rank's Python stack (0: no watchdog; longer than the slowest checkpoint write).",
        metavar="SECONDS"),
    "threads": Opt(RUN,
        "torch CPU threads per process; on a machine busy with other jobs 1 is often fastest.",
        default="OMP_NUM_THREADS, else the process's share of the cores, at most 8"),
    "log_every": Opt(LOG, "Steps per metrics row."),
    "eval_every": Opt(LOG, "Steps between val_loss evaluations (0: at the end)."),
    "eval_batches": Opt(LOG, "Global batches per evaluation."),
    "sample_every": Opt(LOG, "Steps between samples written to the log (0: never)."),
    "prompt": Opt(LOG, "Prompt for --sample-every.", default="a newline"),
    "sample_tokens": Opt(LOG, "Tokens per sample."),
    "log_to": Opt(LOG,
        "Also log every metrics row and event to tensorboard (OUT/tensorboard) and/or "
        "wandb (OUT/wandb, offline unless WANDB_MODE is set), comma-separated. "
        "metrics.jsonl is always written.", metavar="NAMES"),
    "grad_stats": Opt(LOG,
        "none or per-layer: write each layer's gradient norm (grad_norm/LAYER) to "
        "metrics.jsonl on non-finite and spike steps.", metavar="MODE"),
    "grad_stats_every": Opt(LOG, "With --grad-stats per-layer: also every N steps (0: never)."),
    "checkpoint_every": Opt(CKPT,
        "Steps between checkpoints (0: only at the end and on SIGTERM/SIGUSR1)."),
    "keep_checkpoints": Opt(CKPT, "Keep the newest K checkpoints (0: all)."),
    "verify_every": Opt(CKPT,
        "Read every N-th checkpoint back against its checksums once written (a "
        "checkpoint_verified event; 0: never). `llmtk train verify` is the full drill."),
    "checkpoint_format": Opt(CKPT,
        "auto (dcp under FSDP, full otherwise), full (one file per state) or dcp "
        "(torch's distributed checkpoint: each rank writes its own shard)."),
    "async_checkpoint": Opt(CKPT,
        "dcp: write checkpoints in the background while training continues.",
        flags=("--async-checkpoint/--no-async-checkpoint",)),
    "resume": Opt(CKPT, "auto (the newest complete checkpoint in OUT), never, or a checkpoint/run "
        "directory."),
    "init_from": Opt(CKPT,
        "Start from another run's weights, or from a Hugging Face Llama/Qwen2/Mistral "
        "folder with hf:PATH (its shape and tokenizer too), with a fresh optimizer and "
        "schedule."),
    "on_nan": Opt(CKPT, "Non-finite loss or gradients: skip the step or stop."),
    "max_bad_steps": Opt(CKPT, "Stop (exit 1) after K consecutive skipped steps."),
    "on_spike": Opt(CKPT,
        "none or rollback: on a loss spike go back to the last checkpoint, halve the lr"
        " and skip the batches that caused it."),
    "spike_factor": Opt(CKPT, "A spike is a loss above this times its running mean."),
    "sft": Opt(FT, "Instruction fine-tuning: --data holds messages, prompt/response or "
        "instruction/input/output records; loss on assistant tokens only."),
    "template": Opt(FT, "SFT record layout: auto (detected), chat, prompt or alpaca."),
    "chat_template": Opt(FT,
        "auto (the tokenizer's Hugging Face chat template if it has one, else llmtk's "
        "role markers), llmtk, or a .jinja file."),
    "packing": Opt(FT,
        "Pack several examples per sequence (attention stays within an example) or pad "
        "one per sequence.",
        flags=("--packing/--no-packing",)),
    "lora_rank": Opt(FT, "Train LoRA adapters of this rank; the base stays frozen."),
    "lora_alpha": Opt(FT, "LoRA scale numerator (scale = alpha / rank).", default="the rank"),
    "lora_targets": Opt(FT, "Adapted matrices, a comma list of q,k,v,o,gate,up,down,experts "
                         "(experts: a MoE layer's routed experts, one adapter each)."),
    "lora_dropout": Opt(FT, "Dropout on the adapters' input."),
    "eval_tasks": Opt(FT,
        "Task files scored at every --eval-every step and at the end, as `llmtk eval` "
        "does (repeatable)."),
    "eval_bad_cases": Opt(FT, "Bad cases per kind and task to write."),
    "eval_max_new_tokens": Opt(FT, "Generation tasks: the longest answer."),
    "config": Opt(DATA, "A TOML file with any of these options (flags win)."),
    "quiet": Opt(LOG, o.QUIET_HELP, flags=o.QUIET_FLAGS),
    "nproc_per_node": Opt(LAUNCH, "Start torchrun with this many processes per node."),
    "nnodes": Opt(LAUNCH, "Number of nodes."),
    "node_rank": Opt(LAUNCH, "This node's rank (static rendezvous only; c10d assigns it)."),
    "rdzv_endpoint": Opt(LAUNCH, "HOST:PORT of the rendezvous (required with --nnodes > 1)."),
    "rdzv_id": Opt(LAUNCH, "A job id shared by all nodes."),
    "rdzv_backend": Opt(LAUNCH, "c10d or static."),
    "max_restarts": Opt(LAUNCH,
        "torchrun restarts the workers this often on failure (they resume from the last"
        " checkpoint)."),
    "rdzv_timeout": Opt(LAUNCH, "Seconds the nodes wait for each other to join the rendezvous.",
        default="torchrun's, 600"),
}


def _default_words(key: str) -> str | None:
    """How help shows the default of TrainConfig/LaunchConfig field `key`."""
    from llmtk.train.config import FIELDS

    return configs.default_words(FIELDS[key].default) if key in FIELDS else None  # --config


def _parameters() -> list[inspect.Parameter]:
    """The command's parameters, each `Annotated[FIELD'S TYPE | None, typer.Option(...)]`
    defaulting to None (a TOML file may set what no flag does); a field whose RULES entry
    is a fixed set of values is an `o.choice` of them. The help ends with `[default: …]`
    from the field's default (in the text, not typer's show_default: a string there prints
    as "(X)")."""
    from llmtk.train.config import FIELDS, RULES, TYPES

    unmatched = set(FIELDS) ^ (set(OPTIONS) - {"config"})
    if unmatched:
        raise TypeError(f"llmtk train: fields and options differ: {sorted(unmatched)}")
    params = []
    for name, opt in OPTIONS.items():
        kind = str if name == "config" else TYPES[name]
        choices = getattr(RULES.get(name), "choices", None)
        if choices:
            kind = o.choice(name.title().replace("_", ""), *choices)
        shown = opt.default or _default_words(name)
        help = configs.with_default(opt.help, shown)
        # the help words the choices: listed as the metavar they would widen every panel
        option = o.declare(name, opt, help=help, show_default=False,
                           metavar="TEXT" if choices else None)
        params.append(inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                        default=None, annotation=Annotated[kind | None, option]))
    return params


app = groups.group(help=HELP, short_help=SUMMARY)


def command(**flags) -> None:
    # Every parameter but --config is a TrainConfig or LaunchConfig field of the same name.
    config = flags.pop("config")
    flags = {k: v.value if isinstance(v, enum.Enum) else v for k, v in flags.items()}
    from llmtk.train.config import given

    # A ConfigError names a field; it reaches the user as the flag (or `FILE: key`).
    with configs.flags_for(configs.dashed, given(flags).keys(), config):
        _train(flags, config)


command = groups.main(app, help=HELP, no_args_is_help=True)(configs.signed(command,
                                                                           _parameters()))


def _train(flags: dict, config: str | None) -> None:
    from llmtk.train.config import resolve_config, resolve_launch, section
    from llmtk.train.launch import is_worker, run_torchrun, torchrun_argv, worker_args

    cfg = resolve_config(flags, config)  # checked before torchrun starts anything
    launch = resolve_launch(flags, config, planning=cfg.dry_run)
    if cfg.dry_run:
        from llmtk.train.layout.dryrun import dry_run

        d = dry_run(cfg, (launch.nproc_per_node or 1) * launch.nnodes)
        return _dry_run(d, section(Shown, cfg), launch)
    if (launch.nproc_per_node or launch.nnodes > 1) and not is_worker():
        from dataclasses import replace

        from llmtk.train.config import section
        from llmtk.train.layout.plan import RunPlan, run_model
        from llmtk.train.model.hf import InitSpec, resolve_init
        from llmtk.train.run_shape import ModelSpec

        # A layout that cannot run starts nothing: the plan the workers will resolve (the
        # GPU count is theirs to find; the layout and the split do not depend on it).
        resolved = replace(cfg, tokenizer=resolve_init(section(InitSpec, cfg)))  # hf: its own
        RunPlan.resolve(cfg, (launch.nproc_per_node or 1) * launch.nnodes,
                        run_model(section(ModelSpec, resolved), resolved.sft)[1], cuda=False)
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

    if is_worker():
        from llmtk.train.launch import follow_launcher

        follow_launcher()
    train(cfg)
    if is_worker():
        from llmtk.train.runtime import exit_worker

        exit_worker()


@dataclass(frozen=True)
class Shown:
    """What the dry run's report reads of the configuration beside the plan (the model's
    name, the GPU, the dtype asked for, whether rank 0 samples or scores a whole copy)."""

    model: str
    init_from: str | None
    gpu: str
    dtype: str
    sample_every: int
    eval_tasks: list[str]


def plan_rows(d, gpu: str, bf16: bool, grad_accum: int | None = None) -> dict:
    """Dry run `d` (train.layout.dryrun.dry_run: what each kind of rank holds, on the meta
    device) priced with estimate's formulas for `gpu` (rank_rows' result; `grad_accum`:
    instead of the plan's). What `llmtk train --dry-run` prints, and
    benchmarks/memory_check.py's prediction."""
    from llmtk.estimate.ranks import rank_rows
    from llmtk.train.model.lora import adapted_per_token, parse_targets

    plan, lay = d.plan, d.plan.layout
    recompute = "full" if plan.activation_checkpointing else "selective"
    return rank_rows(
        plan.mcfg, d.plans, tp=lay.tp, pp=lay.pp, cp=lay.cp, ep=lay.ep,
        fsdp=plan.parallel == "fsdp", dp_shard=lay.dp_shard * lay.cp,
        micro_batch=plan.batch_size,
        grad_accum=grad_accum or plan.grad_accum, recompute=recompute,
        bf16=bf16, gpu_name=gpu, lora_rank=plan.lora.rank if plan.lora else None,
        **({"lora_parts": adapted_per_token(plan.mcfg, plan.lora.targets),
            "lora_experts": "experts" in parse_targets(plan.lora.targets)} if plan.lora
           else {}))


def _dry_run(d, shown: Shown, launch) -> None:
    """The layout per kind of rank of dry run `d` (train counts what each holds on the meta
    device) priced with estimate's formulas, and estimate's own table for the same layout
    beside it."""
    import sys

    from llmtk.estimate.ranks import render, same_layout_estimate, same_layout_line

    per_node = launch.nproc_per_node or 1
    world = per_node * launch.nnodes
    bf16 = shown.dtype != "fp32"  # a GPU run: bf16 autocast unless fp32 is asked for
    result = plan_rows(d, shown.gpu, bf16)
    plan, lay, m = d.plan, d.plan.layout, d.plan.mcfg
    recompute = "full" if plan.activation_checkpointing else "selective"
    lora_rank = plan.lora.rank if plan.lora else None
    render(result, f"{shown.model}: {m.n_layer} layers x {m.d_model}, vocab {m.vocab_size} "
           f"({d.vocab_from}); {world} processes ({launch.nnodes} x {per_node}): {lay}; "
           f"{plan.parallel}; micro-batch {plan.batch_size}, grad-accum {plan.grad_accum}, "
           f"{'bf16' if bf16 else 'fp32'}, recompute {recompute}", sys.stdout)
    est = same_layout_estimate(m, None if shown.init_from else shown.model, world=world,
                               per_node=per_node, gpu_name=shown.gpu,
                               tp=lay.tp, pp=lay.pp, dp=lay.dp,
                               sharded=lay.dp_shard * lay.cp > 1, cp=lay.cp, ep=lay.ep,
                               micro_batch=plan.batch_size, grad_accum=plan.grad_accum,
                               recompute=recompute, bf16=bf16, lora_rank=lora_rank)
    print(same_layout_line(est, max(r["total"] for r in result["rows"])), file=sys.stdout)
    if (lay.tp > 1 or lay.pp > 1) and (shown.sample_every or shown.eval_tasks):
        _whole_copy_line("--sample-every" if shown.sample_every else "--eval-tasks", m, result)


def _whole_copy_line(flag: str, mcfg, result: dict) -> None:
    """Under tp or pp, sampling and task evaluation (`flag` asks for them) run a whole fp32
    copy of the model on rank 0 (train/layout/whole.py), beside what rank 0 holds for
    training: say whether it fits before a run finds out at its first sampling step."""
    from llmtk.train.model.config import count_params

    copy = 4 * count_params(mcfg)
    own = result["rows"][0]["total"]  # the first stage's rank: rank 0
    fits = own + copy <= result["capacity"]
    print(f"{flag}: rank 0 samples and scores a whole fp32 copy of the model: "
          f"{copy / 1e9:.2f} GB on its GPU beside its {own / 1e9:.2f} GB (and as much host "
          f"memory while it is gathered): " + (
              "fits" if fits else f"does not fit in {result['capacity'] / 1e9:.1f} GB: "
              f"leave {flag} off for this layout"))


TOKENIZER_HELP = """\
Train a BPE tokenizer (a tokenizer.json) on documents.

Not `llmtk train tokenize`, which turns documents into token shards with a trained \
tokenizer. Both take their documents the same way: FILES... (files, directories, \
globs; '-' or none: stdin); --data FILE is the older spelling here, still accepted.

Uses the Hugging Face `tokenizers` library: GPT-2-style byte-level BPE, so any \
UTF-8 text is covered and nothing is unknown; <|endoftext|> is the EOS token.

[bold]Examples[/bold]

  llmtk train tokenizer train.jsonl.zst --vocab-size 32000 \\
    -o tokenizer.json

  llmtk train tokenizer corpus/ --sample-bytes 2G -o tok.json

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
    inputs: o.Inputs = None,
    data: Annotated[list[str] | None, typer.Option(
        "--data", help="Documents, as FILES (the older spelling, still accepted).")] = None,
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

    paths = expand_inputs([*(inputs or []), *(data or [])])
    if paths == ["-"] and sys.stdin.isatty():
        from llmtk.errors import UsageError

        raise UsageError("no input: name document files (llmtk train tokenizer FILES...) or "
                         "pipe documents into stdin")
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
Turn documents into token shards for train --data DIR.

The shards are a dataset that `llmtk train --data DIR` reads, tokenized with a \
trained tokenizer (`llmtk train tokenizer` trains one, `--tokenizer` names it). \
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
    allow_html: Annotated[bool, typer.Option(
        "--allow-html", help="Tokenize documents that are HTML pages as they are (refused "
        "otherwise: run `llmtk clean` to extract their text).")] = False,
    *,
    stream: StreamOptions,
) -> None:
    import os

    from llmtk.io import StreamRun
    from llmtk.text.tokenizer import load_tokenizer
    from llmtk.train.data.tokens import tokenize_task

    # The `tokenizers` library encodes a batch on its thread pool, sized once per process.
    os.environ.setdefault("RAYON_NUM_THREADS", str(stream.workers))
    tok = load_tokenizer(tokenizer)
    with StreamRun("train tokenize", stream, output_dirs=[("-o", out_dir)]) as run:
        tokenize_task(run, tok, out_dir, allow_html=allow_html)


BATCH_HELP = """\
Print the documents behind one optimizer step's batch, or behind the batches a \
--on-spike rollback skipped.

Computed from the run's config.json (data, batch shape, world size, seed) and its \
rollback events: for each window of step N (every rank's, or --rank R's), the \
documents its tokens came from, with the input file, the record number in it, the \
`id` field, the span of the document's tokens in the window and the text read back \
from the file. Works for runs on token datasets (`llmtk train tokenize`) and on \
documents through the token cache (of version 3: a run on an older llmtk's cache is \
refused, with what to do). `llmtk diagnose` prints this command for each loss \
spike and non-finite step of an llmtk run.

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
    from llmtk.train.data.batch import batch_documents, skipped_documents

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
models, Qwen3ForCausalLM for q/k-norm ones; MixtralForCausalLM or Qwen3MoeForCausalLM \
for mixture-of-experts models), model.safetensors (fp32) and the tokenizer files (a \
byte-level run gets a tokenizer.json with the same ids, so text round-trips); the \
folder is written under a temporary name and renamed when complete, and loads with transformers' \
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
        from llmtk.train.model.hf import export_hf

        info = export_hf(checkpoint, hf)
        if not quiet:
            print(f"exported {info['checkpoint']} (step {info['step']}, {info['params']:,} "
                  f"parameters) as {info['architecture']} -> {info['out']}", file=sys.stderr)
        return
    from llmtk.train import export

    source = export(checkpoint, output)
    if not quiet:
        print(f"exported {source} -> {output}", file=sys.stderr)


VERIFY_HELP = """\
Prove a checkpoint restores the run: a restore drill, before the checkpoint is needed.

Checks every file of the checkpoint (the newest, or --step N) against the size and \
xxh64 its MANIFEST.json recorded when it was written (and the manifest against \
COMPLETE, and that `latest` names a checkpoint), then resumes from it with the run's \
own configuration and layout (as many processes as the run had, through torchrun on \
this machine) in a scratch directory, trains to the next step metrics.jsonl logged \
after it, and compares the loss: bit for bit on CPU, within one rounding of the \
matmul inputs per recomputed step on GPU (2^-8 relative in bf16, 2^-11 in fp32). The \
newest checkpoint of a finished run (no step logged after it) is retrained from the \
checkpoint before it and compared tensor by tensor (CPU). The run directory is only \
read; the run's data (or its token cache) must still be there.

`llmtk train --verify-every N` runs the checksum part after every N-th checkpoint.

[bold]Examples[/bold]

  llmtk train verify runs/a

  llmtk train verify runs/a --step 2000

  llmtk train verify runs/a --checksums-only

Exit status: 0 verified, 1 a file that does not match its checksum or a recomputed \
loss that does not match the log (the line names the file or the step), 2 bad usage \
(no checkpoint, no such step).
"""


@app.command("verify", help=VERIFY_HELP)
@configs.keys_are_flags
def verify_command(
    run: Annotated[str, typer.Argument(help="The run directory.", show_default=False)],
    step: Annotated[int | None, typer.Option(
        "--step", help="The checkpoint of this step (default: the newest).",
        show_default=False)] = None,
    checksums_only: Annotated[bool, typer.Option(
        "--checksums-only", help="Check the files against their checksums; do not "
        "recompute a step.")] = False,
    quiet: o.Quiet = False,
) -> None:
    import sys

    from llmtk.train.checkpoint.verify import verify

    say = (lambda m: print(m, file=sys.stderr, flush=True)) if not quiet else None
    line = verify(run, step, checksums_only=checksums_only, say=say)
    if not quiet:
        print(f"verified {line}", file=sys.stderr)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="train")
