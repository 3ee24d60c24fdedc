"""`llmtk plot-loss`: files by extension, atomic writes, terminal charts, bad usage."""

import json
import math

import pytest

from tests.util import llmtk


def write_run(path, n=200, val=True):
    rows = []
    for s in range(n):
        rows.append({"step": s, "loss": 2 + 3 * math.exp(-s / 40), "lr": 1e-3 * min(1, s / 20),
                     "grad_norm": 1.0, "tokens": s * 512, "time": 1000.0 + s})
        if val and s % 50 == 0:
            rows.append({"step": s, "val_loss": 2.1 + 3 * math.exp(-s / 40)})
    rows.append({"step": 100, "event": "resume"})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_png_and_svg_files(tmp_path):
    a = write_run(tmp_path / "a" / "metrics.jsonl")
    b = write_run(tmp_path / "b" / "metrics.jsonl", val=False)
    png, svg = tmp_path / "loss.png", tmp_path / "loss.svg"
    r = llmtk("plot-loss", a, b, "-o", png, "--all", "--smooth", "0.6")
    assert r.returncode == 0, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = llmtk("plot-loss", tmp_path / "a", "-o", svg, "--x", "tokens", "--log-y")
    assert r.returncode == 0, r.stderr
    assert b"<svg" in svg.read_bytes()[:500]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "loss.png", "loss.svg"]


def test_terminal_chart_names_the_runs(tmp_path):
    a = write_run(tmp_path / "runA" / "metrics.jsonl")
    r = llmtk("plot-loss", a, "--metric", "loss")
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert "runA" in out and "loss" in out and "step" in out
    assert "\x1b[" not in out  # no colour codes into a pipe


def test_bad_usage(tmp_path):
    a = write_run(tmp_path / "a.jsonl")
    assert llmtk("plot-loss", a, "-o", tmp_path / "x.jpg").returncode == 2
    assert llmtk("plot-loss", a, "--metric", "perplexity").returncode == 2
    assert llmtk("plot-loss", a, "--x", "epochs").returncode == 2
    assert llmtk("plot-loss", tmp_path / "nope.jsonl").returncode == 2
    assert not (tmp_path / "x.jpg").exists()


def test_findings_are_marked_and_labelled(tmp_path):
    rows = [{"step": s, "loss": 2 + 3 * math.exp(-s / 40) + (1.5 if s == 150 else 0.0)}
            for s in range(300)]
    log = tmp_path / "spiky.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    svg = tmp_path / "a.svg"
    r = llmtk("plot-loss", log, "--findings", "-o", svg)
    assert r.returncode == 0, r.stderr
    assert "spike" in svg.read_text()
    plain = tmp_path / "b.svg"
    llmtk("plot-loss", log, "-o", plain, check=True)
    assert "spike" not in plain.read_text()


def test_extreme_values_are_one_line_errors_and_missing_folders_are_made(tmp_path):
    log = tmp_path / "m.jsonl"
    log.write_text('{"step": 1, "loss": 1e308}\n{"step": 2, "loss": -1e308}\n'
                   '{"step": 3, "loss": "-Infinity"}\n{"step": 4, "loss": 2.0}\n')
    for args in ([], ["-o", tmp_path / "loss.png"]):
        r = llmtk("plot-loss", log, *args)
        assert r.returncode == 1, r.stderr
        assert r.stderr.startswith(b"llmtk: error: ") and r.stderr.count(b"\n") == 1, r.stderr
        assert b"overflows" in r.stderr
    assert list(tmp_path.iterdir()) == [log]  # no half-written figure
    r = llmtk("plot-loss", log, "-o", tmp_path / "no" / "loss.png")
    assert r.returncode == 1 and b"overflows" in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == [log]  # the folder it made for the figure is gone
    good = tmp_path / "ok.jsonl"
    good.write_text('{"step": 1, "loss": 3.0}\n{"step": 2, "loss": 2.0}\n')
    llmtk("plot-loss", good, "-o", tmp_path / "new" / "dir" / "loss.png", check=True)
    assert (tmp_path / "new" / "dir" / "loss.png").stat().st_size > 0  # mkdir -p, as -o does


# -- the charts themselves, inspected in-process -------------------------------------------


def runs_of(*paths):
    from llmtk.curves.logs import load_runs

    return load_runs([str(p) for p in paths])


def drawn(fig):
    """Lay the figure out (legend and tick positions) without writing an image."""
    fig.draw_without_rendering()
    return fig


