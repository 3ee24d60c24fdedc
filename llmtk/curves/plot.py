"""Drawing runs: matplotlib files (PNG/SVG/PDF) or a chart in the terminal (plotext).

One panel per quantity: `loss` (with `val_loss` on the same axes), `lr`,
`grad_norm`, or any other logged metric; a blended run's per-source series share a
panel: `tokens/NAME` the "tokens per source" one, `val/NAME/loss` the loss panel
(dashed with markers, as `val_loss`); a mixture-of-experts run's busiest and idlest
expert per layer (`expert_load_max/N` solid, `expert_load_min/N` dashed, share x E:
1 is uniform) the "expert load" one. Non-finite points are left out of
the lines; NaN/skip events are marked as vermillion dashed lines and resumes as
grey dotted lines, each named in the legend, so a spike or a restart is easy to
place. Colours, smoothing and tick labels live in `llmtk.curves.style`.
"""

from __future__ import annotations

import math

from llmtk.curves.logs import Run
from llmtk.curves.style import (
    FINDING_COLOURS,
    RAW_ALPHA,
    RESUME_COLOUR,
    TERMINAL_COLOURS,
    human_formatter,
    human_ticks,
    nice_ticks,
    run_style,
    smooth,
    spacing,
)

PANEL_OF = {"val_loss": "loss"}
LAYER_PANEL = "grad_norm per layer"  # every grad_norm/LAYER series of --grad-stats
LOG_PANELS = ("grad_norm", LAYER_PANEL)


SOURCE_TOKENS_PANEL = "tokens per source"  # every tokens/NAME series of a blended run


def is_val(metric: str) -> bool:
    """val_loss, or a blended run's per-source val/NAME/loss."""
    return metric == "val_loss" or (metric.startswith("val/") and metric.endswith("/loss"))


EXPERT_PANEL = "expert load (share x E)"  # each MoE layer's busiest and idlest expert


def panel_of(metric: str) -> str:
    if metric.startswith(("expert_load_max/", "expert_load_min/")):
        return EXPERT_PANEL
    if metric.startswith("grad_norm/"):
        return LAYER_PANEL
    if metric.startswith("tokens/"):
        return SOURCE_TOKENS_PANEL
    if is_val(metric):
        return "loss"
    return PANEL_OF.get(metric, metric)
X_LABEL = {"step": "step", "tokens": "tokens", "time": "hours"}
MANY_RUNS = 3  # more runs than this: one legend for the figure, outside the panels
NAN_LABEL, RESUME_LABEL = "NaN / skipped step", "resume"


def panels_for(runs: list[Run], metrics: list[str]) -> dict[str, list[str]]:
    """Panel name -> the metrics drawn in it, keeping only metrics some run has."""
    panels: dict[str, list[str]] = {}
    for metric in metrics:
        if any(run.has(metric) for run in runs):
            panels.setdefault(panel_of(metric), []).append(metric)
    return panels


def _xy(run: Run, metric: str, x: str) -> tuple[list[float], list[float]]:
    xs, ys = run.series(metric, x)
    if x == "tokens" and len(xs) < len(run.series(metric, "step")[0]):
        xs, ys = _tokens_from_steps(run, metric)
    pairs = [(a, b) for a, b in zip(xs, ys, strict=True) if math.isfinite(b)]
    xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
    if x == "time" and xs:
        start = xs[0]
        xs = [(v - start) / 3600 for v in xs]
    return xs, ys


def _tokens_from_steps(run: Run, metric: str) -> tuple[list[float], list[float]]:
    """The metric against tokens where some of its rows log no token count (llmtk's
    val_loss rows between log rows): tokens read off the run's (step, tokens) line,
    within the steps it covers."""
    steps, ys = run.series(metric, "step")
    known = sorted(zip(*run.series("tokens", "step"), strict=True))
    if not known:
        return [], []
    import numpy as np

    ks, kt = np.array([p[0] for p in known]), np.array([p[1] for p in known])
    inside = [(s, y) for s, y in zip(steps, ys, strict=True) if ks[0] <= s <= ks[-1]]
    xs = np.interp([p[0] for p in inside], ks, kt).tolist() if inside else []
    return xs, [p[1] for p in inside]


def _panel_series(run: Run, names: list[str], x: str):
    """{metric: (xs, ys)} of one run in one panel, and the x distance one smoothing step
    stands for: the spacing of the run's most often logged curve there (the training loss
    beside val_loss), so val_loss is smoothed by its own, wider spacing."""
    series = {m: _xy(run, m, x) for m in names}
    gaps = [g for xs, _ in series.values() if (g := spacing(xs))]
    return series, (min(gaps) if gaps else None)


