"""The one log reader of plot-loss and diagnose: every format, written here in its real shape,
read from its content, and a loud error for what it cannot read."""

import json
import math

import numpy as np
import pytest

from llmtk.curves.logs import load_run
from llmtk.errors import DataError
from tests import curve_cases as cc
from tests.test_diagnose import DATA, cli
from tests.util import llmtk

LOSSES = cc.curve(200)


def rising_then_nan():
    """The issue's example: the loss climbs from 3 to 18, then turns NaN."""
    return [3 + 15 * s / 150 for s in range(150)] + [math.nan] * 10


def check(run, fmt, n=200, val=False):
    assert run.format == fmt
    xs, ys = run.series("loss")
    assert len(ys) == n and xs[:3] == [0, 1, 2]
    assert ys[:3] == pytest.approx(LOSSES[:3], rel=1e-5)
    if val:
        assert run.has("val_loss")


def test_hf_trainer_state(tmp_path):
    history = []
    for s, v in enumerate(LOSSES):
        history.append({"epoch": s / 100, "grad_norm": 1.2, "learning_rate": 5e-5,
                        "loss": v, "step": s})
        if s % 50 == 49:
            history.append({"epoch": s / 100, "eval_loss": v + 0.1, "eval_runtime": 1.5,
                            "eval_samples_per_second": 100.0, "step": s})
    history.append({"epoch": 2.0, "step": 199, "total_flos": 1e15, "train_loss": 2.9,
                    "train_runtime": 100.0, "train_samples_per_second": 32.0})
    state = {"best_metric": None, "epoch": 2.0, "global_step": 200, "log_history": history,
             "max_steps": 200, "num_train_epochs": 2, "trial_name": None}
    ckpt = tmp_path / "out" / "checkpoint-200"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text(json.dumps(state, indent=2))
    (tmp_path / "out" / "checkpoint-50").mkdir()
    run = load_run(str(tmp_path / "out"))  # the newest checkpoint's state
    check(run, "HF Trainer trainer_state.json", val=True)
    assert run.has("lr") and run.has("grad_norm")
    assert run.series("loss")[1][-1] == pytest.approx(LOSSES[-1])  # not the run average


def test_tensorboard_event_file_from_the_writer(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "tb"))
    for s, v in enumerate(LOSSES):
        writer.add_scalar("train/loss", v, s)
        writer.add_scalar("train/learning_rate", 3e-4, s)
        if s % 50 == 0:
            writer.add_scalar("eval/loss", v + 0.1, s)
    writer.add_histogram("weights", np.array([1.0, 2.0]), 0)  # not a scalar: skipped
    writer.close()
    run = load_run(str(tmp_path / "tb"))  # the log directory
    check(run, "TensorBoard events", val=True)
    assert run.has("lr") and run.has("time")
    (event_file,) = (tmp_path / "tb").glob("events.out.tfevents.*")
    assert load_run(str(event_file)).format == "TensorBoard events"


def test_tensorboard_csv_export_rising_to_nan_is_found(tmp_path):
    path = tmp_path / "run-a-tag-train_loss.csv"
    path.write_text("Wall time,Step,Value\n" + "".join(
        f"{1.7e9 + s},{s},{v}\n" for s, v in enumerate(rising_then_nan())))
    run = load_run(str(path))
    assert run.format == "TensorBoard CSV export" and len(run.series("loss")[1]) == 160
    r = cli("diagnose", path, "--json")
    assert r.returncode == 3
    kinds = {f["kind"]: f["severity"] for f in json.loads(r.stdout)[0]["findings"]}
    assert kinds["nan"] == "error"
    # a file name without a tag: Value is read as the loss, and the report says so
    plain = tmp_path / "export.csv"
    plain.write_text(path.read_text())
    assert "read TensorBoard's Value column as loss" in load_run(str(plain)).notes[0]


