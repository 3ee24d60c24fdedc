"""`llmtk train` as a person meets it: --threads, the warmup warning,
the two start lines, the 80-column step line with elapsed time and ETA, a finished run
re-run, a resume with changed settings, an unknown --model, and help defaults read from
TrainConfig. In process (tests/util.InProcess), on a one-layer model of a few steps."""

import json
import os
import shutil
import typing

import pytest

torch = pytest.importorskip("torch")

from llmtk.commands import train as train_command  # noqa: E402
from llmtk.train import runtime  # noqa: E402
from llmtk.train.checkpoint.checkpointer import changed_settings  # noqa: E402
from llmtk.train.config import FIELDS, TrainConfig, section  # noqa: E402
from llmtk.train.optim import OptimSpec, warmup_warning  # noqa: E402
from llmtk.train.report import duration, start_lines, step_line  # noqa: E402
from tests.util import InProcess  # noqa: E402

TINY = ["--layers", "1", "--d-model", "32", "--heads", "2", "--seq-len", "32",
        "--batch-size", "2", "--log-every", "2", "--warmup", "1", "--threads", "1"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    with open(d / "d.jsonl", "w") as f:
        for i in range(60):
            f.write(json.dumps({"text": f"Document {i}: the quick brown fox jumps over the "
                                        f"lazy dog, {i * 7} times. " * 4}) + "\n")
    return d


@pytest.fixture
def llmtk():
    return InProcess()


def train_args(data, out, *extra):
    return ["train", "--data", str(data / "d.jsonl"), "--cache-dir", str(data / "cache"),
            "--out", str(out), *TINY, *extra]


@pytest.fixture(scope="module")
def finished(data, tmp_path_factory):
    """A run of 4 steps, trained once (checkpoint at 4) and copied by the tests."""
    from llmtk.train.config import resolve_config
    from llmtk.train.trainer import train

    out = tmp_path_factory.mktemp("finished") / "run"
    flags = dict(data=[str(data / "d.jsonl")], cache_dir=str(data / "cache"), out=str(out),
                 layers=1, d_model=32, heads=2, seq_len=32, batch_size=2, log_every=2,
                 warmup=1, threads=1, steps=4, quiet=True)
    train(resolve_config(flags, None))
    return out


@pytest.fixture
def four(finished, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    return out


def metric_rows(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


# ---------------------------------------------------------------- a. --threads


def test_threads_flag_sets_torch_threads_for_the_run_and_gives_them_back(data, tmp_path,
                                                                         llmtk):
    before = torch.get_num_threads()
    r = llmtk(*train_args(data, tmp_path / "run", "--steps", "2"))
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "run" / "config.json").read_text())["threads"] == 1
    assert ", 1 thread;" in r.output  # the start line says it
    assert torch.get_num_threads() == before


def test_default_threads_share_the_physical_cores_and_are_capped(monkeypatch):
    monkeypatch.setattr(runtime, "usable_cores", lambda: 16)
    assert runtime.default_threads(1) == runtime.MAX_DEFAULT_THREADS == 8
    assert runtime.default_threads(4) == 4
    assert runtime.default_threads(32) == 1  # never 0
    monkeypatch.setattr(runtime, "usable_cores", lambda: 2)
    assert runtime.default_threads(1) == 2


def test_usable_cores_counts_each_physical_core_once():
    assert 1 <= runtime.usable_cores() <= len(os.sched_getaffinity(0))


def test_threads_precedence_flag_then_omp_env_then_default(monkeypatch):
    before = torch.get_num_threads()
    try:
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
        assert runtime.set_threads(1) == (1, "--threads") and torch.get_num_threads() == 1
        assert runtime.set_threads(None)[1] == "OMP_NUM_THREADS"  # the job script's choice
        monkeypatch.delenv("OMP_NUM_THREADS")
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
        monkeypatch.setattr(runtime, "usable_cores", lambda: 1)
        assert runtime.set_threads(None) == (1, "default") and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_a_busy_machine_gets_a_hint_not_a_different_default(monkeypatch):
    monkeypatch.setattr(runtime, "usable_cores", lambda: 2)
    monkeypatch.setattr(runtime.os, "getloadavg", lambda: (6.9, 6.0, 5.0))
    assert runtime.busy_note(2, "default", "cpu") == (
        "note: load average 6.9 on 2 cores: other processes keep them busy, and 2 threads "
        "would wait on each other; --threads 1 may be several times faster here")
    assert runtime.busy_note(2, "--threads", "cpu") is None  # the user chose
    assert runtime.busy_note(1, "default", "cpu") is None
    assert runtime.busy_note(2, "default", "cuda:0") is None
    monkeypatch.setattr(runtime.os, "getloadavg", lambda: (1.5, 1.0, 1.0))
    assert runtime.busy_note(2, "default", "cpu") is None


@pytest.mark.integration
def test_the_launcher_gives_each_torchrun_worker_its_share_of_the_cores(data, tmp_path,
                                                                       monkeypatch, llmtk):
    from llmtk.train import launch

    seen = {}
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setattr(runtime, "usable_cores", lambda: 8)
    monkeypatch.setattr(launch, "run_torchrun",
                        lambda argv: seen.update(env=os.environ.get("OMP_NUM_THREADS")))
    args = train_args(data, tmp_path / "run", "--steps", "2", "--nproc-per-node", "4")
    i = args.index("--threads")
    r = llmtk(*args[:i], *args[i + 2:])  # no --threads
    assert r.exit_code == 0, r.output
    assert seen["env"] == "2"  # torchrun would have set 1


# ---------------------------------------------------------------- b. warmup >= steps


def test_warmup_not_shorter_than_the_run_is_warned_with_what_happens(data, tmp_path, llmtk):
    args = train_args(data, tmp_path / "r")
    args[args.index("--warmup") + 1] = "10"
    r = llmtk(*args, "--steps", "4")
    assert r.exit_code == 0, r.output
    assert "warning: --warmup 10 >= --steps 4: the whole run warms up (lr rises linearly " \
           "to 0.00012 at the last step, peak --lr 0.0003) and never decays; lower --warmup " \
           "to use the cosine schedule" in r.output
    r = llmtk(*train_args(data, tmp_path / "s", "--steps", "2"))  # warmup 1 < 2: quiet
    assert "warning: --warmup" not in r.output


def test_warmup_warning_text_names_the_last_lr():
    cfg = TrainConfig(steps=100, warmup=100, lr=1e-3, schedule="wsd")
    assert warmup_warning(section(OptimSpec, cfg)) == (
        "warning: --warmup 100 >= --steps 100: the whole run warms up (lr rises linearly to "
        "0.001 at the last step, peak --lr 0.001) and never decays; lower --warmup to use "
        "the wsd schedule")


# ---------------------------------------------------------------- c, d. start and step lines


def test_a_run_starts_with_two_lines_and_steps_fit_80_columns(data, tmp_path, llmtk):
    out = tmp_path / "run"
    r = llmtk(*train_args(data, out, "--steps", "4"))
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("llmtk train: "))
    assert lines[start] == ("llmtk train: tiny 1x32, 28.8k params; 4 steps x 64 tokens = "
                            "256 tokens")
    assert lines[start + 1] == (f"  batch 2x1x1 of 32, lr 0.0003 cosine (warmup 1), cpu fp32, "
                                f"1 thread; config: {out}/config.json")
    assert "{" not in r.output  # no JSON dump; the full config is in the run directory
    config = json.loads((out / "config.json").read_text())
    assert config["train"]["steps"] == 4 and config["params"] == 28768
    steps = [line for line in lines if line.startswith("step ")]
    assert [s.split("  ")[0] for s in steps] == ["step 2/4", "step 4/4"]
    for line in steps:
        assert len(line) <= 80, line
        assert line.split("  ")[-1].startswith("0:") and " eta 0:" in line  # elapsed, ETA