def smoothing_title(weight: float) -> str | None:
    return f"smoothed {weight:g} (faint: raw)" if weight > 0 else None


def _event_steps(run: Run, kinds: tuple[str, ...]) -> list[float]:
    return [float(e["step"]) for e in run.events
            if e.get("event") in kinds and isinstance(e.get("step"), int | float)]


class _Labels:
    """Names each kind of marker once per panel (matplotlib lists every labelled artist)."""

    def __init__(self):
        self.seen: set[str] = set()

    def __call__(self, label: str) -> str:
        if label in self.seen:
            return "_" + label  # a leading underscore keeps an artist out of the legend
        self.seen.add(label)
        return label


def _is_marker(artist) -> bool:
    """A NaN, resume or finding line (named once per panel), not a run's curve."""
    label = artist.get_label()
    return label in (NAN_LABEL, RESUME_LABEL) or label.startswith("diagnose: ")


def _mark_findings(ax, run: Run, label: _Labels) -> None:
    """Draw `llmtk diagnose`'s findings: a line (or span) at the step, labelled by kind."""
    from llmtk.curves.detect import diagnose

    for f in diagnose(run):
        colour = FINDING_COLOURS[f.severity]
        if f.end_step is not None and f.end_step > f.step:
            ax.axvspan(f.step, f.end_step, color=colour, alpha=0.12)
        ax.axvline(f.step, color=colour, linewidth=0.9, alpha=0.8,
                   label=label(f"diagnose: {f.severity}"))
        ax.text(f.step, 0.98, f" {f.kind}", transform=ax.get_xaxis_transform(), rotation=90,
                va="top", ha="right", fontsize=7, color=colour)


def _colour_index(names: list[str], metric: str, j: int) -> int:
    """The colour of a series of a one-run panel: its own (j), or in the expert panel its
    layer's, shared by the layer's busiest and idlest expert."""
    if panel_of(metric) != EXPERT_PANEL:
        return j
    layers = list(dict.fromkeys(n.split("/", 1)[1] for n in names))
    return layers.index(metric.split("/", 1)[1])


def _draw_run(ax, i: int, run: Run, names: list[str], x: str, weight: float,
              alone: bool = False) -> bool:
    """alone: the only run drawn, so several series of one panel (sources, layers) get a
    colour each; with several runs, a colour is a run."""
    colour, train_style, val_style = run_style(i)
    series, every = _panel_series(run, names, x)
    drawn = False
    for j, (metric, (xs, ys)) in enumerate(series.items()):
        if not xs:
            continue
        drawn = True
        val = is_val(metric)
        if alone and len(series) > 1 and metric not in ("loss", "val_loss"):
            colour = run_style(_colour_index(list(series), metric, j))[0]
        # an expert panel: the idlest expert dashed under the busiest, in its layer's colour
        style = val_style if val or metric.startswith("expert_load_min/") else train_style
        if weight > 0:  # the raw curve, faint, under the smoothed one
            ax.plot(xs, ys, color=colour, linestyle=style, linewidth=0.8, alpha=RAW_ALPHA,
                    label="_raw")
        ax.plot(xs, smooth(xs, ys, weight, every), color=colour, linestyle=style,
                marker="o" if val else None, markersize=3, linewidth=1.2,
                label=run.name if len(names) == 1 else f"{run.name} {metric}")
    return drawn