def test_csv_headers_are_case_insensitive(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("Step,loss\n" + "".join(f"{s},{v}\n" for s, v in
                                            enumerate(rising_then_nan())))
    assert cli("diagnose", path).returncode == 3
    tsv = tmp_path / "log.tsv"
    tsv.write_text("ITER\tTrain_Loss\tLearning_Rate\n" + "".join(
        f"{s}\t{v}\t3e-4\n" for s, v in enumerate(LOSSES)))
    run = load_run(str(tsv))
    check(run, "CSV")
    assert run.has("lr")


def test_wandb_exports(tmp_path):
    panel = tmp_path / "wandb_export.csv"
    panel.write_text('"Step","sunny-1 - train/loss","sunny-1 - train/loss__MIN",'
                     '"sunny-1 - train/loss__MAX"\n' + "".join(
                         f'"{s}","{v}","{v}","{v}"\n' for s, v in enumerate(LOSSES)))
    run = load_run(str(panel))
    check(run, "W&B CSV export")
    assert run.columns() == ["step", "loss"]
    history = tmp_path / "history.csv"  # run.history().to_csv(): pandas' unnamed index first
    history.write_text(",_step,_runtime,_timestamp,train/loss,train/lr\n" + "".join(
        f"{s},{s},{s * 0.5},{1.7e9 + s},{v},0.001\n" for s, v in enumerate(LOSSES)))
    run = load_run(str(history))
    check(run, "W&B history CSV")
    assert run.has("time") and run.has("lr")
    rows = tmp_path / "scan.json"
    rows.write_text(json.dumps([{"_step": s, "train/loss": v} for s, v in enumerate(LOSSES)]))
    check(load_run(str(rows)), "JSON rows (e.g. W&B scan_history)")
    columns = tmp_path / "cols.json"  # pandas DataFrame.to_json() of run.history()
    columns.write_text(json.dumps({"_step": {str(i): i for i in range(200)},
                                   "loss": {str(i): v for i, v in enumerate(LOSSES)}}))
    check(load_run(str(columns)), "JSON columns (e.g. W&B history().to_json())")
    two = tmp_path / "two.csv"
    two.write_text('"Step","a - loss","b - loss"\n"0","1","2"\n')
    with pytest.raises(DataError, match="export of 2 runs"):
        load_run(str(two))


def test_wandb_offline_run_directory():
    """A real offline run written by wandb 0.31 (tests/data/curves/wandb/make_offline_run.py):
    its history records span LevelDB blocks, one record is split across two."""
    (offline,) = (DATA / "wandb").glob("offline-run-*")
    run = load_run(str(offline))
    assert run.format == "W&B run file" and len(run.rows) == 200
    xs, ys = run.series("loss")
    assert xs[:2] == [0, 1] and ys[0] == 7.0 and math.isnan(ys[150])
    assert ys[199] == pytest.approx(3 + 4 * math.exp(-199 / 40))
    assert run.series("val_loss")[0] == [49, 99, 149, 199]
    assert run.has("lr") and run.has("grad_norm") and run.has("time")
    (file,) = offline.glob("*.wandb")
    torn = file.read_bytes()[:40000]  # a run still writing: the torn last record is dropped
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".wandb") as f:
        f.write(torn)
        f.flush()
        assert 0 < len(load_run(f.name).rows) < 200
        f.seek(0)
        f.write(b"not W&B!")
        f.flush()
        with pytest.raises(DataError):
            load_run(f.name)


def test_megatron_text_log(tmp_path):
    lines = ["using world size: 8, data-parallel size: 8", "> building GPT model ..."]
    for s, v in enumerate(LOSSES):
        lines.append(f" [2024-05-01 10:00:{s % 60:02d}] iteration {s:8d}/  500000 | consumed "
                     f"samples: {s * 512:12d} | elapsed time per iteration (ms): 1234.5 | "
                     f"learning rate: 1.500000E-04 | global batch size:   512 | lm loss: "
                     f"{v:.6E} | loss scale: 1.0 | grad norm: 1.234 | number of skipped "
                     "iterations:   0 | number of nan iterations:   0 |")
        if s % 100 == 99:
            lines.append(f" validation loss at iteration {s} | lm loss value: {v + 0.1:.6E} | "
                         "lm loss PPL: 1.2E+01 |")
    path = tmp_path / "megatron.log"
    path.write_text("\n".join(lines) + "\n")
    run = load_run(str(path))
    check(run, "Megatron-LM text log", val=True)
    assert run.series("lr")[1][0] == 1.5e-4 and run.series("grad_norm")[1][0] == 1.234