def noisy_run(path, n=400, val_every=125, resume=None, nan=None):
    rows = []
    for s in range(n):
        rows.append({"step": s, "loss": 2 + 3 * math.exp(-s / 80) + 0.3 * (-1) ** s,
                     "tokens": s * 2048})
        if val_every and s % val_every == 0:
            rows.append({"step": s, "val_loss": 2 + 3 * math.exp(-s / 80)})
    if resume is not None:
        rows.append({"step": resume, "event": "resume"})
    if nan is not None:
        rows.append({"step": nan, "event": "nan"})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_smoothing_is_tensorboards_debiased_ema():
    from llmtk.curves.style import smooth

    # last = w * last + (1 - w) * y, divided by 1 - w**n (by hand for w = 0.5)
    assert smooth([0, 1, 2], [1.0, 2.0, 3.0], 0.5) == pytest.approx([1.0, 5 / 3, 2.125 / 0.875])
    assert smooth([0, 1, 2], [1.0, 2.0, 3.0], 0.5, every=1) == \
        pytest.approx(smooth([0, 1, 2], [1.0, 2.0, 3.0], 0.5))
    assert smooth([0, 1], [1.0, 5.0], 0.0) == [1.0, 5.0]
    # a point 125 spacings on has decayed by 0.9**125: it is its own value
    assert smooth([0, 125], [5.0, 2.0], 0.9, every=1)[1] == pytest.approx(2.0, abs=1e-5)


def test_smoothed_line_is_drawn_over_a_faint_raw_line_and_named(tmp_path):
    from llmtk.curves.plot import figure

    runs = runs_of(noisy_run(tmp_path / "a.jsonl", val_every=0))
    ax = figure(runs, ["loss"], weight=0.9).axes[0]
    raw, smoothed = ax.get_lines()
    assert raw.get_color() == smoothed.get_color()
    assert raw.get_alpha() == 0.25 and smoothed.get_alpha() is None
    assert list(raw.get_ydata()) == runs[0].series("loss")[1]  # the raw values, unchanged
    assert max(abs(a - b) for a, b in zip(raw.get_ydata(), smoothed.get_ydata(), strict=True)) > 0.2
    legend = ax.get_legend()
    assert legend.get_title().get_text() == "smoothed 0.9 (faint: raw)"
    assert [t.get_text() for t in legend.get_texts()] == ["a"]  # the raw line is not listed
    plain = figure(runs, ["loss"]).axes[0]
    assert len(plain.get_lines()) == 1 and plain.get_legend().get_title().get_text() == ""


def test_val_loss_is_smoothed_by_its_own_spacing(tmp_path):
    from llmtk.curves.plot import figure
    from llmtk.curves.style import smooth

    runs = runs_of(noisy_run(tmp_path / "a.jsonl", n=1000, val_every=125))
    ax = figure(runs, ["loss", "val_loss"], weight=0.9).axes[0]
    val = [line for line in ax.get_lines() if line.get_marker() == "o"]
    assert len(val) == 1
    xs, raw = runs[0].series("val_loss")
    assert max(abs(a - b) for a, b in zip(val[0].get_ydata(), raw, strict=True)) < 1e-3
    # per point, as the training weight would drag it: far above the raw values
    assert max(abs(a - b) for a, b in zip(smooth(xs, raw, 0.9), raw, strict=True)) > 0.5


def test_many_runs_get_one_legend_outside_the_panels(tmp_path):
    from llmtk.curves.plot import figure

    runs = runs_of(*(noisy_run(tmp_path / f"r{i}" / "metrics.jsonl") for i in range(8)))
    fig = drawn(figure(runs, ["loss", "val_loss", "tokens"], weight=0.9))
    assert all(ax.get_legend() is None for ax in fig.axes)
    (legend,) = fig.legends
    box = legend.get_window_extent()
    for ax in fig.axes:
        assert box.x0 >= ax.get_window_extent().x1  # right of every panel, covering none
    texts = [t.get_text() for t in legend.get_texts()]
    assert texts[:8] == [f"r{i}" for i in range(8)] and "val_loss" in texts
    assert legend.get_title().get_text() == "smoothed 0.9 (faint: raw)"
    few = drawn(figure(runs[:3], ["loss"]))
    assert not few.legends and few.axes[0].get_legend() is not None


