"""`llmtk diagnose`: one test per problem on synthetic curves, real healthy logs that must
stay quiet, severity from evidence, grouped output, and the help's examples."""

import glob
import json
import math
import os
import re
import shlex
from pathlib import Path

import pytest

from llmtk.commands.diagnose import HELP
from llmtk.curves.detect import diagnose
from llmtk.curves.logs import load_run
from llmtk.io.metrics import encode_row
from tests import curve_cases as cc
from tests.examples import help_examples
from tests.util import llmtk

DATA = Path(__file__).parent / "data" / "curves"


class Result:
    def __init__(self, code, out, err):
        self.returncode, self.stdout, self.stderr = code, out, err


def cli(*args) -> Result:
    """Run llmtk in this process, through llmtk.cli.main (exit status, one error line)."""
    r = llmtk(*args, in_process=True, cwd=os.getcwd())
    return Result(r.returncode, r.stdout.decode(), r.stderr.decode())


def write(path, rows):
    path.write_bytes(b"".join(encode_row(r) for r in rows))
    return path


def found(path, at_least="warning"):
    levels = ("error",) if at_least == "error" else ("error", "warning")
    return [f.kind for f in diagnose(load_run(str(path))) if f.severity in levels]


# -- every synthetic problem is found; healthy runs stay quiet ---------------------------


@pytest.mark.parametrize("name", list(cc.CASES))
def test_synthetic_case(tmp_path, name):
    make, kind = cc.CASES[name]
    kinds = found(write(tmp_path / "metrics.jsonl", make()))
    if kind is None:
        assert kinds == []
    else:
        assert kind in kinds


@pytest.mark.parametrize("log", sorted(p.name for p in DATA.glob("*.log")))
def test_real_healthy_logs_raise_nothing_above_info(log):
    r = cli("diagnose", DATA / log)
    assert r.returncode == 0, r.stdout
    assert "  ok  " in r.stdout and "warning" not in r.stdout and "cause?" not in r.stdout


def test_nan_is_an_error_with_the_bad_parameters(tmp_path):
    r = cli("diagnose", write(tmp_path / "m.jsonl", cc.nan()), "--json")
    assert r.returncode == 3
    (report,) = json.loads(r.stdout)
    nan = [f for f in report["findings"] if f["kind"] == "nan"][0]
    assert nan["severity"] == "error" and nan["step"] == 400
    assert "blocks.3.attn.wq.weight" in nan["summary"]
    assert "ends with a non-finite loss" in nan["summary"]


def test_recovering_spikes_are_one_info_line(tmp_path):
    losses = cc.curve()
    for s in (250, 350, 450):
        losses[s] += 1.0
    path = write(tmp_path / "metrics.jsonl", cc.rows_of(losses))
    findings = diagnose(load_run(str(path)))
    assert [(f.kind, f.severity) for f in findings] == [("spikes", "info")]
    assert findings[0].summary.startswith("3 loss spike(s), largest")
    assert "250, 350, 450" in findings[0].summary
    r = cli("diagnose", path)
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert len(lines) <= 4 and "ok" in lines[1] and "spike score" in lines[1]
    assert "cause?" not in r.stdout  # an info needs no causes by default ...
    verbose = cli("diagnose", path, "--verbose").stdout
    assert verbose.count("cause? a batch of unusual data") == 1  # ... --verbose shows them once
    assert verbose.count("recovered, settled") == 3  # and each spike


def test_spike_that_does_not_recover_is_an_error(tmp_path):
    findings = diagnose(load_run(str(write(tmp_path / "m.jsonl", cc.spike_not_recovering()))))
    spike = [f for f in findings if f.kind == "spike"][0]
    assert spike.severity == "error" and spike.step == 350 and "not recovered" in spike.summary


def test_spike_with_lasting_harm_is_a_warning(tmp_path):
    findings = diagnose(load_run(str(write(tmp_path / "m.jsonl",
                                           cc.spike_with_lasting_harm()))))
    (spike,) = [f for f in findings if f.kind == "spike"]
    assert spike.severity == "warning" and "settled" in spike.summary


def test_spikes_with_growing_grad_norm_warn(tmp_path):
    losses = cc.curve()
    for s in (250, 350, 450):
        losses[s] += 1.0
    extra = {s: {"grad_norm": 1.0 if s < 300 else 1.0 + (s - 300) / 50} for s in range(600)}
    findings = diagnose(load_run(str(write(tmp_path / "m.jsonl", cc.rows_of(losses, extra)))))
    spikes = [f for f in findings if f.kind == "spikes"][0]
    assert spikes.severity == "warning" and "gradient norm growing" in spikes.summary


def test_divergence_and_rebound(tmp_path):
    div = diagnose(load_run(str(write(tmp_path / "d.jsonl", cc.divergence()))))
    assert div[0].kind == "divergence" and div[0].severity == "error"
    assert 380 <= div[0].step <= 420
    assert "plateau" not in [f.kind for f in div] and "oscillation" not in [f.kind for f in div]
    base = cc.curve()
    losses = base[:450] + [base[449] * (1 + 0.06 * min(i, 20) / 20) for i in range(150)]
    assert "rebound" in found(write(tmp_path / "r.jsonl", cc.rows_of(losses)))


def test_plateau_needs_a_high_learning_rate(tmp_path):
    losses = cc.curve(tau=30.0)
    decayed = cc.rows_of(losses, extra={s: {"lr": 3e-4 * (1 - s / 600)} for s in range(600)})
    assert found(write(tmp_path / "d.jsonl", decayed)) == []
    no_lr = [{k: v for k, v in r.items() if k != "lr"} for r in cc.rows_of(losses)]
    kinds = [(f.kind, f.severity) for f in diagnose(load_run(str(write(tmp_path / "n.jsonl",
                                                                       no_lr))))]
    assert kinds == [("plateau", "info")]  # no lr logged: cannot tell it from a finished run


