"""`llmtk diagnose` on synthetic curves with known problems, in every log format."""

import json
import math
import random

import pytest

from llmtk.curves.detect import diagnose
from llmtk.curves.logs import load_run
from tests.util import llmtk


def curve(steps=600, noise=0.01, seed=0, floor=2.0, scale=4.0, tau=120.0):
    rng = random.Random(seed)
    return [floor + scale * math.exp(-s / tau) + rng.gauss(0, noise) for s in range(steps)]


def write_jsonl(path, losses, extra=None, events=(), lr=3e-4):
    rows = []
    for s, loss in enumerate(losses):
        row = {"step": s, "loss": loss if math.isfinite(loss) else str(loss).replace(
            "nan", "NaN").replace("inf", "Infinity"), "lr": lr, "grad_norm": 1.0,
            "tokens": s * 1024}
        row.update((extra or {}).get(s, {}))
        rows.append(row)
    rows.extend(events)
    rows.sort(key=lambda r: r["step"])
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def kinds(path):
    return [f.kind for f in diagnose(load_run(str(path)))]


def test_healthy_run_has_no_findings_and_exits_0(tmp_path):
    p = write_jsonl(tmp_path / "metrics.jsonl", curve())
    assert kinds(p) == []
    r = llmtk("diagnose", p)
    assert r.returncode == 0, r.stdout
    assert b"no problems found" in r.stdout


def test_nan_is_an_error_with_the_bad_parameters(tmp_path):
    losses = curve()
    losses[400:] = [math.nan] * 200
    events = [{"step": 400, "event": "nan", "bad_params": ["blocks.3.attn.wq.weight"]}]
    p = write_jsonl(tmp_path / "m.jsonl", losses, events=events)
    r = llmtk("diagnose", p, "--json")
    assert r.returncode == 3
    (report,) = json.loads(r.stdout)
    nan = [f for f in report["findings"] if f["kind"] == "nan"][0]
    assert nan["severity"] == "error" and nan["step"] == 400
    assert "blocks.3.attn.wq.weight" in nan["summary"]
    assert "ends with a non-finite loss" in nan["summary"]


def test_spike_found_at_its_step_and_recovery_noted(tmp_path):
    losses = curve()
    losses[350] += 1.5
    losses[351] += 0.8
    p = write_jsonl(tmp_path / "m.jsonl", losses)
    (finding,) = diagnose(load_run(str(p)))
    assert finding.kind == "spike" and finding.step == 350
    assert finding.severity == "warning" and "recovered" in finding.summary


def test_divergence(tmp_path):
    losses = curve()[:400] + [curve()[399] + 0.02 * i for i in range(200)]
    p = write_jsonl(tmp_path / "m.jsonl", losses)
    found = diagnose(load_run(str(p)))
    assert found[0].kind == "divergence" and found[0].severity == "error"
    assert 380 <= found[0].step <= 420


def test_mild_rebound_is_a_warning(tmp_path):
    base = curve()
    losses = base[:450] + [base[449] * (1 + 0.06 * min(i, 20) / 20) for i in range(150)]
    assert "rebound" in kinds(write_jsonl(tmp_path / "m.jsonl", losses))


def test_plateau_while_lr_is_high(tmp_path):
    losses = curve(tau=30.0)  # learns fast, then flat for most of the run
    assert kinds(write_jsonl(tmp_path / "m.jsonl", losses)) == ["plateau"]
    # the same curve with the learning rate decayed to ~0 at the end is not a plateau
    decayed = tmp_path / "d.jsonl"
    write_jsonl(decayed, losses, extra={s: {"lr": 3e-4 * (1 - s / 600)} for s in range(600)})
    assert kinds(decayed) == []


def test_no_learning(tmp_path):
    rng = random.Random(1)
    losses = [5.5 + rng.gauss(0, 0.01) for _ in range(300)]
    assert kinds(write_jsonl(tmp_path / "m.jsonl", losses)) == ["no_learning"]


