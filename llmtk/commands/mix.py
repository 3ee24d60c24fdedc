"""`llmtk mix`: blend several sources by weight to a token budget."""

from typing import Annotated

import typer

from llmtk.commands import configs
from llmtk.commands import options as o
from llmtk.io.run import StreamOptions

SUMMARY = "Blend several sources by weight to a token budget."

HELP = f"""\
{SUMMARY}

Counts every source's tokens (as the trainer will: tokenizer + one end-of-
document token), then writes each source's share of the budget: whole epochs
plus a seeded random subset when a source is smaller than its share, a seeded
subset when it is larger. Sources are interleaved evenly; the achieved mix is
reported on stderr and with --report.

With --shard K/N each task writes its own files' share of every source (the
plan is the single run's, from the token counts of all files): save the
counts once with --counts DIR --count-only (sharded too), and every task
reuses them instead of tokenizing what it will not write.

[bold]Examples[/bold]

  llmtk mix --source web=web.jsonl.zst:0.7 --source code=code/:0.3 \\
    --tokens 2e9 -o train.jsonl.zst

  llmtk mix -s en=en.jsonl:3 -s zh=zh.jsonl:1 --tokens 500M \\
    --report mix.json > train.jsonl

  llmtk mix -s old=old/:0.2 -s new=new/:0.8 --tokenizer tok.json \\
    --max-epochs 2 -o c.jsonl

  llmtk mix -s web=web/:0.7 -s code=code/:0.3 --counts work/counts \\
    --count-only --shard $K/$N

  llmtk mix -s web=web/:0.7 -s code=code/:0.3 --counts work/counts \\
    --shard $K/$N -o mix/$K.jsonl
"""

EPILOG = "Exit status: 0 success, 1 data error, 2 bad usage (e.g. a source too small)."


@configs.keys_are_flags
@o.stream_command(without=("inputs", "workers"))
def command(
    source: Annotated[list[str], typer.Option(
        "--source", "-s", help="NAME=PATH[:WEIGHT], repeatable; PATH is a file, directory or "
                               "glob; weights are normalised (default 1).")] = ...,
    tokens: Annotated[str | None, typer.Option(
        "--tokens", help="Token budget (2e9, 500M, 1.5B); default: all of the scarcest source "
                         "once.")] = None,
    tokenizer: Annotated[str, typer.Option(
        "--tokenizer", help="'bytes' (default) or a tokenizer.json file.")] = "bytes",
    max_epochs: Annotated[float, typer.Option(
        "--max-epochs", min=0.0, help="Refuse to repeat any source more often than this.")] = 4.0,
    report: Annotated[str | None, typer.Option(
        "--report", help="Write the achieved mix as JSON.")] = None,
    annotate: Annotated[bool, typer.Option(
        "--annotate", help="Add llmtk.source and llmtk.epoch to every document.")] = False,
    counts: Annotated[str | None, typer.Option(
        "--counts", help="Save the per-file token counts in this folder, and reuse those "
                         "already there (every shard of a job array reads the same).")] = None,
    count_only: Annotated[bool, typer.Option(
        "--count-only", help="Only count (into --counts; with --shard, this task's own "
                             "files); write no documents.")] = False,
    seed: o.Seed = 0,
    *,
    stream: StreamOptions,
) -> None:
    from llmtk.errors import UsageError
    from llmtk.io import StreamRun
    from llmtk.mix.plan import parse_source, plan
    from llmtk.mix.run import count_tokens, emit
    from llmtk.mix.run import report as build_report
    from llmtk.text.tokenizer import load_tokenizer
    from llmtk.units import parse_number

    sources = [parse_source(s) for s in source]
    names = [s.name for s in sources]
    if len(set(names)) != len(names):
        raise UsageError(f"--source: names must be unique, got {', '.join(names)}")
    budget = parse_number("--tokens", tokens)
    tok = load_tokenizer(tokenizer)
    if count_only and not counts:
        raise UsageError("--count-only needs --counts DIR (where the counts go)")
    stream.inputs = [s.spec for s in sources]
    if count_only:
        stream.output = None
    # Paths are checked (no output is a source or the tokenizer) before anything is read.
    run = StreamRun("mix", stream, inputs_also=[tokenizer] if tokenizer != "bytes" else [],
                    outputs_also=[("--report", report)])
    with run:
        for s in sources:
            count_tokens(run, s, tok, counts, stream.shard if count_only else None)
        if count_only:
            run.count("mix.counted_docs", sum(len(s.doc_tokens) - s.doc_tokens.count(0)
                                              for s in sources))
            return
        used = plan(sources, budget, max_epochs, seed)
        result = build_report(sources, emit(run, sources, annotate), used, tok)
        if report:
            run.write_json(report, result)
    if not stream.quiet:
        _print(result)


def _print(result: dict) -> None:
    from rich.table import Table

    from llmtk.io.console import stderr_console

    table = Table(title=f"achieved mix: {result['emitted_tokens']:,} tokens "
                        f"(budget {result['budget_tokens']:,})", title_justify="left")
    for col in ("source", "tokens", "share", "target", "emitted", "achieved", "epochs"):
        table.add_column(col, justify="left" if col == "source" else "right")
    for name, r in result["sources"].items():
        table.add_row(name, f"{r['tokens']:,}", f"{r['share']:.1%}", f"{r['target_tokens']:,}",
                      f"{r['emitted_tokens']:,}", f"{r['achieved_share']:.1%}",
                      f"{r['epochs']:.2f}")
    stderr_console().print(table)


def register(app: typer.Typer) -> None:
    app.command(name="mix", help=HELP, short_help=SUMMARY, epilog=EPILOG)(command)