def test_no_learning_only_when_the_log_starts_with_the_run(tmp_path):
    rows = [{"step": s, "loss": 5.5 + 0.01 * math.sin(s)} for s in range(300)]
    assert found(write(tmp_path / "a.jsonl", rows)) == ["no_learning"]
    late = [{**r, "step": r["step"] + 3000} for r in rows]  # a resumed run's log
    assert "no_learning" not in found(write(tmp_path / "b.jsonl", late))


def test_overfitting_names_the_best_step(tmp_path):
    findings = diagnose(load_run(str(write(tmp_path / "m.jsonl", cc.overfitting()))))
    over = [f for f in findings if f.kind == "overfitting"][0]
    assert over.step == 250 and "training loss fell" in over.summary


def test_output_groups_a_kind_and_prints_causes_once(tmp_path):
    losses = cc.curve(1200)
    for s in (300, 500, 700):
        losses[s] = math.nan
    path = write(tmp_path / "m.jsonl", cc.rows_of(losses))
    out = cli("diagnose", path).stdout
    assert out.count("cause? learning rate too high for the batch size") == 1
    assert "ok  " not in out and "final loss" in out


def test_several_runs_and_fail_on_levels(tmp_path):
    good = write(tmp_path / "good.jsonl", cc.healthy())
    bad = write(tmp_path / "bad.jsonl", cc.spike_with_lasting_harm())
    r = cli("diagnose", good, bad, "--json")
    assert r.returncode == 3
    reports = json.loads(r.stdout)
    assert [r["run"] for r in reports] == ["good", "bad"]
    assert reports[0]["findings"] == [] and reports[0]["spike_score"] == 0
    assert cli("diagnose", good, bad, "--fail-on", "error").returncode == 0
    assert cli("diagnose", bad, "--fail-on", "never").returncode == 0


def test_bad_usage_and_unreadable_logs(tmp_path):
    good = write(tmp_path / "g.jsonl", cc.healthy())
    assert cli("diagnose", tmp_path / "missing.jsonl").returncode == 2
    assert cli("diagnose", good, "--fail-on", "x").returncode == 2
    p = tmp_path / "m.jsonl"
    p.write_text('{"step": 0, "loss": 1}\n{"step": 1, "loss": \n{"step": 2, "loss": 1}\n')
    r = llmtk("diagnose", p)  # a real process: the error is one line on stderr
    assert r.returncode == 1 and r.stderr.decode().startswith(f"llmtk: error: {p}:2:")
    assert r.stderr.count(b"\n") == 1


def test_a_log_it_cannot_read_is_never_no_problems(tmp_path):
    prose = tmp_path / "notes.txt"
    prose.write_text("we trained a model\nit went fine\n")
    r = cli("diagnose", prose)
    assert r.returncode == 1 and "no training rows found" in r.stderr
    assert "expected llmtk metrics.jsonl" in r.stderr and r.stdout == ""
    no_loss = tmp_path / "acc.csv"
    no_loss.write_text("step,accuracy\n0,0.1\n1,0.2\n")
    r = cli("diagnose", no_loss)
    assert r.returncode == 1 and "no loss values" in r.stderr and "accuracy" in r.stderr


def test_help_examples_run_as_written(tmp_path, monkeypatch):
    for run in ("a", "b"):
        (tmp_path / "runs" / run).mkdir(parents=True)
        write(tmp_path / "runs" / run / "metrics.jsonl", cc.healthy())
    (tmp_path / "out" / "checkpoint-500").mkdir(parents=True)
    (tmp_path / "out" / "checkpoint-500" / "trainer_state.json").write_text(json.dumps(
        {"global_step": 600, "log_history": [{"step": s, "loss": v} for s, v in
                                             enumerate(cc.curve())]}))
    (tmp_path / "log.csv").write_text("Step,Loss\n" + "".join(
        f"{s},{v}\n" for s, v in enumerate(cc.curve())))
    monkeypatch.chdir(tmp_path)
    examples = help_examples(HELP)
    assert len(examples) == 4
    for example in examples:
        command = re.split(r" \|\|? ", example)[0]  # the llmtk part of a pipeline
        args = [a for arg in shlex.split(command)[1:] for a in (sorted(glob.glob(arg))
                                                                  if "*" in arg else [arg])]
        r = cli(*args)
        assert r.returncode == 0, (example, r.stdout, r.stderr)
        if "--json" in args:
            assert [x["run"] for x in json.loads(r.stdout)] == ["a", "b"]


def test_grad_norm_only_log_with_trainer_skips(tmp_path):
    """Megatron-LM logs with `grad norm: nan` and no loss (as users report them)."""
    lines = [f" iteration {s:8d}/  250000 | consumed samples: {s * 8:10d} | elapsed time per "
             "iteration (ms): 4247.9 | learning rate: 2.999E-04 | global batch size:     8 | "
             f"loss scale: 1.0 | grad norm: {'nan' if s >= 5 else '1.3'} | number of skipped "
             f"iterations:   0 | number of nan iterations: {2 if s == 7 else 0:3d} |"
             for s in range(10)]
    log = tmp_path / "megatron.log"
    log.write_text("\n".join(lines) + "\n")
    r = cli("diagnose", log, "--json")
    assert r.returncode == 3
    (nan,) = json.loads(r.stdout)[0]["findings"]
    assert nan["kind"] == "nan" and nan["severity"] == "error" and nan["step"] == 5
    assert "5 with a non-finite grad norm" in nan["summary"]
    assert "1 skipped step(s)" in nan["summary"]
    assert "grad norm only" in cli("diagnose", log).stdout