def test_torchtitan_text_log_with_colours(tmp_path):
    lines = ["[titan] 2024-05-01 10:00:00,000 - root - INFO - Starting job: Llama 3 8B"]
    for s, v in enumerate(LOSSES):
        lines.append(f"[titan] 2024-05-01 10:00:01,000 - root - INFO - \x1b[31mstep: {s:2d}  "
                     f"\x1b[32mloss: {v:7.4f}  \x1b[33mmemory: 31.61GiB(33.27%)  \x1b[34mtps: "
                     "1,092  \x1b[35mtflops: 50.60  \x1b[35mmfu: 16.22%\x1b[39m")
    path = tmp_path / "titan.log"
    path.write_text("\n".join(lines) + "\n")
    run = load_run(str(path))
    check(run, "torchtitan text log")
    assert run.series("tokens_per_s")[1][0] == 1092 and run.series("mfu")[1][0] == 16.22


def test_nanogpt_llmc_and_modded_nanogpt_text(tmp_path):
    nano = tmp_path / "nano.log"
    nano.write_text("".join(f"iter {s}: loss {v:.4f}, time 10.00ms, mfu 30.00%\n" +
                            (f"step {s}: train loss {v:.4f}, val loss {v + 0.1:.4f}\n"
                             if s % 100 == 0 else "") for s, v in enumerate(LOSSES)))
    run = load_run(str(nano))
    assert run.format == "nanoGPT text log" and run.has("val_loss")
    stdout = tmp_path / "llmc.txt"
    stdout.write_text("".join(f"step {s + 1:4d}/200 | loss {v:.6f} (+nanz)| norm 1.2 (+nanz)| "
                              f"lr 6.00e-04 | 50.00 ms | 40.0% bf16 MFU | 300000 tok/s\n"
                              for s, v in enumerate(LOSSES)))
    run = load_run(str(stdout))
    assert run.format == "llm.c text log" and run.series("loss")[0][0] == 1
    assert run.series("grad_norm")[1][0] == 1.2 and run.series("lr")[1][0] == 6e-4
    modded = tmp_path / "modded.txt"
    modded.write_text("import os\nprint('code first')\n" + "".join(
        f"step:{s}/200 train_loss:{v:.4f} train_time:{s * 100}ms step_avg:100.00ms\n"
        for s, v in enumerate(LOSSES)) + "step:200/200 val_loss:2.9 train_time:20000ms\n")
    run = load_run(str(modded))
    assert run.format == "modded-nanogpt text log" and run.series("val_loss")[1] == [2.9]


def test_plot_loss_reads_the_same_formats_and_fails_loudly(tmp_path):
    path = tmp_path / "run-x-tag-loss.csv"
    path.write_text("Wall time,Step,Value\n" + "".join(
        f"{1.7e9 + s},{s},{v}\n" for s, v in enumerate(LOSSES)))
    out = tmp_path / "a.svg"
    r = cli("plot-loss", path, "-o", out)
    assert r.returncode == 0 and out.exists()
    r = cli("plot-loss", path, "--metric", "Value", "-o", tmp_path / "b.svg")
    assert r.returncode == 0, r.stderr  # Value is the column's own name: the same curve
    r = cli("plot-loss", path, "--metric", "accuracy", "-o", tmp_path / "c.svg")
    assert r.returncode == 2 and "accuracy" in r.stderr and "loss" in r.stderr
    assert not (tmp_path / "c.svg").exists()
    text = tmp_path / "words.txt"
    text.write_text("nothing to see\n")
    r = cli("plot-loss", text, "-o", tmp_path / "d.svg")
    assert r.returncode == 1 and "no training rows found" in r.stderr