def test_findings_never_share_a_runs_colour(tmp_path):
    from matplotlib.colors import to_hex

    from llmtk.curves.plot import figure
    from llmtk.curves.style import FINDING_COLOURS, RESUME_COLOUR, RUN_COLOURS, run_style

    reserved = {*FINDING_COLOURS.values(), RESUME_COLOUR}
    assert not reserved & set(RUN_COLOURS)
    assert len({run_style(i) for i in range(15)}) == 15  # colours repeat with other dashes
    paths = []
    for i in range(6):  # more runs than colours; a spike, a NaN and a resume in each
        rows = [{"step": s, "loss": 2 + 3 * math.exp(-s / 40) + (1.5 if s == 150 else 0.0)}
                for s in range(300)] + [{"step": 200, "event": "nan"},
                                        {"step": 100, "event": "resume"}]
        paths.append(tmp_path / f"r{i}.jsonl")
        paths[-1].write_text("".join(json.dumps(r) + "\n" for r in rows))
    runs = runs_of(*paths)
    ax = figure(runs, ["loss"], findings=True).axes[0]
    names = {run.name for run in runs}
    run_colours = {to_hex(line.get_color()) for line in ax.get_lines()
                   if line.get_label() in names}
    marks = [line for line in ax.get_lines() if line.get_label().lstrip("_") not in names]
    assert len(run_colours) == 5 and marks
    assert {to_hex(line.get_color()) for line in marks} <= {to_hex(c) for c in reserved}
    assert {t.get_text() for t in ax.texts} >= {" nan", " spikes"}


def test_resume_and_nan_lines_are_in_the_legend_once(tmp_path):
    from matplotlib.colors import to_hex

    from llmtk.curves.plot import figure
    from llmtk.curves.style import RESUME_COLOUR

    runs = runs_of(noisy_run(tmp_path / "a.jsonl", resume=100, nan=150),
                   noisy_run(tmp_path / "b.jsonl", resume=200))
    legend = figure(runs, ["loss"]).axes[0].get_legend()
    texts = [t.get_text() for t in legend.get_texts()]
    assert texts == ["a", "b", "NaN / skipped step", "resume"]
    resume = legend.legend_handles[texts.index("resume")]
    assert resume.get_linestyle() == ":" and to_hex(resume.get_color()) == RESUME_COLOUR.lower()


def test_tick_labels_read_as_1k_250k_1_2m():
    from llmtk.curves.style import human, human_ticks, nice_ticks

    assert [human(v) for v in (0, 999, 1000, 1500, 250000, 1.2e6, 3e9, 999999, 2.5e12)] == \
        ["0", "999", "1k", "1.5k", "250k", "1.2M", "3B", "1M", "2.5T"]
    assert human_ticks([1_000_100, 1_000_200]) == ["1.0001M", "1.0002M"]  # kept apart
    assert nice_ticks(0, 250_000) == [0, 100_000, 200_000]


def test_axes_show_tokens_as_100k_200k_and_val_loss_on_the_tokens_axis(tmp_path):
    from llmtk.curves.plot import figure

    runs = runs_of(write_run(tmp_path / "a.jsonl", n=1000))  # val rows carry no tokens
    fig = drawn(figure(runs, ["loss", "val_loss"], x="tokens"))
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert "200k" in labels and all(not t.replace("−", "").isdigit() or len(t) < 4
                                    for t in labels), labels
    assert ax.xaxis.get_offset_text().get_text() == ""
    (val,) = [line for line in ax.get_lines() if line.get_marker() == "o"]
    assert list(val.get_xdata()) == [s * 512 for s in range(0, 1000, 50)]


def test_terminal_chart_keeps_the_terminal_background(tmp_path):
    import re

    from llmtk.curves.plot import plot_terminal

    runs = runs_of(noisy_run(tmp_path / "a" / "metrics.jsonl", n=250_000 // 500 + 1),
                   noisy_run(tmp_path / "b" / "metrics.jsonl", n=100))
    out = plot_terminal(runs, ["loss"], x="tokens", weight=0.9, width=80, height=16)
    assert "\x1b[38;5;" in out  # coloured lines ...
    assert not re.search(r"\x1b\[(48;|4[0-7]m|10[0-7]m|7m)", out)  # ... on no painted background
    assert "loss (smoothed 0.9)" in out
    plain = plot_terminal(runs, ["loss"], x="tokens", width=80, height=16, colour=False)
    assert "\x1b[" not in plain and "a" in plain and "b" in plain
    assert "1M" in plain and "1000000" not in plain  # 501 steps x 2048 tokens: ~1M


def _on_a_terminal(args, **env_vars) -> bytes:
    """stdout of `llmtk ARGS` written to a pseudo-terminal (so it may use colour)."""
    import os
    import pty
    import subprocess
    import sys

    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "100", "LINES": "30", "TERM": "xterm", **env_vars}
    proc = subprocess.Popen([sys.executable, "-m", "llmtk", *map(str, args)], stdout=slave,
                            stderr=subprocess.DEVNULL, env=env)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait() == 0
    return out


