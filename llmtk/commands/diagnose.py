"""`llmtk diagnose`: find NaNs, spikes, divergence, plateaus and overfitting in training logs."""

from typing import Annotated

import typer

from llmtk.commands import options as o

SUMMARY = "Find NaNs, spikes, divergence, plateaus and overfitting in a training log."

HELP = f"""\
{SUMMARY}

Reads llmtk's metrics.jsonl, HF Trainer trainer_state.json and console
output, TensorBoard event files, CSV (step,loss / Lightning, TensorBoard and
W&B exports), W&B history JSON and offline run files, nanoGPT, llm.c,
Megatron-LM and torchtitan text logs, and any `step: N ... loss: X` or
`step=N loss=X` lines; the format is told from the content. Several runs at
once. A healthy run prints one "ok" line; each kind of problem is printed
once, with the numbers behind it, likely causes and fixes; on an llmtk run,
each spike and non-finite step comes with the `llmtk train batch RUN --step N`
command that prints the documents of its batch. Spikes that
recover at once, and grad-norm spikes the loss did not notice, are info; a
warning needs lasting harm. Differences at the resolution the values were
logged with are never spikes or oscillation.

[bold]Examples[/bold]

  llmtk diagnose runs/a/metrics.jsonl

  llmtk diagnose runs/*/metrics.jsonl --json | jq '.[].findings[].kind'

  llmtk diagnose out/checkpoint-500/trainer_state.json --verbose

  llmtk diagnose log.csv --fail-on error || echo "run needs attention"
"""

EPILOG = ("Exit status: 0 no problems (at the --fail-on level), 3 problems found, "
          "1 unreadable log, 2 bad usage.")

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
ORDER = {"error": 0, "warning": 1, "info": 2}


def command(
    logs: Annotated[list[str], typer.Argument(help="Training logs (any format above), or run "
                                                   "directories.")],
    json_out: o.Json = False,
    fail_on: Annotated[o.choice("FailOn", "warning", "error", "never"), typer.Option(
        "--fail-on", metavar="LEVEL",
        help="Exit 3 when a finding of this severity or worse exists: warning, error or "
             "never.")] = "warning",
    verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="Show every finding with its causes and fixes, and each "
                                "spike.")] = False,
    quiet: o.Quiet = False,
) -> None:
    from llmtk.curves.detect import diagnose, overview
    from llmtk.curves.logs import load_runs
    from llmtk.errors import DataError

    reports = []
    for run in load_runs(logs):
        if not any(run.has(m) for m in ("loss", "val_loss", "grad_norm")):
            raise DataError(f"{run.path}: no loss values to diagnose (found "
                            f"{', '.join(run.columns())}; expected a loss column such as "
                            "loss, train/loss, lm loss, eval_loss, or a grad norm)")
        reports.append({**overview(run), "findings": [f.as_dict() for f in diagnose(run)]})
    if json_out:
        import sys

        import orjson

        from llmtk.io.console import write_out

        write_out(sys.stdout, orjson.dumps(reports, option=orjson.OPT_INDENT_2).decode() + "\n")
    elif not quiet:
        _print(reports, verbose)
    levels = {"warning": ("warning", "error"), "error": ("error",), "never": ()}[fail_on]
    if any(f["severity"] in levels for r in reports for f in r["findings"]):
        raise typer.Exit(3)


def _head(r: dict) -> str:
    head = f"[bold]{r['run']}[/bold]  ({r['format']}, {r['rows']} rows"
    if "last_step" in r:
        head += f", steps {r['first_step']:.0f}-{r['last_step']:.0f}"
    if r["curve"] != "loss":
        head += f", diagnosing {r['curve']}"
    elif "final_loss" not in r:
        head += ", no loss logged: grad norm only"
    return head + ")"


def _ok_line(r: dict) -> str:
    """The few numbers that matter for a run with nothing to worry about."""
    from llmtk.curves.common import fmt

    parts = []
    if "final_loss" in r:
        parts.append(f"final {r['curve']} {fmt(r['final_loss'])} (median of the last "
                     f"{r['final_rows']} rows; last logged {fmt(r['last_loss'])}, best "
                     f"{fmt(r['best_loss'])})")
    if "best_val_loss" in r and r["curve"] != "val_loss":
        parts.append(f"best val {fmt(r['best_val_loss'])}")
    if "val_gap" in r:
        parts.append(f"val gap {r['val_gap']:+.3g}")
    if "spike_score" in r:
        parts.append(f"spike score {r['spike_score'] * 100:.2f}%")
    if "hours" in r:
        seconds = r["hours"] * 3600
        parts.append(f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
                     if seconds < 7200 else f"{r['hours']:.1f} h")
    return ", ".join(parts)


def _print(reports: list[dict], verbose: bool) -> None:
    import sys

    from rich.markup import escape

    from llmtk.io.console import buffered_console

    console, emit = buffered_console(sys.stdout)
    for r in reports:
        console.print(_head(r))
        for note in r.get("notes", []):  # how the log was read: which keys, which curve
            console.print(f"  note: {note}")
        if not any(f["severity"] != "info" for f in r["findings"]):
            console.print(f"  [green]ok[/green]       {_ok_line(r)}")
        # one block per kind: every finding's summary, then its causes and fixes once
        kinds: dict[str, list[dict]] = {}
        for f in r["findings"]:
            kinds.setdefault(f["kind"], []).append(f)
        for kind, group in sorted(kinds.items(), key=lambda kv: min(
                (ORDER[f["severity"]], f["step"]) for f in kv[1])):
            for f in sorted(group, key=lambda f: (ORDER[f["severity"]], f["step"])):
                style = SEVERITY_STYLE[f["severity"]]
                console.print(f"  [{style}]{f['severity']:8}[/{style}] [bold]{kind}[/bold]: "
                              f"{f['summary']}")
                if verbose:
                    for detail in f.get("details", []):
                        console.print(f"           {detail}")
                for line in f.get("commands", []):  # the documents behind the step
                    console.print(f"           data:  {escape(line)}", soft_wrap=True)
            if verbose or any(f["severity"] != "info" for f in group):
                for cause in group[0]["causes"]:
                    console.print(f"           cause? {cause}")
                for fix in group[0]["fixes"]:
                    console.print(f"           fix:   {fix}")
        if any(f["severity"] != "info" for f in r["findings"]) and not verbose and _ok_line(r):
            console.print(f"           ({_ok_line(r)})")
        console.print()
    emit()


def register(app: typer.Typer) -> None:
    app.command(name="diagnose", help=HELP, short_help=SUMMARY, epilog=EPILOG)(command)
