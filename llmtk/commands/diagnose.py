"""`llmtk diagnose`: find NaNs, spikes, divergence, plateaus and overfitting in training logs."""

from typing import Annotated

import typer

from llmtk.commands import options as o

SUMMARY = "Find NaNs, spikes, divergence, plateaus and overfitting in a training log."

HELP = f"""\
{SUMMARY}

Reads llmtk's metrics.jsonl, CSV logs with a header (step,loss,...) and
nanoGPT-style text logs; several runs at once. Each finding names the step,
the numbers behind it, likely causes and fixes.

[bold]Examples[/bold]

  llmtk diagnose runs/a/metrics.jsonl

  llmtk diagnose runs/*/metrics.jsonl --json | jq '.[].findings[].kind'

  llmtk diagnose log.csv --fail-on error || echo "run needs attention"
"""

EPILOG = ("Exit status: 0 no problems (at the --fail-on level), 3 problems found, "
          "1 unreadable log, 2 bad usage.")

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def command(
    logs: Annotated[list[str], typer.Argument(help="metrics.jsonl / CSV / text logs, or run "
                                                   "directories holding metrics.jsonl.")],
    json_out: o.Json = False,
    fail_on: Annotated[str, typer.Option(
        "--fail-on", help="Exit 3 when a finding of this severity or worse exists: "
                          "warning, error or never.")] = "warning",
    quiet: o.Quiet = False,
) -> None:
    from llmtk.curves.detect import diagnose, overview
    from llmtk.curves.logs import load_runs
    from llmtk.errors import UsageError

    if fail_on not in ("warning", "error", "never"):
        raise UsageError(f"--fail-on: expected warning, error or never, got {fail_on!r}")
    reports = []
    for run in load_runs(logs):
        reports.append({**overview(run), "findings": [f.as_dict() for f in diagnose(run)]})
    if json_out:
        import sys

        import orjson

        from llmtk.io.console import write_out

        write_out(sys.stdout, orjson.dumps(reports, option=orjson.OPT_INDENT_2).decode() + "\n")
    elif not quiet:
        _print(reports)
    levels = {"warning": ("warning", "error"), "error": ("error",), "never": ()}[fail_on]
    if any(f["severity"] in levels for r in reports for f in r["findings"]):
        raise typer.Exit(3)


def _print(reports: list[dict]) -> None:
    import sys

    from llmtk.io.console import buffered_console

    console, emit = buffered_console(sys.stdout)
    for r in reports:
        head = f"[bold]{r['run']}[/bold]  ({r['path']}, {r['rows']} rows"
        if "last_step" in r:
            head += (f", steps {r['first_step']:.0f}-{r['last_step']:.0f}, loss "
                     f"{r['first_loss']:.4g} -> {r['last_loss']:.4g}, best {r['best_loss']:.4g}")
        if "best_val_loss" in r:
            head += f", best val {r['best_val_loss']:.4g}"
        console.print(head + ")")
        if not r["findings"]:
            console.print("  [green]no problems found[/green]")
        for f in r["findings"]:
            style = SEVERITY_STYLE[f["severity"]]
            console.print(f"  [{style}]{f['severity']:7}[/{style}] [bold]{f['kind']}[/bold]: "
                          f"{f['summary']}")
            for cause in f["causes"]:
                console.print(f"           cause? {cause}")
            for fix in f["fixes"]:
                console.print(f"           fix:   {fix}")
        console.print()
    emit()


def register(app: typer.Typer) -> None:
    app.command(name="diagnose", help=HELP, short_help=SUMMARY, epilog=EPILOG)(command)