def test_hf_trainer_state_with_several_eval_sets(tmp_path):
    """Trainer(eval_dataset={"g0": ..., "g1": ...}) logs eval_g0_loss, eval_g1_loss."""
    history = []
    for epoch in range(1, 13):
        step = epoch * 400
        history.append({"epoch": float(epoch), "loss": 1.1 * 0.7 ** epoch, "step": step})
        history.append({"epoch": float(epoch), "eval_g0_loss": 1.0 + 0.1 * epoch, "step": step})
        history.append({"epoch": float(epoch), "eval_g1_loss": 2.0 + 0.1 * epoch, "step": step})
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"global_step": 4800, "log_history": history}))
    run = load_run(str(path))
    assert run.series("val_loss")[1][0] == pytest.approx(1.1)
    assert run.notes == ["val_loss is eval_g0_loss (of eval_g0_loss, eval_g1_loss)"]
    r = cli("diagnose", path, "--json")
    assert r.returncode == 3
    assert [f["kind"] for f in json.loads(r.stdout)[0]["findings"]] == ["overfitting"]


def test_hf_trainer_stdout(tmp_path):
    """The dicts Trainer prints (logging_steps), some glued to a tqdm bar, NaN included."""
    lines = ["***** Running training *****", "  Num examples = 1000"]
    for i, v in enumerate(LOSSES):
        bar = f"  {i}%|##        | {i}/200 [00:{i % 60:02d}<01:00,  3.2it/s]" if i % 3 else ""
        loss = "nan" if i == 150 else f"{v:.4f}"
        lines.append(f"{bar}{{'loss': {loss}, 'grad_norm': 1.5, 'learning_rate': 5e-05, "
                     f"'epoch': {i / 100:.2f}}}")
        if i % 50 == 49:
            lines.append(f"{{'eval_loss': {v + 0.1:.4f}, 'eval_runtime': 1.2, 'epoch': 0.5}}")
    lines.append("{'train_runtime': 100.0, 'train_samples_per_second': 10.0, 'train_loss': 3.0,"
                 " 'epoch': 2.0}")
    path = tmp_path / "stdout.log"
    path.write_text("\n".join(lines) + "\n")
    run = load_run(str(path))
    assert run.format == "HF Trainer stdout text log"
    xs, ys = run.series("loss")
    assert xs[:3] == [1, 2, 3] and len(ys) == 200 and math.isnan(ys[150])
    assert ys[0] == pytest.approx(LOSSES[0], abs=1e-4)
    assert run.series("val_loss")[0] == [50, 100, 150, 200]
    assert run.has("lr") and run.has("grad_norm")


def test_plot_loss_help_examples_run_as_written(tmp_path, monkeypatch):
    import glob
    import shlex

    from llmtk.commands.plot_loss import HELP
    from llmtk.io.metrics import encode_row
    from tests.examples import help_examples

    for run in ("a", "b"):
        (tmp_path / "runs" / run).mkdir(parents=True)
        (tmp_path / "runs" / run / "metrics.jsonl").write_bytes(b"".join(
            encode_row(r) for r in cc.rows_of(LOSSES)))
    monkeypatch.chdir(tmp_path)
    examples = help_examples(HELP)
    assert len(examples) == 4
    for example in examples:
        args = [a for arg in shlex.split(example)[1:] for a in (sorted(glob.glob(arg))
                                                                  if "*" in arg else [arg])]
        if "-o" not in args:  # a terminal chart, written to fd 1: a real process
            r = llmtk(*args, cwd=tmp_path)
            assert r.returncode == 0 and b"loss" in r.stdout, (example, r.stderr)
            continue
        r = cli(*args)
        assert r.returncode == 0, (example, r.stderr)
        assert (tmp_path / args[args.index("-o") + 1]).stat().st_size > 0


