"""`llmtk eval`: score a model on local task files; write its bad cases."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from llmtk.commands import configs
from llmtk.commands import options as o
from llmtk.commands.options import Json, Quiet

SUMMARY = "Evaluate a model on local task files, with the bad cases, not only a score."

HELP = f"""\
{SUMMARY}

Multiple choice by log-likelihood (HellaSwag ctx/endings/label, ARC and MMLU \
question/choices/answer: acc and acc_norm as lm-evaluation-harness defines them), \
generation with exact match (GSM8K "#### answer", prompt/response, messages) and \
perplexity on plain text. The layout of each JSONL file is detected. The model is an \
llmtk run or checkpoint, a Hugging Face folder (hf:PATH) or an exported file. For every \
task the worst items (most confident wrong, those right at the previous evaluated step \
and wrong now, and with --baseline those the baseline had right) go to \
DIR/eval/STEP/TASK.bad.jsonl, and for a run the metrics to RUN_DIR/metrics.jsonl as \
eval rows, which plot-loss draws.

[bold]Examples[/bold]

  llmtk eval runs/a --tasks hellaswag.jsonl --tasks arc_easy.jsonl

  llmtk eval hf:models/qwen -t mmlu.jsonl --num-fewshot 5 \\
    --fewshot-from mmlu_dev.jsonl

  llmtk eval runs/sft -t heldout.jsonl --json | jq .tasks

  llmtk eval runs/new -t private.jsonl --baseline runs/old \\
    --fail-on-regression 0.02

  llmtk plot-loss runs/a --metric eval/arc_easy/acc -o arc.png

