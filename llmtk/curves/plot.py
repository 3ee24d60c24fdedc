"""Drawing runs: matplotlib files (PNG/SVG/PDF) or a chart in the terminal (plotext).

One panel per quantity: `loss` (with `val_loss` on the same axes), `lr`,
`grad_norm`, or any other logged metric. Non-finite points are left out of
the lines; NaN/skip events are marked as red dashed lines and resumes as grey
dotted lines, so a spike or a restart is easy to place.
"""

from __future__ import annotations

import math

from llmtk.curves.common import ema
from llmtk.curves.logs import Run

PANEL_OF = {"val_loss": "loss"}
X_LABEL = {"step": "step", "tokens": "tokens", "time": "hours"}


def panels_for(runs: list[Run], metrics: list[str]) -> dict[str, list[str]]:
    """Panel name -> the metrics drawn in it, keeping only metrics some run has."""
    panels: dict[str, list[str]] = {}
    for metric in metrics:
        if any(run.has(metric) for run in runs):
            panels.setdefault(PANEL_OF.get(metric, metric), []).append(metric)
    return panels


def smooth(ys: list[float], weight: float) -> list[float]:
    """TensorBoard-style smoothing: weight 0 = raw, 0.9 = strong."""
    if weight <= 0:
        return ys
    span = 2.0 / (1.0 - weight) - 1.0
    return ema(ys, span=int(round(span)))


def _xy(run: Run, metric: str, x: str, weight: float) -> tuple[list[float], list[float]]:
    key = "time" if x == "time" else x
    xs, ys = run.series(metric, key)
    pairs = [(a, b) for a, b in zip(xs, ys, strict=True) if math.isfinite(b)]
    xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
    if x == "time" and xs:
        start = xs[0]
        xs = [(v - start) / 3600 for v in xs]
    return xs, smooth(ys, weight)


def _event_steps(run: Run, kinds: tuple[str, ...]) -> list[float]:
    return [float(e["step"]) for e in run.events
            if e.get("event") in kinds and isinstance(e.get("step"), int | float)]


SEVERITY_COLOUR = {"error": "red", "warning": "darkorange", "info": "grey"}


def _mark_findings(ax, run: Run) -> None:
    """Draw `llmtk diagnose`'s findings: a line (or span) at the step, labelled by kind."""
    from llmtk.curves.detect import diagnose

    for f in diagnose(run):
        colour = SEVERITY_COLOUR[f.severity]
        if f.end_step is not None and f.end_step > f.step:
            ax.axvspan(f.step, f.end_step, color=colour, alpha=0.12)
        ax.axvline(f.step, color=colour, linewidth=0.9, alpha=0.8)
        ax.text(f.step, 0.98, f" {f.kind}", transform=ax.get_xaxis_transform(), rotation=90,
                va="top", ha="right", fontsize=7, color=colour)


def plot_file(runs: list[Run], metrics: list[str], out, x: str = "step",
              weight: float = 0.0, log_y: bool = False, title: str | None = None,
              findings: bool = False, fmt: str | None = None) -> None:
    """Draw to `out`, a path or a binary file (then give `fmt`: png, svg or pdf)."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # SVG text stays text (searchable)
    import matplotlib.pyplot as plt

    panels = panels_for(runs, metrics)
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 3.2 * len(panels)), sharex=True,
                             squeeze=False)
    for ax, (panel, names) in zip(axes[:, 0], panels.items(), strict=True):
        for i, run in enumerate(runs):
            colour = f"C{i % 10}"
            for metric in names:
                xs, ys = _xy(run, metric, x, weight)
                if not xs:
                    continue
                label = run.name if len(names) == 1 else f"{run.name} {metric}"
                ax.plot(xs, ys, color=colour, linestyle="--" if metric == "val_loss" else "-",
                        marker="o" if metric == "val_loss" else None, markersize=3,
                        linewidth=1.2, label=label)
            if x == "step":
                for s in _event_steps(run, ("nan", "skip")):
                    ax.axvline(s, color="red", linestyle="--", linewidth=0.8, alpha=0.6)
                for s in _event_steps(run, ("resume",)):
                    ax.axvline(s, color="grey", linestyle=":", linewidth=0.8)
                if findings and panel == next(iter(panels)):
                    _mark_findings(ax, run)
        ax.set_ylabel(panel)
        if log_y or panel == "grad_norm":
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    axes[-1, 0].set_xlabel(X_LABEL[x])
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=120, format=fmt)
    finally:
        plt.close(fig)


def plot_terminal(runs: list[Run], metrics: list[str], x: str = "step", weight: float = 0.0,
                  log_y: bool = False, width: int | None = None, height: int | None = None,
                  colour: bool = True) -> str:
    import plotext as plt

    panels = panels_for(runs, metrics)
    charts = []
    for panel, names in panels.items():
        plt.clear_figure()
        plt.plotsize(width or min(plt.terminal_width() or 100, 120), height or 18)
        for run in runs:
            for metric in names:
                xs, ys = _xy(run, metric, x, weight)
                if xs:
                    label = run.name if len(names) == 1 else f"{run.name} {metric}"
                    plt.plot(xs, ys, label=label, marker="braille")
        plt.title(panel)
        plt.xlabel(X_LABEL[x])
        if log_y or panel == "grad_norm":
            plt.yscale("log")
        chart = plt.build()
        charts.append(chart if colour else plt.uncolorize(chart))
    return "\n".join(charts)
