"""`llmtk plot-loss`: draw loss, learning-rate and grad-norm curves of one or more runs."""

from typing import Annotated

import typer

from llmtk.commands import options as o

SUMMARY = "Draw loss, learning-rate and grad-norm curves of one or more runs."

HELP = f"""\
{SUMMARY}

Reads the logs `llmtk diagnose` reads: metrics.jsonl, HF trainer_state.json,
TensorBoard event files, CSV (incl. TensorBoard and W&B exports), W&B history
JSON and run files, and nanoGPT, llm.c, Megatron-LM and torchtitan text.
Writes PNG, SVG or PDF (by the -o extension), or draws in the terminal.

[bold]Examples[/bold]

  llmtk plot-loss runs/*/metrics.jsonl -o loss.png

  llmtk plot-loss runs/a runs/b --metric loss --metric lr \\
    --metric grad_norm -o curves.svg

  llmtk plot-loss runs/a/metrics.jsonl --smooth 0.9 --x tokens

  llmtk plot-loss runs/a --findings -o a.svg  # marks spikes, NaNs, plateaus
"""

DEFAULT = ["loss", "val_loss", "val/*/loss"]  # val/NAME/loss: a blended run's sources
# a mixture-of-experts run's load per layer (busiest and idlest expert), where logged
EXPERTS = ["expert_load_max/*", "expert_load_min/*"]

EPILOG = "Exit status: 0 success, 1 unreadable log or plot error, 2 bad usage."


def command(
    logs: Annotated[list[str], typer.Argument(help="Training logs (any format above), or run "
                                                   "directories.")],
    output: Annotated[str | None, typer.Option(
        "-o", "--output", help="Image file (.png, .svg, .pdf); without it, draw in the "
                               "terminal.")] = None,
    metric: Annotated[list[str] | None, typer.Option(
        "--metric", "-m", help="Metric to draw, repeatable (default: loss, val_loss and a "
                               "blend's val/NAME/loss, in one panel, and a MoE run's "
                               "expert load per layer); a pattern such as "
                               "'grad_norm/*' or 'tokens/*' draws every per-layer norm or "
                               "per-source token count in one panel.")] = None,
    all_metrics: Annotated[bool, typer.Option(
        "--all", help="Draw loss, val_loss, lr, grad_norm, a blend's tokens/NAME and a MoE "
                 "run's expert load.")]
    = False,
    x: Annotated[o.choice("XAxis", "step", "tokens", "time"), typer.Option(
        "--x", help="X axis: step, tokens or time.")] = "step",
    smooth: Annotated[float, typer.Option(
        "--smooth", min=0.0, max=0.999, help="EMA smoothing weight, 0 (raw) to 0.999.")] = 0.0,
    log_y: Annotated[bool, typer.Option("--log-y", help="Logarithmic y axis.")] = False,
    title: Annotated[str | None, typer.Option("--title", help="Figure title.")] = None,
    findings: Annotated[bool, typer.Option(
        "--findings", help="Mark what `llmtk diagnose` finds on the first panel (files, "
                           "x = step).")] = False,
) -> None:
    import os
    import warnings

    from llmtk.curves.logs import load_runs
    from llmtk.curves.plot import panels_for, plot_file, plot_terminal
    from llmtk.errors import DataError, UsageError
    from llmtk.io.atomic import atomic_file
    from llmtk.io.paths import check_paths, parents_made

    metrics = ([*DEFAULT, "lr", "grad_norm", "tokens/*", *EXPERTS] if all_metrics
               else metric or [*DEFAULT, *EXPERTS])
    if output and os.path.splitext(output)[1].lower() not in (".png", ".svg", ".pdf"):
        raise UsageError(f"--output: expected a .png, .svg or .pdf file, got {output!r}")
    if output:  # checked before the logs are read
        check_paths({}, [("--output", output)])
    runs = load_runs(logs)
    metrics = list(dict.fromkeys(name for m in metrics for name in _expand(runs, m)))
    if not panels_for(runs, metrics):
        have = sorted({c for run in runs for c in run.columns()} - {"step", "time"})
        raise UsageError(f"--metric: no numbers for {', '.join(metrics)} in these logs "
                         f"(they have {', '.join(have)})")
    if x != "step" and not any(run.has(x) for run in runs):
        raise UsageError(f"--x {x}: the logs have no {x!r} field")
    if output:
        try:
            with parents_made([output]), atomic_file(output) as f, warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # numpy overflow: said below
                plot_file(runs, metrics, f, x=x, weight=smooth, log_y=log_y, title=title,
                          findings=findings, fmt=os.path.splitext(output)[1][1:].lower())
        except (ValueError, OverflowError) as e:  # matplotlib on values it cannot scale
            raise DataError(f"{output}: cannot draw these values, their range overflows "
                            f"(e.g. 1e308 and -1e308; {e})") from None
        return
    import sys

    # no-color.org: NO_COLOR set to anything but the empty string turns colour off (as rich).
    colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    try:
        chart = plot_terminal(runs, metrics, x=x, weight=smooth, log_y=log_y, colour=colour)
    except (ValueError, OverflowError) as e:  # plotext on values it cannot scale
        raise DataError(f"cannot draw these values in the terminal, their range overflows "
                        f"(e.g. 1e308; {e})") from None
    from llmtk.io.console import write_out

    write_out(sys.stdout, chart + "\n")


def _expand(runs, metric: str) -> list[str]:
    """A metric, or every column a pattern matches (`grad_norm/*`: each layer's norm from
    `llmtk train --grad-stats per-layer`), in the order the first run logged them."""
    import fnmatch

    if not any(c in metric for c in "*?["):
        return [runs[0].metric(metric)]
    columns = dict.fromkeys(c for run in runs for c in run.columns())
    return [c for c in columns if fnmatch.fnmatchcase(c, metric)] or [metric]


def register(app: typer.Typer) -> None:
    app.command(name="plot-loss", help=HELP, short_help=SUMMARY, epilog=EPILOG)(command)