Exit status: 0 done, 1 a data or runtime error (such as a bad task record, named by \
FILE:LINE), 2 bad usage, 3 a metric got worse than the baseline by more than \
--fail-on-regression.
"""

REGRESSED = 3  # the check ran and found problems (as diagnose, contam-check)
# Panels of their own: a panel's columns are as wide as its longest option, and at 80
# columns one panel of all the options cut --fewshot-as-multiturn and paths with "…".
FEWSHOT = "Few-shot examples"
CHAT = "Chat template"
BASELINE = "Comparison with a baseline"


@configs.keys_are_flags
def command(
    target: Annotated[str, typer.Argument(
        help="A run directory (its newest checkpoint), checkpoints/ or a step directory; "
        "a Hugging Face folder (hf:PATH); or a file from `llmtk train export`.",
        metavar="TARGET", show_default=False)],
    tasks: Annotated[list[str], typer.Option(
        "--tasks", "-t", help="Task files (JSONL, .zst, .gz), repeatable; NAME=FILE names "
        "the task (default: the file name).", show_default=False)],
    num_fewshot: Annotated[int, typer.Option(
        "--num-fewshot", min=0, help="Few-shot examples before each item (lm-eval's "
        "sampler and format).", rich_help_panel=FEWSHOT)] = 0,
    fewshot_from: Annotated[list[str] | None, typer.Option(
        "--fewshot-from", help="Draw the examples from this file ([TASK=]FILE, "
        "repeatable) instead of the task's own other rows.", show_default=False,
        rich_help_panel=FEWSHOT)] = None,
    chat: Annotated[bool | None, typer.Option(
        "--chat-template/--no-chat-template", help="Ask through the model's chat template "
        "(default: on for --sft runs and Hugging Face folders that have one).",
        show_default=False, rich_help_panel=CHAT)] = None,
    multiturn: Annotated[bool, typer.Option(
        "--fewshot-as-multiturn", help="With the chat template: few-shot examples as "
        "user/assistant turns, not one user turn.", rich_help_panel=FEWSHOT)] = False,
    baseline: Annotated[str | None, typer.Option(
        "--baseline", help="Compare with this model (run, checkpoint, Hugging Face folder "
        "or exported file) on the same items.", show_default=False,
        rich_help_panel=BASELINE)] = None,
    fail_on_regression: Annotated[float | None, typer.Option(
        "--fail-on-regression", min=0.0, help="With --baseline: exit 3 when a metric is "
        "worse than the baseline's by more than this.", show_default=False,
        rich_help_panel=BASELINE)] = None,
    out: Annotated[str | None, typer.Option(
        "--out", help="Write eval/STEP/ here (default: the run directory; for a Hugging "
        "Face folder or an exported file, the folder it is in).",
        show_default=False)] = None,
    bad_cases: Annotated[int, typer.Option(
        "--bad-cases", min=0, help="Bad cases per kind and task to write.")] = 5,
    max_new_tokens: Annotated[int, typer.Option(
        "--max-new-tokens", min=1, help="Generation tasks: the longest answer.")] = 128,
    batch_size: Annotated[int, typer.Option(
        "--batch-size", min=1, help="Sequences per forward pass (longest first).")] = 16,
    limit: Annotated[int | None, typer.Option(
        "--limit", min=1, help="Score N items of each task, drawn with --seed.")] = None,
    seed: Annotated[int, typer.Option(
        "--seed", help="Seed of the few-shot examples and of --limit's draw.")] = 1234,
    device: Annotated[o.choice("Device", "auto", "cpu", "cuda"), typer.Option(
        "--device", help="cpu, cuda (bf16) or auto.")] = "auto",
    log: Annotated[bool, typer.Option(
        "--log/--no-log", help="Append the eval rows to the run's metrics.jsonl.")] = True,
    json_out: Json = False,
    quiet: Quiet = False,
) -> None:
    import torch

    from llmtk.errors import UsageError
    from llmtk.evaluate import load_task
    from llmtk.evaluate.compare import regressions
    from llmtk.evaluate.report import evaluate_tasks, summary_line
    from llmtk.train import load_model

    if fail_on_regression is not None and baseline is None:
        raise UsageError("--fail-on-regression needs --baseline")
    if multiturn and chat is False:
        raise UsageError("--fewshot-as-multiturn needs the chat template")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is available")
    loaded_tasks = [load_task(spec, limit=limit, seed=seed) for spec in tasks]  # fail first
    names = [t.name for t in loaded_tasks]
    if len(set(names)) != len(names):
        raise UsageError(f"--tasks: two tasks share a name ({', '.join(names)}); use NAME=FILE")
    pools = _fewshot_pools(fewshot_from or [], names)
    base_results = None
    if baseline is not None:
        b = load_model(baseline, device)
        b_scorer, b_formats = _scorer(b, loaded_tasks, pools, chat, multiturn, num_fewshot,
                                      seed, batch_size, device)
        from llmtk.evaluate import evaluate_task

        base_results = {t.name: evaluate_task(t, b_scorer, max_new_tokens=max_new_tokens,
                                              fmt=b_formats[t.name]) for t in loaded_tasks}
        del b, b_scorer
    m = load_model(target, device)
    scorer, formats = _scorer(m, loaded_tasks, pools, chat, multiturn, num_fewshot, seed,
                              batch_size, device)
    out_dir = out or m.run_dir or (m.source if os.path.isdir(m.source)
                                   else os.path.dirname(os.path.abspath(m.source)))
    step = m.step or 0
    writer = once = None
    if log and m.kind == "llmtk" and out is None:
        from llmtk.evaluate.report import OncePerStep
        from llmtk.io.metrics import MetricsWriter

        path = os.path.join(m.run_dir, "metrics.jsonl")
        logged = _logged_rows(path)
        writer = MetricsWriter(path)
        once = OncePerStep(logged, writer.write)
    try:
        summaries = evaluate_tasks(loaded_tasks, scorer, run_dir=out_dir, step=step,
                                   n_bad=bad_cases, max_new_tokens=max_new_tokens, log=once,
                                   formats=formats, baseline=base_results)
    finally:
        if writer:
            writer.close()
    worse = {s["task"]: regressions(s["baseline"], fail_on_regression)
             for s in summaries if s.get("baseline") and fail_on_regression is not None}
    worse = {k: v for k, v in worse.items() if v}
    if not quiet:
        for s in summaries:
            print(summary_line(s), file=sys.stderr)
        for st, task in once.conflicts if once else ():
            print(f"note: {task} at step {st} is already logged in {path} with other "
                  f"values; kept those (give the task another name, NAME=FILE, to log "
                  f"this result too)", file=sys.stderr)
    for task, metrics in worse.items():  # said even with -q: it decides the exit status
        print(f"llmtk eval: {task}: {', '.join(metrics)} worse than the baseline by more "
              f"than {fail_on_regression:g}", file=sys.stderr)
    _report(m, step, summaries, json_out)
    if worse:
        raise typer.Exit(REGRESSED)


def _fewshot_pools(specs: list[str], names: list[str]) -> dict:
    """{task name: the few-shot pool Task} from [TASK=]FILE specs (no TASK: every task)."""
    from llmtk.errors import UsageError
    from llmtk.evaluate import load_task
    from llmtk.evaluate.tasks import split_spec

    pools = {}
    for spec in specs:
        name, path = split_spec(spec)
        if name is not None and name not in names:
            raise UsageError(f"--fewshot-from: no task named {name!r} ({', '.join(names)})")
        pool = load_task(path)
        for n in [name] if name else names:
            pools[n] = pool
    return pools


def _scorer(m, tasks, pools, chat, multiturn, num_fewshot, seed, batch_size, device):
    """The scorer of a loaded model and each task's format: the chat template on when
    asked, or by default when the model has one (an --sft run, an HF folder's own)."""
    import contextlib

    import torch

    from llmtk.evaluate.prompts import Format
    from llmtk.evaluate.scoring import ModelScorer

    template = m.chat
    use_chat = template is not None if chat is None else chat
    if use_chat and template is None:
        from llmtk.train.data.chat import chat_template

        template = chat_template(m.tokenizer, "auto")
    autocast = None
    if device == "cuda" and torch.cuda.is_bf16_supported():
        def autocast():
            return torch.autocast("cuda", dtype=torch.bfloat16)
    scorer = ModelScorer(m.model, m.tokenizer, batch_size=batch_size,
                         prompt_ids=template.prompt if use_chat else None,
                         autocast=autocast or contextlib.nullcontext)
    formats = {t.name: Format(num_fewshot, pools.get(t.name), seed, use_chat,
                              multiturn and use_chat) for t in tasks}
    return scorer, formats


def _report(m, step: int, summaries: list[dict], json_out: bool) -> None:
    if json_out:
        import json

        from llmtk.io.console import write_out

        keys = ("layout", "kind", "items", "metrics", "flipped", "previous_step", "bad_cases",
                "baseline")
        out = {"checkpoint": m.checkpoint, "step": step,
               "tasks": {s["task"]: {k: s[k] for k in keys if s.get(k) is not None}
                         for s in summaries}}
        write_out(sys.stdout, json.dumps(out, indent=2, sort_keys=True) + "\n")
        return
    from rich.table import Table

    from llmtk.io.console import buffered_console

    t = Table(title=f"llmtk eval: {m.checkpoint} (step {step})", title_justify="left")
    versus = any(s.get("baseline") for s in summaries)
    cols = ["task", "layout", "items", "metric", "value"] + (
        ["baseline", "delta (95% CI)"] if versus else []) + ["flipped", "bad cases"]
    for col in cols:
        # fold, never cut: a path or task name too wide for 80 columns wraps whole
        t.add_column(col, justify="right" if col in ("items", "value", "flipped", "baseline")
                     else "left", overflow="fold")
    for s in summaries:
        for i, (k, v) in enumerate(s["metrics"].items()):
            first = i == 0
            row = [s["task"] if first else "", s["layout"] if first else "",
                   str(s["items"]) if first else "", k, f"{v:.4f}"]
            if versus:
                e = (s.get("baseline") or {}).get("metrics", {}).get(k)
                row += [f"{e['baseline']:.4f}", f"{e['delta']:+.4f} ({e['ci'][0]:+.4f}, "
                        f"{e['ci'][1]:+.4f})"] if e else ["", ""]
            row += [str(s["flipped"]) if first and s["kind"] != "perplexity" else "",
                    os.path.relpath(s["bad_cases"]) if first else ""]
            t.add_row(*row)
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
