"""`llmtk eval`: score a checkpoint on local task files; write its bad cases."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from llmtk.commands import configs
from llmtk.commands import options as o
from llmtk.commands.options import Json, Quiet

SUMMARY = "Evaluate a checkpoint on local task files, with the bad cases, not only a score."

HELP = f"""\
{SUMMARY}

Multiple choice by log-likelihood (HellaSwag ctx/endings/label, ARC and MMLU \
question/choices/answer: acc and acc_norm as lm-evaluation-harness defines them), \
generation with exact match (GSM8K "#### answer", prompt/response, messages) and \
perplexity on plain text. The layout of each JSONL file is detected. For every \
task the worst items (most confident wrong, and those right at the previous \
evaluated step and wrong now) go to RUN_DIR/eval/STEP/TASK.bad.jsonl, and the \
metrics to RUN_DIR/metrics.jsonl as eval rows, which plot-loss draws.

[bold]Examples[/bold]

  llmtk eval runs/a --tasks hellaswag.jsonl --tasks arc_easy.jsonl

  llmtk eval runs/sft/checkpoints/step-0000500 -t heldout.jsonl --json \\
    | jq .tasks

  llmtk plot-loss runs/a --metric eval/arc_easy/acc -o arc.png

Exit status: 0 done, 1 a data or runtime error (such as a bad task record, named by \
FILE:LINE), 2 bad usage.
"""


@configs.keys_are_flags
def command(
    checkpoint: Annotated[str, typer.Argument(
        help="A run directory (its newest checkpoint), checkpoints/ or a step directory.",
        metavar="RUN_DIR|CHECKPOINT", show_default=False)],
    tasks: Annotated[list[str], typer.Option(
        "--tasks", "-t", help="Task files (JSONL, .zst, .gz), repeatable; NAME=FILE names "
        "the task (default: the file name).", show_default=False)],
    bad_cases: Annotated[int, typer.Option(
        "--bad-cases", min=0, help="Bad cases per kind and task to write.")] = 5,
    max_new_tokens: Annotated[int, typer.Option(
        "--max-new-tokens", min=1, help="Generation tasks: the longest answer.")] = 128,
    batch_size: Annotated[int, typer.Option(
        "--batch-size", min=1, help="Sequences per forward pass.")] = 16,
    limit: Annotated[int | None, typer.Option(
        "--limit", min=1, help="Score only the first N items of each task.")] = None,
    device: Annotated[o.choice("Device", "auto", "cpu", "cuda"), typer.Option(
        "--device", help="cpu, cuda or auto.")] = "auto",
    log: Annotated[bool, typer.Option(
        "--log/--no-log", help="Append the eval rows to RUN_DIR/metrics.jsonl.")] = True,
    json_out: Json = False,
    quiet: Quiet = False,
) -> None:
    import torch

    from llmtk.errors import UsageError
    from llmtk.evaluate import load_task
    from llmtk.evaluate.report import evaluate_tasks, summary_line
    from llmtk.evaluate.scoring import ModelScorer
    from llmtk.train.api import load_run

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    loaded_tasks = [load_task(spec, limit=limit) for spec in tasks]  # bad files fail first
    names = [t.name for t in loaded_tasks]
    if len(set(names)) != len(names):
        raise UsageError(f"--tasks: two tasks share a name ({', '.join(names)}); use NAME=FILE")
    m = load_run(checkpoint, device=device)
    scorer = ModelScorer(m.model, m.tokenizer,
                         prompt_ids=m.chat.prompt if m.chat is not None else None)
    writer = once = None
    if log:
        from llmtk.evaluate.report import OncePerStep
        from llmtk.io.metrics import MetricsWriter

        path = os.path.join(m.run_dir, "metrics.jsonl")
        logged = _logged_rows(path)
        writer = MetricsWriter(path)
        once = OncePerStep(logged, writer.write)
    try:
        summaries = evaluate_tasks(loaded_tasks, scorer, run_dir=m.run_dir, step=m.step,
                                   n_bad=bad_cases, batch=batch_size,
                                   max_new_tokens=max_new_tokens, log=once)
    finally:
        if writer:
            writer.close()
    if not quiet:
        for s in summaries:
            print(summary_line(s), file=sys.stderr)
        for step, task in once.conflicts if once else ():
            print(f"note: {task} at step {step} is already logged in {path} with other "
                  f"values; kept those (give the task another name, NAME=FILE, to log "
                  f"this result too)", file=sys.stderr)
    if json_out:
        import json

        from llmtk.io.console import write_out

        out = {"checkpoint": m.checkpoint, "step": m.step,
               "tasks": {s["task"]: {k: s[k] for k in ("layout", "kind", "items", "metrics",
                                                       "flipped", "previous_step", "bad_cases")}
                         for s in summaries}}
        write_out(sys.stdout, json.dumps(out, indent=2, sort_keys=True) + "\n")
        return
    from rich.table import Table

    from llmtk.io.console import buffered_console

    t = Table(title=f"llmtk eval: {m.checkpoint} (step {m.step})", title_justify="left")
    for col in ("task", "layout", "items", "metric", "value", "flipped", "bad cases"):
        # fold, never cut: a path or task name too wide for 80 columns wraps whole
        t.add_column(col, justify="right" if col in ("items", "value", "flipped") else "left",
                     overflow="fold")
    for s in summaries:
        for i, (k, v) in enumerate(s["metrics"].items()):
            first = i == 0
            t.add_row(s["task"] if first else "", s["layout"] if first else "",
                      str(s["items"]) if first else "", k, f"{v:.4f}",
                      str(s["flipped"]) if first and s["kind"] != "perplexity" else "",
                      os.path.relpath(s["bad_cases"]) if first else "")
    console, emit = buffered_console(sys.stdout)
    console.print(t)
    emit()


def _logged_rows(path: str) -> list[dict]:
    """The log's rows so far (none if it does not exist; a torn or foreign line skipped:
    only eval rows matter here, and the log is not ours to judge)."""
    from llmtk.io.metrics import decode_row

    if not os.path.exists(path):
        return []
    rows = []
    with open(path, "rb") as f:
        for line in f:
            try:
                rows.append(decode_row(line))
            except ValueError:
                continue
    return rows


def register(root: typer.Typer) -> None:
    root.command("eval", help=HELP, short_help=SUMMARY,
                 context_settings={"help_option_names": ["-h", "--help"]})(command)