def test_run_labels_drop_extensions_and_stay_unique(tmp_path):
    from llmtk.curves.logs import run_labels

    for d in ("exp1/a", "exp2/a", "solo"):
        (tmp_path / d).mkdir(parents=True)
    t = str(tmp_path)
    assert run_labels([f"{t}/run1.jsonl", f"{t}/lr0.001.jsonl.zst", f"{t}/solo/metrics.jsonl",
                       f"{t}/solo", f"{t}/x/events.out.tfevents.1.host"]) == \
        ["run1", "lr0.001", "solo", "solo#2", "x"]
    assert run_labels([f"{t}/exp1/a/metrics.jsonl", f"{t}/exp2/a/metrics.jsonl",
                       f"{t}/b.csv"]) == ["exp1/a", "exp2/a", "b"]
    assert run_labels([f"{t}/exp1/a", f"{t}/exp1/a"]) == ["a", "a#2"]  # the same run twice


# -- logs read by their structure: a counter that may sit on an earlier line, loss-like keys
# or columns, validation beside them (issue 34) -----------------------------------------------


def test_keras_progress_output_is_one_row_per_epoch(tmp_path):
    """Keras prints `Epoch N/M` on a line of its own and the epoch's numbers on the progress
    bar below it (running means while it fills, the epoch's on the full bar); the bar of a
    `model.evaluate` after the last epoch has another length and is not the epoch's."""
    log = tmp_path / "fit.log"
    log.write_text(
        "Epoch 1/3\n"
        "  1/100 [..............................] - ETA: 9s - loss: 2.9000\b\b\b\n"
        " 50/100 [==============>...............] - ETA: 2s - loss: 2.6000\n"
        "100/100 [==============================] - 5s 3ms/step - loss: 2.3000 - accuracy: "
        "0.5100 - val_loss: 2.1000 - val_accuracy: 0.5500\n"
        "Epoch 2/3\n"
        "100/100 [==============================] - 5s 3ms/step - loss: 1.9000 - accuracy: "
        "0.6000 - val_loss: 1.8000 - val_accuracy: 0.6100\n"
        "Epoch 3/3\n"
        "100/100 ━━━━━━━━━━━━━━━━━━━━ 5s 3ms/step - accuracy: 0.6500 - loss: 1.7000 - "
        "val_accuracy: 0.6600 - val_loss: 1.6500\n"
        " 20/20 [==============================] - 0s 2ms/step - loss: 9.9000 - accuracy: 0.1\n")
    run = load_run(str(log))
    assert run.series("loss") == ([100, 200, 300], [2.3, 1.9, 1.7])
    assert run.series("val_loss") == ([100, 200, 300], [2.1, 1.8, 1.65])
    assert run.notes[0] == ("key: value lines: step from 'Epoch' on the line above, loss from "
                            "'loss', val_loss from 'val_loss'")
    assert any("20/20: an evaluation pass) left out" in n for n in run.notes)
    epochs_only = tmp_path / "keras1.log"  # Keras 1 prints no bar at all with verbose=2
    epochs_only.write_text("".join(f"Epoch {e}/4\n{3000 + e}s - loss: {1 / e:.4f} - acc: 0.5 - "
                                   f"val_loss: {1.1 / e:.4f}\n" for e in range(1, 5)))
    assert load_run(str(epochs_only)).series("loss") == ([1, 2, 3, 4], [1.0, 0.5, 0.3333, 0.25])


