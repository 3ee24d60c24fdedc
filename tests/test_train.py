"""`llmtk train` end to end: learning, exact resume, crash safety, NaN handling and
preemption. Runs train in this process where no process boundary is tested; kills,
crashes, signals and torchrun restarts run real processes (tests/train_driver.py).
DDP / FSDP2 / multi-node parity: tests/test_train_parallel.py.

The corpus is built from the Python standard library's own docstrings (offline).
Models are tiny and runs short so the file stays fast on 2 busy cores.
"""

import json
import math
import os
import signal
import time

import pytest

from llmtk.curves.detect import diagnose
from llmtk.curves.logs import load_run
from llmtk.train.config import TrainConfig as TrainConfigForTest
from llmtk.train.optim import lr_at
from tests.tolerance import FP64, PARITY_REL
from tests.train_runs import (
    TINY,
    events,
    losses,
    nothing_half_written,
    rows,
    run_train,
    torchrun_with_faults,
    train_corpus,  # noqa: F401 (the corpus fixture)
)
from tests.util import env, llmtk, popen_module

# ---------------------------------------------------------------- learning


@pytest.mark.slow  # ~30 s: 300 steps
def test_loss_falls_below_unigram_entropy(corpus, tmp_path):
    import numpy as np

    out = str(tmp_path / "run")
    run_train(corpus, out, "--steps", "300", "--batch-size", "8", "--warmup", "20",
              "--log-every", "25", "--val-fraction", "0.05", "--checkpoint-every", "0")
    cache = json.load(open(os.path.join(out, "config.json")))["cache"]
    tokens = np.fromfile(os.path.join(cache, "train", "part-00000-of-00001", "tokens.bin"),
                         dtype=np.uint16)
    p = np.bincount(tokens, minlength=257) / len(tokens)
    p = p[p > 0]
    unigram = float(-(p * np.log(p)).sum())  # nats/token: the best context-free model
    r = losses(out)
    first, last = r[0][1], r[-1][1]
    val = [x["val_loss"] for x in rows(out) if "val_loss" in x][-1]
    print(f"unigram {unigram:.3f} nats, loss {first:.3f} -> {last:.3f}, val {val:.3f}")
    assert first > unigram  # starts near ln(257) = 5.55
    assert last < unigram - 0.4, (last, unigram)
    assert val < unigram - 0.2, (val, unigram)


def test_metrics_rows_follow_the_schema(corpus, tmp_path):
    out = str(tmp_path / "run")
    toml = tmp_path / "run.toml"
    # TOML supplies some options; the command line wins where both give one.
    toml.write_text('steps = 4\nbatch-size = 2\nlog-every = 3\n[train]\nval_fraction = 0.1\n'
                    'eval-every = 2\nsample-every = 4\nsample-tokens = 8\nprompt = "def "\n')
    args = [a for a in TINY if a != "-q"]
    p = llmtk("train", "--data", corpus["data"], "--cache-dir", corpus["cache"], "--out", out,
              *args, "--config", str(toml), "--log-every", "2")
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    err = p.stderr.decode()
    assert "; 4 steps x 128 tokens = 512 tokens\n" in err  # two start lines, not the JSON
    config = json.loads(open(os.path.join(out, "config.json")).read())["train"]
    assert config["log_every"] == 2 and config["steps"] == 4  # the full config is here
    assert "step 4/4  loss" in err and "sample @ 4" in err
    assert p.stdout == b""  # messages never go to stdout
    train_rows = [r for r in rows(out) if "loss" in r]
    assert [r["step"] for r in train_rows] == [2, 4]
    keys = ["step", "loss", "lr", "grad_norm", "tokens", "tokens_per_s", "mfu", "mem_gb",
            "data_s", "step_s", "time", "val_loss", "ranks"]
    assert list(train_rows[0]) == keys
    assert train_rows[0]["mfu"] is None  # CPU
    assert train_rows[1]["tokens"] == 4 * 2 * 64
    sample = events(out, "sample")[0]
    assert sample["prompt"] == "def " and isinstance(sample["text"], str)
    ckpt = events(out, "checkpoint")[-1]
    assert ckpt["path"] == "checkpoints/step-0000004" and ckpt["seconds"] >= 0
    cfg = json.load(open(os.path.join(out, "config.json")))
    assert cfg["model"]["d_model"] == 64 and cfg["params"] > 0


