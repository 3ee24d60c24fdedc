"""`llmtk plot-loss`: files by extension, atomic writes, terminal charts, bad usage."""

import json
import math

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


def test_extreme_values_and_a_missing_directory_are_one_line_errors(tmp_path):
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
    assert r.returncode == 2
    assert r.stderr == (f"llmtk: error: --output {tmp_path}/no/loss.png: directory "
                        f"{tmp_path}/no does not exist\n").encode()