def test_step_line_worst_case_fits_80_columns():
    long = step_line(12345678, 99999999, float("inf"), 3e-4, 1.23e6, 10 * 86400, 99 * 86400,
                     val_loss=12.3456, grad_norm=1.23e12, mfu=0.456, mem_gb=123.4,
                     step_ms=12345.0)
    assert long == "step 12345678/99999999  loss inf  val 12.3456  lr 3.0e-4  10d00h eta 99d00h"
    cpu = step_line(20, 1000, 3.4567, 3e-4, 2100, 57, 421, grad_norm=0.412, mem_gb=1.2,
                    step_ms=25)
    assert cpu == "step 20/1000  loss 3.4567  lr 3.0e-4  gnorm 0.412  2.1k tok/s  0:57 eta 7:01"
    gpu = step_line(1200, 20000, 3.4567, 3e-4, 182e3, 3723, 33164, grad_norm=0.412, mfu=0.412,
                    mem_gb=61.2, step_ms=1234)
    assert gpu == "step 1200/20000  loss 3.4567  lr 3.0e-4  182k tok/s  mfu 41.2%  1h02m eta 9h12m"
    for steps in (10, 10**4, 10**7):  # whatever fits, never wider than 80
        for val in (None, 2.5):
            line = step_line(steps, steps, 2.3456, 3e-4, 1.23e6, 5e5, 5e6, val_loss=val,
                             grad_norm=0.31, mfu=0.52, mem_gb=61.2, step_ms=1234)
            assert len(line) <= 80 and line.endswith("eta 57d20h"), line