def test_fairseq_logs_are_read_old_and_new(tmp_path):
    """Old fairseq counts batches within the epoch (`| epoch 001  1000 / 4000 loss=...`) and
    prints epoch summaries as `| key value |` cells; a validation line's loss is the
    validation loss; newer ones carry num_updates, the step."""
    old = tmp_path / "old.log"
    old.write_text(
        "| epoch 001  1000 / 4000 loss=9.57 (10.94), wps=962, wpb=908, bsz=32, lr=0.001\n"
        "| epoch 001  2000 / 4000 loss=9.20 (10.10), wps=962, wpb=908, bsz=32, lr=0.001\n"
        "| epoch 001 | train loss 9.40 | train ppl 675.0 | words/s    961 | clip 100%\n"
        "| epoch 001 | valid on 'valid' subset  100 / 300 loss=9.35\n"
        "| epoch 001 | valid on 'valid' subset | valid loss 9.10 | valid ppl 548.0\n"
        "| epoch 002  1000 / 4000 loss=8.90 (8.90), wps=962, wpb=908, bsz=32, lr=0.001\n")
    run = load_run(str(old))
    assert run.series("loss") == ([1000, 2000, 4000, 5000], [9.57, 9.2, 9.4, 8.9])
    assert run.series("val_loss") == ([4000], [9.1])
    new = tmp_path / "new.log"
    new.write_text(
        "2020-10-18 02:34:53 | INFO | train_inner | epoch 001:    100 / 1975 loss=12.834, "
        "nll_loss=12.424, ppl=5496.24, num_updates=100, lr=1.009, gnorm=1.448, loss_scale=8\n"
        "2020-10-18 02:35:39 | INFO | train_inner | epoch 001:    200 / 1975 loss=11.605, "
        "nll_loss=11.024, ppl=2082.74, num_updates=200, lr=2.008, gnorm=1.406, loss_scale=8\n"
        "2020-10-18 02:36:00 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 10.9 "
        "| nll_loss 10.2 | ppl 1181.0 | num_updates 200 | best_loss 10.9\n")
    run = load_run(str(new))
    assert run.series("loss") == ([100, 200], [12.834, 11.605])
    assert run.series("val_loss") == ([200], [10.9]) and run.has("gnorm")
    assert run.notes[0].startswith("key: value lines: step from 'num_updates', loss from 'loss'")


def test_fairseq_json_log_numbers_written_as_strings_are_numbers(tmp_path):
    log = tmp_path / "train.jsonl"
    log.write_text('{"epoch": 25, "loss": "3.097", "ppl": "2.51", "clip": "100%"}\n'
                   '{"epoch": 25, "valid_loss": 3.1106}\n'
                   '{"epoch": 26, "loss": "3.095", "ppl": "2.50", "clip": "100%"}\n')
    run = load_run(str(log))
    assert run.series("loss")[1] == [3.097, 3.095] and run.has("val_loss")


def test_build_nanogpt_step_name_value_columns(tmp_path):
    """build-nanogpt's log.txt: one number a line, `STEP NAME VALUE`; `train` and `val` are
    the two losses, other names (HellaSwag accuracy) their own series."""
    log = tmp_path / "log.txt"
    log.write_text("0 val 10.9531\n0 hella 0.2500\n0 train 10.955020\n1 train 10.512345\n"
                   "2 train 10.101010\n250 val 6.4300\n250 hella 0.2440\n250 train 6.387966\n")
    run = load_run(str(log))
    assert run.series("loss") == ([0, 1, 2, 250], [10.95502, 10.512345, 10.10101, 6.387966])
    assert run.series("val_loss") == ([0, 250], [10.9531, 6.43])
    assert run.series("hella")[1] == [0.25, 0.244]
    assert run.notes == ["STEP NAME VALUE lines: step from the first column, val_loss from "
                         "'val', loss from 'train'"]


def test_a_two_word_loss_name_keeps_its_suffixed_parts(tmp_path):
    """`val loss_ce` belongs to the validation line it is on, and `train loss` (not its part
    `train loss_ce`) is the training loss."""
    log = tmp_path / "seg.log"
    log.write_text("epoch : 4, iteration : 40, val loss : 0.271, val loss_ce: 0.160\n"
                   "epoch : 5, iteration : 50, train loss : 0.150, train loss_ce: 0.090\n"
                   "epoch : 5, iteration : 60, train loss : 0.119, train loss_ce: 0.052\n")
    run = load_run(str(log))
    assert run.series("loss") == ([50, 60], [0.15, 0.119])
    assert run.series("val_loss") == ([40], [0.271])