def figure(runs: list[Run], metrics: list[str], x: str = "step", weight: float = 0.0,
           log_y: bool = False, title: str | None = None, findings: bool = False):
    """The matplotlib Figure of these runs (no pyplot state: the caller saves it)."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    panels = panels_for(runs, metrics)
    many = len(runs) > MANY_RUNS
    fig = Figure(figsize=(11 if many else 9, 3.2 * len(panels)), layout="constrained")
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    drawn: set[int] = set()
    for ax, (panel, names) in zip(axes, panels.items(), strict=True):
        label = _Labels()
        for i, run in enumerate(runs):
            if _draw_run(ax, i, run, names, x, weight, alone=len(runs) == 1):
                drawn.add(i)
            if x == "step":
                for s in _event_steps(run, ("nan", "skip")):
                    ax.axvline(s, color=FINDING_COLOURS["error"], linestyle="--",
                               linewidth=0.8, alpha=0.6, label=label(NAN_LABEL))
                for s in _event_steps(run, ("resume",)):
                    ax.axvline(s, color=RESUME_COLOUR, linestyle=":", linewidth=1.0,
                               label=label(RESUME_LABEL))
                if findings and ax is axes[0]:
                    _mark_findings(ax, run, label)
        ax.set_ylabel(panel)
        if log_y or panel in LOG_PANELS:
            ax.set_yscale("log")
        if x in ("step", "tokens"):
            ax.xaxis.set_major_formatter(human_formatter())
        ax.grid(True, alpha=0.3)
        if not many:  # runs first, then the markers
            handles = sorted(ax.get_legend_handles_labels()[0], key=_is_marker)
            ax.legend(handles=handles, fontsize=8, loc="best", title=smoothing_title(weight),
                      title_fontsize=8)
    if many:  # one legend: a colour per run, then the line styles and the markers
        handles = [Line2D([], [], color=run_style(i)[0], linestyle=run_style(i)[1],
                          label=runs[i].name) for i in sorted(drawn)]
        if any(len(names) > 1 for names in panels.values()):
            handles += [Line2D([], [], color="#444444", linestyle="-", label="loss"),
                        Line2D([], [], color="#444444", linestyle="--", marker="o",
                               markersize=3, label="val_loss")]
        markers: dict[str, object] = {}
        for ax in axes:
            for artist in ax.get_lines():
                if _is_marker(artist):
                    markers.setdefault(artist.get_label(), artist)
        fig.legend(handles=handles + list(markers.values()), loc="outside right upper",
                   fontsize=8, title=smoothing_title(weight), title_fontsize=8)
    axes[-1].set_xlabel(X_LABEL[x])
    if title:
        fig.suptitle(title)
    return fig


def plot_file(runs: list[Run], metrics: list[str], out, x: str = "step",
              weight: float = 0.0, log_y: bool = False, title: str | None = None,
              findings: bool = False, fmt: str | None = None) -> None:
    """Draw to `out`, a path or a binary file (then give `fmt`: png, svg or pdf)."""
    import matplotlib

    fig = figure(runs, metrics, x=x, weight=weight, log_y=log_y, title=title,
                 findings=findings)
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # SVG text stays text (searchable)
        fig.savefig(out, dpi=120, format=fmt)


def plot_terminal(runs: list[Run], metrics: list[str], x: str = "step", weight: float = 0.0,
                  log_y: bool = False, width: int | None = None, height: int | None = None,
                  colour: bool = True) -> str:
    import plotext as plt

    panels = panels_for(runs, metrics)
    charts = []
    for panel, names in panels.items():
        plt.clear_figure()
        # "pro": the terminal's own background and text colour (the default theme paints
        # a white block, glaring on a dark terminal); lines keep their colours.
        plt.theme("pro")
        plt.plotsize(width or min(plt.terminal_width() or 100, 120), height or 18)
        lo, hi = math.inf, -math.inf
        legend = []  # (label, colour), drawn under the chart, not over its curves
        for i, run in enumerate(runs):
            series, every = _panel_series(run, names, x)
            for metric, (xs, ys) in series.items():
                if xs:
                    label = run.name if len(names) == 1 else f"{run.name} {metric}"
                    line_colour = TERMINAL_COLOURS[i % len(TERMINAL_COLOURS)]
                    plt.plot(xs, smooth(xs, ys, weight, every), marker="braille",
                             color=line_colour)
                    legend.append((label, line_colour))
                    lo, hi = min(lo, min(xs)), max(hi, max(xs))
        plt.title(f"{panel} (smoothed {weight:g})" if weight > 0 else panel)
        plt.xlabel(X_LABEL[x])
        if x in ("step", "tokens") and (ticks := nice_ticks(lo, hi)):
            plt.xticks(ticks, human_ticks(ticks))  # 250k, not 250000.0
        if log_y or panel in LOG_PANELS:
            plt.yscale("log")
        chart = plt.build()
        chart = chart if colour else plt.uncolorize(chart)
        width_used = max((len(plt.uncolorize(row)) for row in chart.splitlines()), default=80)
        charts.append(chart + "\n" + _terminal_legend(legend, width_used, colour))
    return "\n".join(charts)


def _terminal_legend(entries: list[tuple[str, str]], width: int, colour: bool) -> str:
    """`── run` entries packed into lines of at most `width` characters.

    plotext draws its legend inside the plot area, where it hides the start of the
    curves (the part of a loss curve that moves most), so the chart has none of its own.
    """
    import plotext as plt

    lines, line, used = [], [], 0
    for label, line_colour in entries:
        shown = len(label) + 5  # "── " + label + two spaces between entries
        if line and used + shown > width:
            lines.append("".join(line).rstrip())
            line, used = [], 0
        mark = plt.colorize("──", line_colour) if colour else "──"
        line.append(f"{mark} {label}  ")
        used += shown
    if line:
        lines.append("".join(line).rstrip())
    return "\n".join(lines)
