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


# -- real logs of other trainers, labelled by reading their numbers ----------------------

CALIBRATION = DATA / "calibration"
LABELS = [json.loads(line) for line in (CALIBRATION / "labels.jsonl").read_text().splitlines()]
# the held-out half is measured by benchmarks/diagnose_calibration.py, not fitted to by tests
FIT = [x for x in LABELS if x["half"] == "fit"]


@pytest.mark.parametrize("label", FIT, ids=[x["file"] for x in FIT])
def test_calibration_set(label):
    """Each real log of the fit half raises what its numbers show: nothing above info on a
    healthy one, the labelled kinds (at warning or error) on a sick one."""
    kinds = found(CALIBRATION / label["file"])
    if label["expect"] is None:
        assert kinds == []
    else:
        assert set(label["expect"]) <= set(kinds), kinds


def test_hf_console_output_read_from_its_first_line():
    """A job's stdout that starts with Trainer's dict is its console output, not JSON Lines."""
    run = load_run(str(CALIBRATION / "hf-console-qwen-vl-397.log"))
    assert run.format == "HF Trainer stdout text log"
    assert run.series("loss") == ([1, 2, 3, 4, 5, 6],
                                  [1.1777, 1.0297, 1.0975, 1.0213, 0.9937, 0.979])
    bars = load_run(str(CALIBRATION / "hf-console-llava-918.log"))  # tqdm lines in between
    assert bars.series("loss")[1] == [0.6623, 0.8022, 4.2653, 0.77, 0.556, 0.8223]


def test_key_value_step_logs_say_which_keys_were_read(tmp_path):
    run = load_run(str(CALIBRATION / "trace-issue5-lora.log"))
    assert run.format == "key: value text log"
    assert run.notes[0] == "key: value lines: step from 'Step', loss from 'Loss'"
    assert "'Step' restarts" in run.notes[1]  # a batch counter within each epoch
    assert run.series("loss")[0] == list(range(14))
    log = tmp_path / "train.log"
    log.write_text("".join(f"[INFO] epoch=0 it={i} lr=1e-4 train_loss={3 - i * 0.1:.2f} "
                           f"loss_scale=65536\n" for i in range(6)) + "done\n")
    run = load_run(str(log))
    assert run.notes == ["key: value lines: step from 'it', loss from 'train_loss'"]
    assert run.series("loss") == ([0, 1, 2, 3, 4, 5], [3.0, 2.9, 2.8, 2.7, 2.6, 2.5])
    assert run.series("lr")[1][0] == 1e-4 and run.series("loss_scale")[1][0] == 65536  # not a loss
    r = cli("diagnose", log)  # the keys read are said without --verbose
    assert "note: key: value lines: step from 'it', loss from 'train_loss'" in r.stdout
    two = tmp_path / "epochs.log"  # losses named in two words, after a tqdm bar
    two.write_text("".join(f"Progress: 1%| | {e}/50 [00:01<00:50]Dataset Size: 10%, Epoch: {e}, "
                           f"Train Loss: {5 - e / 10:.1f}, Val Loss: {5.1 - e / 10:.1f}\n"
                           for e in range(1, 6)))
    run = load_run(str(two))
    assert run.notes == ["key: value lines: step from 'Epoch', loss from 'Train Loss', "
                         "val_loss from 'Val Loss'"]
    assert run.series("val_loss") == ([1, 2, 3, 4, 5], [5.0, 4.9, 4.8, 4.7, 4.6])