# ---------------------------------------------------------------- resume and crashes


RESUME_ARGS = ["--steps", "12", "--batch-size", "4", "--checkpoint-every", "4"]


@pytest.fixture(scope="module")
def resume_ref(corpus, tmp_path_factory):
    """The uninterrupted run the interrupted ones must reproduce bit for bit."""
    out = str(tmp_path_factory.mktemp("resume") / "ref")
    run_train(corpus, out, *RESUME_ARGS)
    return out


@pytest.mark.integration
def test_exact_resume_after_sigkill(corpus, tmp_path, resume_ref):
    args, ref = RESUME_ARGS, resume_ref

    out = str(tmp_path / "killed")
    argv = ["train", "--data", corpus["data"], "--cache-dir", corpus["cache"], "--out", out,
            *TINY, *args]
    proc = popen_module("tests.train_driver", argv,
                        env(LLMTK_TEST_FAULTS='{"step_delay": 0.25}'))
    metrics = os.path.join(out, "metrics.jsonl")
    deadline = time.time() + 120
    while time.time() < deadline:
        if os.path.exists(metrics) and any(r.get("step", 0) >= 6 for r in rows(out)):
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    assert max(r["step"] for r in rows(out)) < 12  # really interrupted

    run_train(corpus, out, *args)  # the same command again
    resume = events(out, "resume")
    assert resume and resume[0]["path"] in ("checkpoints/step-0000004",
                                            "checkpoints/step-0000008")
    # Every step, before and after the kill, equals the uninterrupted run bit for bit.
    assert losses(out) == losses(ref)
    assert [r["step"] for r in rows(out) if "loss" in r] == list(range(1, 13))


@pytest.mark.integration
def test_crash_while_writing_a_checkpoint_keeps_the_previous_one(corpus, tmp_path,
                                                                 resume_ref):
    args, ref = RESUME_ARGS, resume_ref
    out = str(tmp_path / "crash")
    p = run_train(corpus, out, *args, check=False, faults={"crash_in_checkpoint": 8})
    assert p.returncode == -signal.SIGKILL
    ckpts = os.path.join(out, "checkpoints")
    assert open(os.path.join(ckpts, "latest")).read().strip() == "step-0000004"
    assert os.path.exists(os.path.join(ckpts, "step-0000004", "COMPLETE"))
    partial = os.path.join(ckpts, ".tmp-step-0000008")
    assert os.path.exists(os.path.join(partial, "model.pt"))  # it died mid-write
    assert not os.path.exists(os.path.join(partial, "COMPLETE"))
    assert not os.path.exists(os.path.join(ckpts, "step-0000008"))

    run_train(corpus, out, *args)
    assert events(out, "resume")[0]["path"] == "checkpoints/step-0000004"
    assert losses(out) == losses(ref)
    assert not os.path.exists(partial)  # cleaned up by the next good save
    assert sorted(os.listdir(ckpts)) == ["latest", "step-0000004", "step-0000008",
                                         "step-0000012"]


