"""What `llmtk train` refuses before doing any work: a run directory in use, a config value
of the wrong type or out of range; and the leftovers it cleans up (stale cache temp dirs)."""

import inspect
import json
import os
import socket
import subprocess
import sys
import time
import typing

import pytest

from llmtk.commands import train as train_command
from llmtk.errors import UsageError
from llmtk.train.config import FIELDS, resolve_config, resolve_launch
from llmtk.train.lock import DirLock
from tests.util import ROOT, env, llmtk, popen_module, run_module


def write_data(tmp_path):
    path = tmp_path / "d.jsonl"
    with open(path, "w") as f:
        for i in range(40):
            f.write(json.dumps({"text": f"text number {i} " * 20}) + "\n")
    return str(path)


# ---------------------------------------------------------------- the run lock


def test_a_second_run_on_the_same_out_exits_2_naming_the_holder(tmp_path):
    out = tmp_path / "run"
    holder = DirLock(str(out))
    assert holder.acquire()
    try:
        r = llmtk("train", "--data", write_data(tmp_path), "--out", out, "--steps", "1", "-q",
                  in_process=True)
    finally:
        holder.release()
    assert r.returncode == 2, r.stderr
    assert f"--out {out}: is in use by another llmtk train (host {socket.gethostname()}, " \
           f"PID {os.getpid()})" in r.stderr.decode()
    assert sorted(os.listdir(out)) == [".lock"]  # nothing else touched


def test_the_lock_is_free_again_after_the_holder_exits(tmp_path):
    out = str(tmp_path / "run")
    code = f"from llmtk.train.lock import DirLock; assert DirLock({out!r}).acquire()"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env(), check=True)
    lock = DirLock(out)
    assert lock.acquire()  # the kernel dropped the dead holder's lock
    assert lock.holder() == f"host {socket.gethostname()}, PID {os.getpid()}"
    lock.release()


@pytest.mark.integration
@pytest.mark.slow  # two real training processes
def test_two_real_runs_on_one_out(tmp_path):
    data, out = write_data(tmp_path), str(tmp_path / "run")
    args = ["train", "--data", data, "--out", out, "--layers", "1", "--d-model", "32",
            "--heads", "2", "--seq-len", "32", "--steps", "6", "--batch-size", "2", "-q"]
    # The first run holds after step 1 until the second is done: on a busy machine a
    # fixed delay ran out before the second process had started (it then trained too).
    release = tmp_path / "release"
    first = popen_module("tests.train_driver", args,
                         env(LLMTK_TEST_FAULTS=json.dumps({"hold": str(release)})),
                         stderr_pipe=True)
    deadline = time.time() + 120
    while not os.path.exists(os.path.join(out, "metrics.jsonl")) and time.time() < deadline:
        time.sleep(0.05)
    try:
        second = run_module("llmtk", args)
    finally:
        release.touch()
    assert second.returncode == 2
    assert f"(host {socket.gethostname()}, PID {first.pid})".encode() in second.stderr
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err.decode()
    assert not os.path.exists(os.path.join(out, "metrics.jsonl.old"))


# ---------------------------------------------------------------- config values


@pytest.mark.parametrize("line, message", [
    ("steps = 2.7", "steps: must be an integer, got 2.7"),
    ("steps = 1e400", "steps: must be an integer, got inf"),
    ('steps = "5"', "steps: must be an integer, got '5'"),
    ("steps = 0", "steps: must be >= 1, got 0"),
    ('quiet = "no"', "quiet: must be true or false, got 'no'"),
    ("batch-size = 2.5", "batch-size: must be an integer, got 2.5"),
    ("lr = nan", "lr: must be a finite number, got nan"),
    ("lr = 1e400", "lr: must be a finite number, got inf"),
    ("beta2 = 2", "beta2: must be in [0.0, 1.0), got 2"),
    ("prompt = 7", "prompt: must be a string, got 7"),
    ("val-data = 3", "val-data: must be a string or a list of strings, got 3"),
    ('schedule = "linear"', "schedule: must be one of cosine, wsd, constant, got 'linear'"),
    ("nproc-per-node = 0", "nproc-per-node: must be >= 1, got 0"),
    ("compile = 1", "compile: must be true or false, got 1"),
])
def test_toml_values_are_type_and_range_checked(tmp_path, line, message):
    toml = tmp_path / "run.toml"
    toml.write_text(f'data = "d.jsonl"\nout = "o"\n{line}\n')
    with pytest.raises(UsageError) as e:
        resolve_config({}, str(toml))
    assert str(e.value) == f"{toml}: {message}"