def test_oscillation(tmp_path):
    losses = [v * (1.25 if s % 2 else 0.8) for s, v in enumerate(curve())]
    assert "oscillation" in kinds(write_jsonl(tmp_path / "m.jsonl", losses))


def test_grad_norm_explosion(tmp_path):
    extra = {s: {"grad_norm": 1.0 + 0.01 * (s % 7)} for s in range(600)}
    extra[420] = {"grad_norm": 80.0}
    p = write_jsonl(tmp_path / "m.jsonl", curve(), extra=extra)
    found = [f for f in diagnose(load_run(str(p))) if f.kind == "grad_explosion"]
    assert found and found[0].step == 420


def test_overfitting(tmp_path):
    extra = {}
    for s in range(0, 600, 50):
        extra[s] = {"val_loss": 2.3 + 4 * math.exp(-s / 120) + (0.004 * (s - 250) if s > 250
                                                                  else 0)}
    p = write_jsonl(tmp_path / "m.jsonl", curve(), extra=extra)
    found = [f for f in diagnose(load_run(str(p))) if f.kind == "overfitting"]
    assert found and found[0].step == 250
    assert "training loss fell" in found[0].summary


def test_loss_jump_after_resume(tmp_path):
    losses = curve()
    losses[301:320] = [v + 0.8 for v in losses[301:320]]
    events = [{"step": 300, "event": "resume"}]
    assert "resume_jump" in kinds(write_jsonl(tmp_path / "m.jsonl", losses, events=events))


def test_csv_text_and_python_nan_logs(tmp_path):
    losses = curve()
    losses[500] = math.nan
    csv = tmp_path / "log.csv"
    csv.write_text("iter,train_loss,learning_rate\n" + "".join(
        f"{s},{v},{3e-4}\n" for s, v in enumerate(losses)))
    run = load_run(str(csv))
    assert run.series("loss")[1][:3] == losses[:3] and run.has("lr")
    assert kinds(csv)[0] == "nan"
    text = tmp_path / "train.log"
    text.write_text("".join(f"iter {s}: loss {v:.4f}, time 10.0ms, mfu 30.00%\n"
                            for s, v in enumerate(curve())))
    assert len(load_run(str(text)).rows) == 600 and kinds(text) == []
    bare = tmp_path / "bare.jsonl"
    bare.write_text('{"step": 0, "loss": 3.0}\n{"step": 1, "loss": NaN}\n{"step": 2, "loss": '
                    'Infinity}\n{"step": 3, "lo')  # Python json's tokens; a torn last line
    assert [r["step"] for r in load_run(str(bare)).rows] == [0, 1, 2]


def test_several_runs_and_fail_on_levels(tmp_path):
    good = write_jsonl(tmp_path / "good.jsonl", curve())
    losses = curve()
    losses[350] += 1.5
    spiky = write_jsonl(tmp_path / "spiky.jsonl", losses)
    r = llmtk("diagnose", good, spiky, "--json")
    assert r.returncode == 3
    assert [len(x["findings"]) for x in json.loads(r.stdout)] == [0, 1]
    assert llmtk("diagnose", good, spiky, "--fail-on", "error").returncode == 0
    assert llmtk("diagnose", spiky, "--fail-on", "never").returncode == 0


@pytest.mark.parametrize("args,status", [(["missing.jsonl"], 2), (["--fail-on", "x"], 2)])
def test_bad_usage(tmp_path, args, status):
    good = write_jsonl(tmp_path / "g.jsonl", curve())
    assert llmtk("diagnose", *(args if args[0] == "missing.jsonl" else [good, *args]),
                 cwd=tmp_path).returncode == status


def test_unreadable_log_names_file_and_line(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text('{"step": 0, "loss": 1}\n{"step": 1, "loss": \n{"step": 2, "loss": 1}\n')
    r = llmtk("diagnose", p)
    assert r.returncode == 1 and r.stderr.decode().startswith(f"llmtk: error: {p}:2:")