def _train_until_a_row(corpus, out, args, **faults):
    """`llmtk train` as a real process, each step slowed down, once it has logged a row
    (not quiet: the test reads what it says)."""
    argv = ["train", "--data", corpus["data"], "--cache-dir", corpus["cache"], "--out", out,
            *[a for a in TINY if a != "-q"], *args]
    spec = json.dumps({"step_delay": 0.25, **faults})
    proc = popen_module("tests.train_driver", argv, env(LLMTK_TEST_FAULTS=spec),
                        stderr_pipe=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        if os.path.exists(os.path.join(out, "metrics.jsonl")) and rows(out):
            break
        time.sleep(0.02)
    return proc


# Preemption (SIGTERM, SIGUSR1) is a clean stop, exit 0; Ctrl-C (SIGINT) checkpoints the
# same way but the run was interrupted, not done: 130, as for any interrupted command.
@pytest.mark.integration
@pytest.mark.parametrize("sig,status", [
    (signal.SIGTERM, 0), pytest.param(signal.SIGUSR1, 0, marks=pytest.mark.slow),
    (signal.SIGINT, 130)], ids=["TERM", "USR1", "INT"])
def test_signal_checkpoints_and_exits_cleanly_then_resumes(corpus, tmp_path, resume_ref, sig,
                                                           status):
    args, ref = RESUME_ARGS, resume_ref
    out = str(tmp_path / "pre")
    proc = _train_until_a_row(corpus, out, args)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == status, err.decode()
    assert f"{sig.name}: checkpoint written at step".encode() in err
    assert b"the same command resumes from it" in err and b"Traceback" not in err
    pre = events(out, "preempt")
    assert pre and pre[0]["signal"] == sig.name
    step = pre[0]["step"]
    assert 1 <= step < 12
    assert os.path.exists(os.path.join(out, "checkpoints", f"step-{step:07d}", "COMPLETE"))
    nothing_half_written(out)
    run_train(corpus, out, *args)
    assert losses(out) == losses(ref)


@pytest.mark.integration
def test_a_second_ctrl_c_stops_at_once(corpus, tmp_path):
    """The first Ctrl-C writes a checkpoint at the step; a second one while it is being
    written stops at once: exit 130, that checkpoint left unfinished (a resume takes the
    one before), no traceback."""
    out, writing = str(tmp_path / "twice"), str(tmp_path / "writing")
    proc = _train_until_a_row(corpus, out, ["--steps", "12", "--batch-size", "4"],
                              hold_in_checkpoint=writing)
    proc.send_signal(signal.SIGINT)
    deadline = time.time() + 60
    while not os.path.exists(writing) and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err.decode()
    assert b"SIGINT: writing a checkpoint" in err and b"checkpoint written" not in err
    assert not events(out, "preempt") and b"Traceback" not in err
    assert not os.path.exists(os.path.join(out, "checkpoints", "latest"))


@pytest.mark.integration
@pytest.mark.slow
def test_torchrun_restarts_a_crashed_worker_which_resumes(corpus, tmp_path, resume_ref):
    out = str(tmp_path / "restarted")
    marker = str(tmp_path / "died")
    p = torchrun_with_faults(corpus, out, 1, {"die_once": [marker, 6]}, *RESUME_ARGS,
                             restarts=1)
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    assert os.path.exists(marker)  # the worker really died (exit 17) after step 6
    assert events(out, "resume")[0]["path"] == "checkpoints/step-0000004"
    assert losses(out) == losses(resume_ref)


def test_resume_refuses_a_different_model_shape(corpus, resume_ref):
    before = open(os.path.join(resume_ref, "metrics.jsonl"), "rb").read()
    p = run_train(corpus, resume_ref, "--steps", "14", "--batch-size", "4", "--d-model", "32",
                  check=False)
    assert p.returncode == 2
    assert b"different model shape" in p.stderr and b"d_model: 64 -> 32" in p.stderr
    p = run_train(corpus, resume_ref, "--steps", "14", "--batch-size", "3", check=False)
    assert p.returncode == 2 and b"global batch" in p.stderr
    assert b"Traceback" not in p.stderr
    assert open(os.path.join(resume_ref, "metrics.jsonl"), "rb").read() == before


def test_init_from_starts_from_trained_weights(corpus, tmp_path, resume_ref):
    a = resume_ref
    b = str(tmp_path / "b")
    run_train(corpus, b, "--steps", "2", "--batch-size", "4")
    # --resume never starts over and moves the earlier run aside.
    run_train(corpus, b, "--steps", "2", "--batch-size", "4", "--init-from", a,
              "--resume", "never")
    assert os.path.exists(os.path.join(b, "checkpoints.old-1", "step-0000002", "COMPLETE"))
    assert os.path.exists(os.path.join(b, "metrics.jsonl.old"))
    assert losses(b)[0][1] < losses(a)[0][1] - 1.0
    assert losses(b)[0][3] == pytest.approx(3e-3 / 2)  # a fresh schedule: warmup step 1 of 2
    assert not events(b, "resume")
    # Another sequence length is no other model (RoPE): the weights carry over.
    c = str(tmp_path / "c")
    run_train(corpus, c, "--steps", "1", "--batch-size", "4", "--init-from", a,
              "--seq-len", "32")
    assert losses(c)[0][1] < losses(a)[0][1] - 1.0
    assert losses(c)[0][4] == 4 * 32  # tokens of step 1: rows of the new length


# ---------------------------------------------------------------- numerical safety


def test_absurd_learning_rate_skips_then_stops(corpus, tmp_path):
    out = str(tmp_path / "run")
    p = run_train(corpus, out, "--steps", "40", "--batch-size", "2", "--lr", "1e6",
                  "--warmup", "0", "--grad-clip", "0", "--max-bad-steps", "3", check=False)
    assert p.returncode == 1, p.stderr.decode()
    assert b"3 consecutive non-finite steps" in p.stderr
    assert b"Traceback" not in p.stderr
    nan = events(out, "nan")
    assert [e["action"] for e in nan] == ["skip", "skip", "stop"]
    assert [e["consecutive"] for e in nan] == [1, 2, 3]
    assert nan[0]["bad_params"]  # the parameters whose gradients were not finite
    assert all(isinstance(n, str) and "." in n for n in nan[0]["bad_params"])
    text = open(os.path.join(out, "metrics.jsonl")).read()
    assert "NaN" in text or "Infinity" in text
    # Strict JSON: no bare NaN tokens.
    def no_bare(token):
        pytest.fail(f"bare {token} in the log")

    for line in text.splitlines():
        json.loads(line, parse_constant=no_bare)


def test_on_nan_stop_names_the_step(corpus, tmp_path):
    out = str(tmp_path / "run")
    p = run_train(corpus, out, "--steps", "6", "--batch-size", "2", "--on-nan", "stop",
                  check=False, faults={"nan_loss": 2})
    assert p.returncode == 1
    assert b"stopped at step 3: --on-nan stop" in p.stderr
    (e,) = events(out, "nan")
    assert e["step"] == 3 and e["loss"] == "NaN" and e["action"] == "stop"
    assert "tok_emb.weight" in e["bad_params"]


def test_single_nan_is_skipped_and_training_continues(corpus, tmp_path):
    out = str(tmp_path / "run")
    # fp64: the layers' norms add up in another order than clip_grad_norm_'s total (in fp32
    # a 24576-element embedding's sum of squares is only within gamma_24576 = 1.5e-3)
    run_train(corpus, out, "--steps", "5", "--batch-size", "2", "--grad-stats", "per-layer",
              "--grad-stats-every", "2", *FP64, faults={"nan_loss": 1})
    (e,) = events(out, "nan")
    assert e["action"] == "skip" and e["step"] == 2
    r = losses(out)
    assert [x[0] for x in r] == [1, 3, 4, 5]
    assert all(math.isfinite(x[1]) for x in r)
    # --grad-stats per-layer: each layer's norm on the non-finite step and every 2 steps
    stats = events(out, "grad_stats")
    assert [(g["step"], g["why"]) for g in stats] == [(2, "nan"), (4, "every")]
    layers = [k for k in stats[1] if k.startswith("grad_norm/")]
    assert layers[:3] == ["grad_norm/tok_emb", "grad_norm/layers.0.attn_norm",
                          "grad_norm/layers.0.attn"] and layers[-1] == "grad_norm/norm"
    total = math.sqrt(sum(stats[1][k] ** 2 for k in layers))
    assert total == pytest.approx(stats[1]["grad_norm"], rel=PARITY_REL)  # the layers add up
    assert stats[0]["grad_norm/tok_emb"] == "NaN"
    (named,) = [f for f in diagnose(load_run(out)) if f.kind == "layer_grads"]
    assert named.step == 2 and "first non-finite in tok_emb" in named.summary


def test_loss_spike_rolls_back_with_half_the_lr(corpus, tmp_path):
    out = str(tmp_path / "run")
    run_train(corpus, out, "--steps", "12", "--batch-size", "4", "--checkpoint-every", "4",
              "--on-spike", "rollback", "--spike-factor", "2", faults={"spike_loss": 9})
    (rb,) = events(out, "rollback")
    assert rb["from_step"] == 10 and rb["to_step"] == 8
    assert rb["skipped_windows"] == 2 * 4  # the two batches since step 8 are not replayed
    assert rb["loss"] > 2 * rb["ema_loss"]
    r = losses(out)
    assert [x[0] for x in r] == list(range(1, 13))  # one row per step after the rollback
    cfg = TrainConfigForTest(lr=3e-3, warmup=2, steps=12)
    assert r[10][3] == pytest.approx(0.5 * lr_at(10, cfg))  # step 11 at half the rate
    assert r[10][4] == 11 * 4 * 64  # tokens count the steps kept, not the skipped ones