def test_a_log_with_unreadable_loss_lines_names_the_line(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("starting\nloading data\ntrain loss is 2.31 now\n")
    r = cli("diagnose", log)
    assert r.returncode == 1 and f"{log}:3: no training rows found" in r.stderr
    assert "train loss is 2.31" in r.stderr and r.stdout == ""


def test_rounding_to_the_logged_resolution_is_not_oscillation_or_a_spike(tmp_path):
    """HF Trainer rounds its loss to 4 decimals: a fine-tune settling near 0.004 moves by a
    few units of the last digit, which says nothing; the same relative noise with 10x the
    digits is oscillation."""
    import random

    rng = random.Random(1)
    noise = [rng.gauss(0, 0.0007) for _ in range(200)]

    def rows(level):
        losses = [round(level + level * 2 * math.exp(-s / 20) + level / 0.004 * e, 4)
                  for s, e in zip(range(200), noise, strict=True)]
        return [{"step": s, "loss": v, "lr": 1e-4} for s, v in enumerate(losses)]

    assert found(write(tmp_path / "a.jsonl", rows(0.004))) == []
    assert "oscillation" in found(write(tmp_path / "b.jsonl", rows(0.04)))
    # a loss that has converged to 0.0001 and reads 0.0002 on the last steps: one unit of the
    # last digit, not a spike "not recovered"
    done = [{"step": s, "loss": round(max(0.0001, 2 * math.exp(-s / 10)), 4)} for s in range(200)]
    for row in done[-4:]:
        row["loss"] = 0.0002
    assert found(write(tmp_path / "c.jsonl", done)) == []


def test_grad_norm_spike_is_judged_by_the_loss_after_it(tmp_path):
    harmless = diagnose(load_run(str(write(tmp_path / "a.jsonl", cc.grad_explosion(0.0)))))
    (grad,) = [f for f in harmless if f.kind == "grad_explosion"]
    assert grad.severity == "info" and "the loss was no higher after any of them" in grad.summary
    harmful = diagnose(load_run(str(write(tmp_path / "b.jsonl", cc.grad_explosion(0.15)))))
    (grad,) = [f for f in harmful if f.kind == "grad_explosion"]
    assert grad.severity == "warning" and "at step 420 the loss rose" in grad.summary


def test_short_logs_are_judged_for_divergence_and_a_constant_loss(tmp_path):
    lora = [1.4, 6.4, 4.7, 4.5, 4.6, 4.8, 4.6, 4.5]  # the shape of a LoRA run that blew up
    assert found(write(tmp_path / "d.jsonl", [{"step": s, "loss": v}
                                              for s, v in enumerate(lora)])) == ["divergence"]
    flat = [{"step": s, "loss": 2.3026} for s in range(23)]
    assert found(write(tmp_path / "c.jsonl", flat)) == ["no_learning"]
    assert found(write(tmp_path / "four.jsonl", flat[:4])) == []  # MIN_ROWS = 5
    out = cli("diagnose", tmp_path / "four.jsonl").stdout  # and the report says so
    assert ("note: a short log (4 rows) is judged for what its length shows: NaN at any "
            "length, a constant loss from 5 rows") in " ".join(out.split())


def test_a_spike_on_the_last_row_is_not_called_unrecovered(tmp_path):
    losses = cc.curve()
    losses[-1] += 1.0
    findings = diagnose(load_run(str(write(tmp_path / "m.jsonl", cc.rows_of(losses)))))
    (spike,) = [f for f in findings if f.kind == "spike"]
    assert spike.severity == "warning" and "too few rows after it" in spike.summary


def test_the_ok_line_says_what_the_final_loss_is(tmp_path):
    losses = cc.curve()
    losses[-1] = 1.5  # a last value well below the tail's median
    out = cli("diagnose", write(tmp_path / "m.jsonl", cc.rows_of(losses))).stdout
    assert "final loss 2.0" in out and "(median of the last 10 rows; last logged 1.5," in out


# -- per-layer gradient norms (train --grad-stats per-layer) -----------------------------


def test_grad_stats_rows_on_spike_steps_name_the_layers():
    from llmtk.train.grad_stats import GradStats, layer_of

    assert [layer_of(n) for n in ("tok_emb.weight", "layers.3.attn.wqkv.weight",
                                  "layers.3.attn.wqkv.lora_a", "norm.weight")] == [
        "tok_emb", "layers.3.attn", "layers.3.attn", "norm"]
    names = ["tok_emb.weight", "layers.0.attn.wqkv.weight", "layers.0.attn.wo.weight"]
    gs = GradStats(names, every=0, loss_factor=3.0)
    quiet = [gs.row(s, 2.0, 1.0, [0.5, 0.25, 0.25]) for s in range(1, 8)]
    assert quiet == [None] * 7  # no spike, no NaN, no --grad-stats-every
    row = gs.row(8, 2.0, 50.0, [0.5, 2400.0, 100.0])  # 50x the running mean
    assert row == {"why": "spike", "grad_norm": 50.0, "grad_norm/tok_emb": math.sqrt(0.5),
                   "grad_norm/layers.0.attn": 50.0}
    assert gs.row(9, 2.0, math.nan, [0.5, math.nan, 1.0])["why"] == "nan"


def test_diagnose_names_the_layer_whose_norm_jumped(tmp_path):
    rows = [{"step": s, "loss": 3.0 - s * 0.01, "grad_norm": 1.0} for s in range(1, 60)]
    for s in (10, 20, 30):
        rows.append({"step": s, "event": "grad_stats", "why": "every", "grad_norm": 1.0,
                     "grad_norm/tok_emb": 0.5, "grad_norm/layers.0.attn": 0.6,
                     "grad_norm/layers.1.attn": 0.7})
    rows.append({"step": 41, "event": "grad_stats", "why": "spike", "grad_norm": 40.0,
                 "grad_norm/tok_emb": 0.6, "grad_norm/layers.0.attn": 0.7,
                 "grad_norm/layers.1.attn": 35.0})
    path = write(tmp_path / "metrics.jsonl", sorted(rows, key=lambda r: r["step"]))
    (named,) = [f for f in diagnose(load_run(str(path))) if f.kind == "layer_grads"]
    assert named.step == 41 and named.severity == "info"
    assert "jumped first in layers.1.attn (50x its median in the 3 earlier" in named.summary
    r = cli("plot-loss", path, "--metric", "grad_norm/*")  # one panel, a line per layer
    assert r.returncode == 0 and r.stdout.count("grad_norm per layer") == 1
    assert "grad_norm/layers.1.attn" in r.stdout and "grad_norm/tok_emb" in r.stdout


def test_losses_that_repeat_exactly_a_later_epoch_are_no_learning(tmp_path):
    """A frozen model fed the same batches each epoch logs the same full-precision losses
    again: no_learning. The same steps written twice (a replayed log) are not that."""
    from llmtk.curves.detect import detect_constant

    epoch = [3.0 + 0.1234567 * ((7 * i) % 11) for i in range(11)]
    rows = [{"step": s, "loss": epoch[s % 11]} for s in range(33)]
    (f,) = detect_constant(load_run(str(write(tmp_path / "frozen.jsonl", rows))))
    assert f.kind == "no_learning" and f.step == 0 and "repeat exactly at steps 11-14" in f.summary
    replay = rows[:11] + rows[:11]  # steps 0-10 twice: a log written twice, not a repeat
    assert detect_constant(load_run(str(write(tmp_path / "replay.jsonl", replay)))) == []


# -- short logs are judged for what their length allows; a spike whose batch deserves a look --


def steps_log(path, losses):
    """`Step N | loss:X lr:Y` lines, torchtune's shape."""
    path.write_text("".join(f"Step {s} | loss:{v} lr:2e-05\n" for s, v in enumerate(losses, 1)))
    return path


def test_a_short_noisy_fine_tune_is_not_a_rebound(tmp_path):
    """12 rows of a fine-tune whose rows move by +-15% end 9% above their best by chance; a
    loss that climbs 12% over 19 rows that move by 2% has not. Below 30 rows a rise is judged
    against the log's own row-to-row noise, and the report says how large a rise it can show."""
    noisy = [2.09, 1.87, 1.17, 1.12, 0.97, 0.84, 0.95, 0.86, 0.68, 1.04, 1.04, 1.12]
    assert found(steps_log(tmp_path / "tune.log", noisy)) == []
    out = " ".join(cli("diagnose", tmp_path / "tune.log").stdout.split())  # lines unwrapped
    assert "a rising loss (divergence, rebound) only when the median of the last 4 rows" in out
    rising = [0.176, 0.184, 0.182, 0.192, 0.193, 0.196, 0.195, 0.197, 0.190, 0.196, 0.192,
              0.191, 0.210, 0.198, 0.198, 0.204, 0.202, 0.198, 0.195]
    assert found(steps_log(tmp_path / "rise.log", rising)) == ["divergence"]


def test_a_very_short_log_of_noisy_batches_is_not_divergence(tmp_path):
    """5-9 rows: the second half at 1.5x the first half's lowest is not enough when single
    batches move by +-40% (per-iteration segmentation losses); a LoRA run that jumps from
    1.4 to 4.5 and stays there still is."""
    batches = [0.150, 0.120, 0.107, 0.237, 0.187, 0.186, 0.231]
    assert found(steps_log(tmp_path / "seg.log", batches)) == []
    lora = [1.4, 6.4, 4.7, 4.5, 4.6, 4.8, 4.6, 4.5]
    assert found(steps_log(tmp_path / "lora.log", lora)) == ["divergence"]


def test_a_large_recovered_spike_is_a_warning_that_names_its_batch(tmp_path):
    """A one-batch jump to 4.7x the running loss with a 40x grad-norm spike, gone within 20
    steps: no lasting harm, but the batch deserves a look (--fail-on warning fails on it);
    healthy runs' one-batch jumps (+5-60%) stay info."""
    path = write(tmp_path / "metrics.jsonl", cc.large_recovered_spike())
    r = cli("diagnose", path, "--json", "--fail-on", "warning")
    assert r.returncode == 3
    (spike,) = [f for f in json.loads(r.stdout)[0]["findings"] if f["kind"] == "spike"]
    assert spike["severity"] == "warning" and spike["step"] == 1200
    assert "the gradient norm 39x its median before" in spike["summary"]
    assert "look at its batch (llmtk train batch RUN --step 1200)" in spike["summary"]
    blips = write(tmp_path / "blips.jsonl", cc.healthy_noisy_with_blips())
    assert cli("diagnose", blips, "--fail-on", "warning").returncode == 0
    run = tmp_path / "run"  # an llmtk run: the message names the run itself
    run.mkdir()
    (run / "config.json").write_text("{}")
    (spike,) = [f for f in diagnose(load_run(str(write(run / "metrics.jsonl",
                                                        cc.large_recovered_spike()))))
                if f.kind == "spike"]
    assert f"(llmtk train batch {run} --step 1200)" in spike.summary
    assert spike.commands == [f"llmtk train batch {run} --step 1200"]


def test_a_frozen_validation_loss_is_no_learning(tmp_path):
    """The training loss falls while the validation loss is exactly the same at every
    evaluation: the outputs on validation data do not change (a triplet loss at its margin)."""
    rows = [{"step": s, "loss": 0.19 - 0.002 * s, **({"val_loss": 0.2} if s % 10 == 0 else {})}
            for s in range(60)]
    assert found(write(tmp_path / "m.jsonl", rows)) == ["no_learning"]
    rows[50]["val_loss"] = 0.1999
    assert found(write(tmp_path / "m.jsonl", rows)) == []


def test_resolution_reads_the_digits_a_log_shows():
    """Full-precision floats have no resolution (whatever their size); 8.0002 is not a
    whole number; a log of 8 decimals is one."""
    import random

    from llmtk.curves.common import resolution

    rng = random.Random(0)
    assert resolution([2.5 + rng.random() for _ in range(200)]) == 0.0
    assert resolution([1e4 * rng.random() + 1 for _ in range(200)]) == 0.0
    assert resolution([8.0002, 8.0001, 8.0003]) == pytest.approx(1e-4)
    assert resolution([4.87e-6, 3.55e-6, 5.04e-6]) == pytest.approx(1e-8)
