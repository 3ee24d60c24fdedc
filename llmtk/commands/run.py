"""`llmtk run`: run a command's array tasks on Ray (or locally), with retries."""

from typing import Annotated

import typer

from llmtk.commands import configs
from llmtk.commands import options as o

SUMMARY = "Run the N tasks of a sharded command on Ray (or locally), with retries."

HELP = f"""\
{SUMMARY}

The command after -- runs once per task K of N, with {{shard}} replaced by K/N,
{{k}} by K (5 digits), {{n}} by N and {{cpus}} by the CPUs of a task, as
bin/llmtk-array.sbatch does on Slurm. A task that exits non-zero (or whose node
dies) is retried, except for exit 2 (bad usage: it would fail the same way
again); finished tasks leave .done markers, so a rerun redoes only the rest.
`llmtk run` returns when every task has finished: run the stages one after
the other.

[bold]Examples[/bold]

  llmtk run --executor ray --address auto --tasks 512 -- \\
    llmtk clean crawl/ --shard {{shard}} -o clean/{{k}}.jsonl.zst

  llmtk run --executor ray --tasks 60 -- \\
    llmtk dedup buckets work/sigs/ --shard {{shard}} -o work/buckets/

  llmtk run --tasks 8 --parallel 4 -- \\
    llmtk dedup signatures in/ --shard {{shard}} -j {{cpus}} -o work/sigs/
"""

EPILOG = ("Exit status: 0 every task succeeded, 1 a task failed after its retries, 2 bad "
          "usage (of llmtk run, or a task exited 2).")


@configs.keys_are_flags
def command(
    argv: Annotated[list[str], typer.Argument(help="The command and its arguments (after --).",
                                              show_default=False, metavar="-- COMMAND")],
    tasks: Annotated[int, typer.Option("--tasks", "-n", min=1, help="N: how many tasks.")] = 1,
    executor: Annotated[str, typer.Option(
        "--executor", help="ray (a Ray cluster, or a local Ray instance) or local "
                           "(subprocesses here).")] = "local",
    address: o.RayAddress = None,
    retries: Annotated[int, typer.Option("--retries", min=0,
                                         help="Retries of a failed task.")] = 3,
    parallel: Annotated[int | None, typer.Option(
        "--parallel", min=1, help="Tasks at once: local executor (default 1), or the CPUs of "
                                  "a local Ray instance (default all).")] = None,
    cpus_per_task: Annotated[float, typer.Option(
        "--cpus-per-task", min=0.0, help="Ray: CPUs each task reserves.")] = 1.0,
    quiet: o.Quiet = False,
) -> None:
    import os

    from llmtk.io.console import stderr_console
    from llmtk.jobs.array import run_tasks

    def log(message: str) -> None:
        if not quiet:
            stderr_console().print(f"llmtk run: {message}")

    address = address or os.environ.get("RAY_ADDRESS") or None
    run_tasks(list(argv), tasks, executor, retries, parallel, address, cpus_per_task, log)
    log(f"{tasks} task(s) done")


def register(app: typer.Typer) -> None:
    # Plumbing beside the tools (with `cat` and `stats`): documented in docs/cluster.md.
    app.command(name="run", help=HELP, short_help=SUMMARY, epilog=EPILOG,
                rich_help_panel=o.PLUMBING_PANEL,
                context_settings={"allow_interspersed_args": False})(command)