@pytest.mark.parametrize("flag, value, message", [
    ("--lr", "nan", "--lr: must be a finite number, got nan"),
    ("--beta2", "2", "--beta2: must be in [0.0, 1.0), got 2.0"),
    ("--steps", "0", "--steps: must be >= 1, got 0"),
    ("--val-fraction", "1", "--val-fraction: must be in [0.0, 1.0), got 1.0"),
])
def test_flags_are_range_checked_before_any_work(tmp_path, flag, value, message):
    out = tmp_path / "run"
    r = llmtk("train", "--data", write_data(tmp_path), "--out", out, flag, value,
              in_process=True)
    assert r.returncode == 2 and r.stderr.decode() == f"llmtk: error: {message}\n"
    assert not out.exists()  # refused before anything was created


def test_toml_error_through_the_command_is_one_line_exit_2(tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text("steps = 2.7\n")
    p = subprocess.run([sys.executable, "-m", "llmtk", "train", "--config", str(toml)],
                       cwd=ROOT, env=env(), capture_output=True)
    assert p.returncode == 2
    assert p.stderr.decode() == f"llmtk: error: {toml}: steps: must be an integer, got 2.7\n"


def test_the_options_are_built_from_the_fields_and_a_field_without_words_fails(monkeypatch):
    """The typer parameters are generated from TrainConfig/LaunchConfig (name, type, default
    None) and train_command.OPTIONS (the words): a field without an OPTIONS entry, or an
    entry without a field, stops the command from being built at all."""
    from llmtk.train.config import RULES

    assert set(train_command.OPTIONS) == set(FIELDS) | {"config"}
    assert set(RULES) <= set(FIELDS)
    params = inspect.signature(train_command.command).parameters
    assert list(params) == list(train_command.OPTIONS)
    # a choice-valued rule is a click choice of exactly its values
    hints = typing.get_type_hints(train_command.command, include_extras=True)
    schedule = typing.get_args(hints["schedule"])[0]
    enum_type = next(a for a in typing.get_args(schedule) if a is not type(None))
    assert [e.value for e in enum_type] == list(RULES["schedule"].choices)
    for name in ("device", "dtype", "parallel", "pp_schedule", "grad_stats", "template",
                 "checkpoint_format", "on_nan", "on_spike", "rdzv_backend"):
        assert hasattr(RULES[name], "choices"), name
    missing = {k: v for k, v in train_command.OPTIONS.items() if k != "warmup"}
    monkeypatch.setattr(train_command, "OPTIONS", missing)
    with pytest.raises(TypeError, match="warmup"):
        train_command._parameters()
    monkeypatch.setattr(train_command, "OPTIONS", {
        **train_command.OPTIONS, "warmup": train_command.Opt("x", "y"),
        "no_such_field": train_command.Opt("x", "y")})
    with pytest.raises(TypeError, match="no_such_field"):
        train_command._parameters()


def test_launch_options_come_from_toml_too(tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text('nproc-per-node = 8\nrdzv-timeout = 1200\nrdzv-endpoint = "h:29500"\n'
                    '[train]\nmax_restarts = 2\n')
    launch = resolve_launch({"max_restarts": None, "nnodes": 2}, str(toml))
    assert (launch.nproc_per_node, launch.nnodes, launch.max_restarts, launch.rdzv_timeout) \
        == (8, 2, 2, 1200)


# ---------------------------------------------------------------- leftovers and data loading


def test_stale_cache_temp_dirs_of_dead_processes_are_swept(tmp_path):
    from llmtk.text.tokenizer import ByteTokenizer
    from llmtk.train.data import cache as D

    root = tmp_path / "cache"
    host = socket.gethostname()
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = root / f".tmp-{'a' * 16}-{host}-{dead.pid}"
    live = root / f".tmp-{'b' * 16}-{host}-{os.getpid()}"
    other_host = root / f".tmp-{'c' * 16}-elsewhere-{dead.pid}"
    for d in (stale, live, other_host):
        d.mkdir(parents=True)
    D.build_cache([write_data(tmp_path)], [], ByteTokenizer(), str(root))
    assert not stale.exists() and live.exists() and other_host.exists()


@pytest.mark.parametrize("data", ["empty", "bad"])
def test_a_failed_start_leaves_nothing_behind(tmp_path, data):
    """Empty data, or a bad line after a good one: no run folder, lock, cache or temp dir
    (and in a run folder that was there, nothing new)."""
    src = tmp_path / f"{data}.jsonl"
    src.write_text("" if data == "empty" else '{"text": "ok"}\nnot json\n')
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    for out in (tmp_path / "new" / "run", kept):
        r = llmtk("train", "--data", src, "--out", out, "--model", "tiny", "--steps", "1", "-q",
                  in_process=True)
        assert r.returncode == 1, r.stderr
        assert r.stderr.decode().startswith(f"llmtk: error: {src}")
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{data}.jsonl", "kept"]
    assert [p.name for p in kept.iterdir()] == ["notes.txt"]


@pytest.mark.parametrize("threaded", [False, True])
def test_prefetcher_gives_the_samplers_batches_in_order(tmp_path, threaded):
    from llmtk.text.tokenizer import ByteTokenizer
    from llmtk.train.data import cache as D

    d = D.build_cache([write_data(tmp_path)], [], ByteTokenizer(), str(tmp_path / "c"))
    sampler = D.Sampler(D.open_cache(d)[0].windows(16), 3, 1, 0, seed=1)
    pre = D.Prefetcher(sampler, 3, "cpu", threaded=threaded)
    try:
        for pos in (0, 3, 6, 9, 30, 33):  # a jump (rollback-like) restarts the thread
            x, y = pre.get(pos)
            rx, ry = sampler.batch(pos)
            assert (x == rx).all() and (y == ry).all()
    finally:
        pre.close()


# ---------------------------------------------------------------- web pages are not text


def _pages(tmp_path, n_html: int, n_text: int):
    """JSON Lines of crawled pages (HTML as fetched) mixed with plain-text documents."""
    from tests.warc_fixtures import page

    path = tmp_path / "crawl.jsonl"
    with open(path, "w") as f:
        for i in range(n_text):
            f.write(json.dumps({"text": f"plain text number {i} " * 20}) + "\n")
        for i in range(n_html):
            f.write(json.dumps({"text": page(f"Page {i}", "words " * 30)}) + "\n")
    return str(path)


def test_train_refuses_web_pages_before_step_1(tmp_path):
    data, out = _pages(tmp_path, n_html=30, n_text=10), tmp_path / "run"
    r = llmtk("train", "--data", data, "--out", out, "--steps", "1", "-q", in_process=True)
    assert r.returncode == 1
    assert r.stderr.decode() == (
        f"llmtk: error: {data}:11: these are web pages (30 of the first 40 documents are "
        f"HTML): run `llmtk clean` first to extract their text, or pass --allow-html to "
        f"train on the markup\n")
    assert not out.exists()  # no run directory, no cache, no lock left behind


def test_train_allow_html_trains_on_the_markup(tmp_path):
    data, out = _pages(tmp_path, n_html=30, n_text=10), tmp_path / "run"
    r = llmtk("train", "--data", data, "--out", out, "--steps", "1", "-q", "--allow-html",
              "--batch-size", "1", "--seq-len", "32", "--threads", "1", in_process=True)
    assert r.returncode == 0, r.stderr
    assert os.path.exists(out / "checkpoints" / "step-0000001" / "COMPLETE")


def test_train_takes_a_corpus_with_a_few_html_files(tmp_path):
    """A code corpus holds some HTML files: fewer than half of the documents is no crawl."""
    data, out = _pages(tmp_path, n_html=5, n_text=40), tmp_path / "run"
    r = llmtk("train", "--data", data, "--out", out, "--steps", "1", "-q",
              "--batch-size", "1", "--seq-len", "32", "--threads", "1", in_process=True)
    assert r.returncode == 0, r.stderr


def test_train_tokenize_refuses_a_web_archive(tmp_path):
    from tests.warc_fixtures import members, page, record

    warc = tmp_path / "crawl.warc.gz"
    warc.write_bytes(members([record("response", f"https://example.org/{i}",
                                     page(f"Page {i}", "words " * 30).encode())
                              for i in range(3)])[0])
    r = llmtk("train", "tokenize", warc, "-o", tmp_path / "tokens", "-q", in_process=True)
    assert r.returncode == 1
    err = r.stderr.decode()
    assert err.startswith(f"llmtk: error: {warc}:") and "these are web pages (3 of the " \
        "first 3 documents are HTML): run `llmtk clean` first" in err
    assert not (tmp_path / "tokens" / "part-00000-of-00001").exists()


def test_eval_every_without_validation_data_warns_at_start(tmp_path):
    r = llmtk("train", "--data", write_data(tmp_path), "--out", tmp_path / "run", "--steps",
              "2", "--eval-every", "1", "--warmup", "0", "--batch-size", "1", "--seq-len",
              "32", "--threads", "1", in_process=True)
    assert r.returncode == 0, r.stderr
    assert "warning: --eval-every 1 evaluates nothing: there is no validation data" \
        in r.stderr.decode()


def test_a_file_where_the_checkpoints_go_is_one_line(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "checkpoints").write_text("")
    r = llmtk("train", "--data", write_data(tmp_path), "--out", out, "--steps", "1", "-q",
              "--batch-size", "1", "--seq-len", "32", "--threads", "1", in_process=True)
    assert r.returncode == 1
    assert r.stderr.decode() == (f"llmtk: error: {out}/checkpoints: is not a directory; the "
                                 f"run keeps its checkpoints there: move it away or choose "
                                 f"another --out\n")