def test_no_color_set_but_empty_keeps_colour(tmp_path):
    # no-color.org: only a non-empty NO_COLOR turns colour off.
    a = write_run(tmp_path / "runA" / "metrics.jsonl")
    assert b"\x1b[" in _on_a_terminal(["plot-loss", a, "--metric", "loss"], NO_COLOR="")
    assert b"\x1b[" not in _on_a_terminal(["plot-loss", a, "--metric", "loss"], NO_COLOR="1")


def test_terminal_legend_is_under_the_chart_not_over_the_curves(tmp_path):
    # plotext's own legend sits in the top-left corner of the plot area, where a loss
    # curve starts: the names must be below the frame, on lines of their own.
    runs = [write_run(tmp_path / name / "metrics.jsonl") for name in ("runA", "runB-long")]
    r = llmtk("plot-loss", *runs, "--metric", "loss")
    assert r.returncode == 0, r.stderr
    rows = r.stdout.decode().splitlines()
    bottom = max(i for i, row in enumerate(rows) if "└" in row)
    assert not any("runA" in row or "runB-long" in row for row in rows[:bottom])
    assert rows[-1].split() == ["──", "runA", "──", "runB-long"]


def test_a_blended_runs_sources_share_the_loss_and_a_tokens_panel(tmp_path):
    from llmtk.curves.plot import figure

    rows = []
    for s in range(1, 41):
        rows.append({"step": s, "loss": 5 - s / 20, "tokens": 64 * s, "tokens/web": 48 * s,
                     "tokens/code": 16 * s})
        if s % 10 == 0:
            rows.append({"step": s, "val_loss": 5 - s / 25, "val/web/loss": 4.9 - s / 25,
                         "val/code/loss": 5.1 - s / 25})
    path = tmp_path / "blend" / "metrics.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # the default: loss, val_loss and each source's val loss in the loss panel, dashed
    p = llmtk("plot-loss", path, in_process=True)
    assert p.returncode == 0 and b"val/web/loss" in p.stdout and b"val/code/loss" in p.stdout
    fig = figure(runs_of(path), ["loss", "val_loss", "val/web/loss", "val/code/loss",
                                 "tokens/web", "tokens/code"])
    loss, tokens = fig.axes
    assert [ax.get_ylabel() for ax in fig.axes] == ["loss", "tokens per source"]
    assert [line.get_marker() for line in loss.get_lines()] == ["None", "o", "o", "o"]
    assert [list(line.get_ydata())[-1] for line in tokens.get_lines()] == [48 * 40, 16 * 40]
    assert len({line.get_color() for line in tokens.get_lines()}) == 2  # a colour a source


def test_a_moe_runs_expert_load_gets_its_own_panel_by_default(tmp_path):
    """Each MoE layer's busiest (solid) and idlest (dashed) expert, share x E, in one panel
    drawn by default; a layer's two lines share its colour."""
    from llmtk.curves.plot import EXPERT_PANEL, figure

    rows = [{"step": s, "loss": 5 - s / 20,
             "expert_load/0": [0.25, 0.25, 0.25, 0.25],
             "expert_load/1": [0.5 - s / 100, 0.25, 0.25, s / 100]} for s in range(1, 21)]
    path = tmp_path / "moe" / "metrics.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    p = llmtk("plot-loss", path, in_process=True)
    assert p.returncode == 0 and b"expert load" in p.stdout
    assert b"expert_load_max/1" in p.stdout and b"expert_load_min/1" in p.stdout
    fig = figure(runs_of(path), ["loss", "expert_load_max/0", "expert_load_max/1",
                                 "expert_load_min/0", "expert_load_min/1"])
    assert [ax.get_ylabel() for ax in fig.axes] == ["loss", EXPERT_PANEL]
    lines = fig.axes[1].get_lines()
    ends = [list(line.get_ydata())[-1] for line in lines]
    assert ends == [1.0, pytest.approx(4 * 0.3), 1.0, pytest.approx(4 * 0.2)]
    assert [line.get_linestyle() for line in lines] == ["-", "-", "--", "--"]
    assert lines[1].get_color() == lines[3].get_color() != lines[0].get_color()
    # a dense run's default chart has no such panel
    dense = tmp_path / "dense" / "metrics.jsonl"
    write_run(dense, n=20, val=False)
    assert b"expert load" not in llmtk("plot-loss", dense, in_process=True).stdout