def test_durations_read_as_clocks():
    assert [duration(s) for s in (0.4, 7, 723, 3599, 3723, 93784)] == \
        ["0:00", "0:07", "12:03", "59:59", "1h02m", "1d02h"]


def test_start_lines_name_the_run():
    first, second = start_lines(
        model="350m", shape="24x1024", params=354_823_168, steps=20_000, batch=8, procs=8,
        grad_accum=4, seq_len=2048, lr=3e-4, schedule="cosine", warmup=2000,
        device="cuda:0", dtype="bf16", compiled=True, threads=4, config_path="r/config.json")
    assert first == ("llmtk train: 350m 24x1024, 355M params; 20,000 steps x 524k tokens = "
                     "10.5B tokens")
    assert second == ("  batch 8x8x4 of 2048, lr 0.0003 cosine (warmup 2000), cuda:0 bf16 "
                      "compiled, 4 threads; config: r/config.json")


# ---------------------------------------------------------------- e. a finished run


def test_rerunning_a_finished_run_says_so_and_touches_nothing(data, four, llmtk):
    before = {n: (four / n).read_bytes() for n in ("metrics.jsonl", "config.json")}
    r = llmtk(*train_args(data, four, "--steps", "4"))
    assert r.exit_code == 0, r.output
    assert f"already complete: 4 steps ({four})" in r.output
    assert "step " not in r.output and "done:" not in r.output
    assert {n: (four / n).read_bytes() for n in before} == before
    assert not (four / "metrics.jsonl.old").exists()


# ---------------------------------------------------------------- f. resume, changed settings


def test_resuming_with_a_changed_lr_names_it(data, four, llmtk):
    r = llmtk(*train_args(data, four, "--steps", "6", "--lr", "1e-3"))
    assert r.exit_code == 0, r.output
    assert "note: resuming step-0000004 with changed settings (they apply from step 4 on): " \
           "--steps 4 -> 6, --lr 0.0003 -> 0.001" in r.output
    assert [row["step"] for row in metric_rows(four) if "loss" in row] == [2, 4, 6]


def test_resuming_unchanged_says_nothing_about_settings(data, four, llmtk):
    r = llmtk(*train_args(data, four, "--steps", "6", "--quiet"))
    assert r.exit_code == 0 and r.output == ""


def test_changed_settings_lists_what_changes_training_only():
    old = TrainConfig(steps=4).to_dict()
    new = TrainConfig(steps=4, lr=1e-3, quiet=True, log_every=1, threads=2, seed=3).to_dict()
    assert changed_settings(old, new) == "--lr 0.0003 -> 0.001"
    assert changed_settings({"lr": 3e-4}, new) == "--lr 0.0003 -> 0.001"  # older checkpoint
    assert changed_settings(old, old) == ""


# ---------------------------------------------------------------- g. unknown --model


def test_an_unknown_model_is_refused_before_tokenizing(data, tmp_path, llmtk):
    out, cache = tmp_path / "run", tmp_path / "cache"
    args = train_args(data, out, "--model", "llama2-7")
    args[args.index("--cache-dir") + 1] = str(cache)
    r = llmtk(*args)
    assert r.exit_code == 2
    assert "--model: must be one of tiny, " in r.output and "did you mean llama2-7b?" in r.output
    assert not out.exists() and not cache.exists()  # nothing read, nothing written


# ---------------------------------------------------------------- h. help defaults


def option_helps():
    hints = typing.get_type_hints(train_command.command, include_extras=True)
    for name, hint in hints.items():
        if name in FIELDS:
            yield name, next(m for m in hint.__metadata__).help


def test_help_defaults_come_from_the_config_fields():
    helps = dict(option_helps())
    assert len(helps) == len(FIELDS)
    for name, text in helps.items():
        assert "Default" not in text and "(default" not in text, (name, text)
    assert helps["steps"].endswith(r"[dim]\[default: 1000][/dim]")
    assert helps["lr"].endswith(r"\[default: 0.0003][/dim]")
    assert helps["async_checkpoint"].endswith(r"\[default: on][/dim]")
    assert helps["min_lr"].endswith(r"\[default: lr/10][/dim]")  # None: worded by hand
    assert helps["nnodes"].endswith(r"\[default: 1][/dim]")  # LaunchConfig's
    assert "default" not in helps["untied"] and "default" not in helps["data"]
    # one place: a changed field default changes the help
    assert train_command._default_words("warmup") == str(FIELDS["warmup"].default)


def test_help_renders_the_default_brackets(monkeypatch, capsys):
    from llmtk.cli import build_command

    monkeypatch.setenv("COLUMNS", "200")
    build_command().main(["train", "--help"], prog_name="llmtk", standalone_mode=False)
    flat = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert "Optimizer steps. [default: 1000]" in flat
    assert "[default: (" not in flat and "Default " not in flat
