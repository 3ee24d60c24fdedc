"""Pieces of `llmtk train` on their own: tokenizers, metrics schema, token cache,
sampler, config resolution, schedule, launcher, usage errors."""

import json
import math
import os

import pytest

from llmtk.errors import DataError, UsageError
from llmtk.io.metrics import decode_row, encode_row, read_metrics, truncate_after
from llmtk.text.tokenizer import ByteTokenizer, load_tokenizer, sample_texts, train_bpe
from llmtk.train.config import TrainConfig, resolve_config, resolve_launch, section
from llmtk.train.launch import torchrun_argv
from llmtk.train.optim import OptimSpec, lr_at
from tests.util import llmtk

TEXTS = ["Hello, world. " * 5, "Grüße aus Köln — 東京 and Москва.", "def f(x):\n    return x\n"]


def write_jsonl(path, texts):
    with open(path, "w") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": i, "text": t}) + "\n")
    return str(path)


# ---------------------------------------------------------------- tokenizers


def test_byte_tokenizer_round_trips_any_language():
    tok = load_tokenizer(None)
    assert isinstance(tok, ByteTokenizer) and tok.vocab_size == 257 and tok.eos_id == 256
    for text in TEXTS:
        ids = tok.encode(text)
        assert ids == list(text.encode("utf-8"))
        assert tok.decode(ids + [tok.eos_id]) == text


def test_bpe_train_save_load_round_trip(tmp_path):
    out = str(tmp_path / "tok.json")
    size = train_bpe(iter(TEXTS * 20), 300, out, min_frequency=1)
    assert size <= 300 and os.path.exists(out) and not os.path.exists(out + ".tmp")
    tok = load_tokenizer(out)
    assert tok.vocab_size == size and tok.eos_token == "<|endoftext|>"
    for text in TEXTS:
        ids = tok.encode(text)
        assert tok.decode(ids) == text
        assert tok.eos_id not in ids
    assert len(tok.encode(TEXTS[0])) < len(TEXTS[0].encode())  # merges learned
    assert tok.fingerprint() == load_tokenizer(out).fingerprint()


def test_bad_tokenizer_files(tmp_path):
    with pytest.raises(UsageError, match="cannot read"):
        load_tokenizer(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(DataError, match="not a tokenizer.json"):
        load_tokenizer(str(bad))


def test_train_tokenizer_command(tmp_path):
    data = write_jsonl(tmp_path / "d.jsonl", TEXTS * 30)
    out = tmp_path / "tok.json"
    p = llmtk("train", "tokenizer", "--data", data, "--vocab-size", "280", "-o", str(out),
              in_process=True)
    assert p.returncode == 0, p.stderr
    assert b"documents" in p.stderr and b"90" in p.stderr
    assert json.loads(out.read_text())["model"]["type"] == "BPE"
    # stdin works too, and the result is deterministic
    out2 = tmp_path / "tok2.json"
    p = llmtk("train", "tokenizer", "-o", str(out2), "--vocab-size", "280", "-q",
              input=open(data, "rb").read())
    assert p.returncode == 0 and p.stderr == b""
    assert out.read_bytes() == out2.read_bytes()
    p = llmtk("train", "tokenizer", "--data", data, "--vocab-size", "100", "-o", str(out),
              in_process=True)
    assert p.returncode == 2 and b"--vocab-size" in p.stderr


def test_train_tokenizer_on_a_bounded_sample(tmp_path):
    import xxhash

    texts = [f"{t} {i}" for i, t in enumerate(TEXTS * 30)]
    size = lambda t: len(t.encode())  # noqa: E731
    # the sample: the longest run of smallest-hash documents within the bound, in hash
    # order, whatever the input order
    by_hash = sorted(texts, key=lambda t: xxhash.xxh64_intdigest(t.encode()))
    n = next(i for i in range(len(by_hash) + 1)
             if i == len(by_hash) or sum(map(size, by_hash[:i + 1])) > 1000)
    assert 0 < n < len(texts)
    assert sample_texts(texts, 1000) == sample_texts(reversed(texts), 1000) == by_hash[:n]
    data = write_jsonl(tmp_path / "d.jsonl", texts)
    out = tmp_path / "tok.json"
    p = llmtk("train", "tokenizer", "--data", data, "--vocab-size", "280", "-o", str(out),
              "--sample-bytes", "1000", in_process=True)
    assert p.returncode == 0, p.stderr
    assert f"a sample of {n} of 90 documents".encode() in p.stderr
    p = llmtk("train", "tokenizer", "--data", data, "--sample-bytes", "0", "-o", str(out),
              in_process=True)
    assert p.returncode == 2 and b"--sample-bytes" in p.stderr


# ---------------------------------------------------------------- metrics


def test_metrics_are_strict_json_and_read_back(tmp_path):
    row = {"step": 3, "loss": math.nan, "grad_norm": math.inf, "lr": -math.inf, "mfu": None,
           "bad_params": ["a.weight"]}
    line = encode_row(row)
    assert line.endswith(b"\n")
    assert json.loads(line) == {"step": 3, "loss": "NaN", "grad_norm": "Infinity",
                                "lr": "-Infinity", "mfu": None, "bad_params": ["a.weight"]}
    back = decode_row(line)
    assert math.isnan(back["loss"]) and back["grad_norm"] == math.inf and back["mfu"] is None
    # Python's bare tokens are accepted too.
    assert math.isnan(decode_row('{"step": 1, "loss": NaN}')["loss"])
    path = tmp_path / "m.jsonl"
    path.write_bytes(line + b'{"step": 4, "loss": 1.5}\n' + b"[1]\n")
    with pytest.raises(ValueError, match=":3: expected a JSON object"):
        list(read_metrics(str(path)))


def test_truncate_after_drops_redone_steps_and_torn_lines(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b"".join(encode_row({"step": s, "loss": 1.0}) for s in range(1, 6))
                     + b'{"step": 6, "lo')
    assert truncate_after(str(path), 3) == 3
    assert [r["step"] for r in read_metrics(str(path))] == [1, 2, 3]


# ---------------------------------------------------------------- cache and sampler


def test_cache_packs_docs_with_eos_and_is_reused(tmp_path):
    import numpy as np

    from llmtk.train.data import cache as D

    src = write_jsonl(tmp_path / "d.jsonl", TEXTS)
    tok = ByteTokenizer()
    root = str(tmp_path / "cache")
    d1 = D.build_cache([src], [], tok, root)
    train, _val = D.open_cache(d1)  # a one-task token dataset
    assert train.meta["dtype"] == "uint16" and train.docs == 3 and len(train.parts) == 1
    tokens = np.fromfile(os.path.join(d1, "train", "part-00000-of-00001", "tokens.bin"),
                         dtype=np.uint16).tolist()
    expected = []
    for t in TEXTS:
        expected += list(t.encode()) + [256]
    assert tokens == expected
    mtime = os.path.getmtime(os.path.join(d1, "train", "meta.json"))
    assert D.build_cache([src], [], tok, root) == d1  # reused, not rebuilt
    assert os.path.getmtime(os.path.join(d1, "train", "meta.json")) == mtime
    # A changed input gets a new cache.
    write_jsonl(tmp_path / "d.jsonl", TEXTS + ["more text"])
    assert D.build_cache([src], [], tok, root) != d1


def test_val_fraction_split_is_stable_and_disjoint(tmp_path):
    from llmtk.train.data import cache as D

    texts = [f"document number {i} " * 3 for i in range(200)]
    src = write_jsonl(tmp_path / "d.jsonl", texts)
    d = D.build_cache([src], [], ByteTokenizer(), str(tmp_path / "c"), val_fraction=0.2)
    train, val = D.open_cache(d)
    assert train.docs + val.docs == 200
    assert 20 <= val.docs <= 60
    d2 = D.build_cache([src], [], ByteTokenizer(), str(tmp_path / "c2"), val_fraction=0.2)
    assert D.open_cache(d2)[1].parts[0].manifest == val.parts[0].manifest


def test_bad_line_names_file_and_line(tmp_path):
    from llmtk.train.data import cache as D

    src = tmp_path / "d.jsonl"
    src.write_text('{"text": "ok"}\n{"text": broken}\n')
    with pytest.raises(DataError, match=r"d.jsonl:2: malformed JSON"):
        D.build_cache([str(src)], [], ByteTokenizer(), str(tmp_path / "c"))
    with pytest.raises(UsageError, match="stdin"):
        D.build_cache(["-"], [], ByteTokenizer(), str(tmp_path / "c"))


def test_sampler_ranks_partition_the_global_batch(tmp_path):
    from llmtk.train.data import cache as D

    src = write_jsonl(tmp_path / "d.jsonl", [f"text {i} " * 10 for i in range(50)])
    d = D.build_cache([src], [], ByteTokenizer(), str(tmp_path / "c"))
    w = D.open_cache(d)[0].windows(16)
    one = D.Sampler(w, 4, 1, 0, seed=7)
    r0, r1 = D.Sampler(w, 2, 2, 0, seed=7), D.Sampler(w, 2, 2, 1, seed=7)
    for pos in (0, 4, len(w) - 2, 3 * len(w) + 8):  # across epochs too
        x, y = one.batch(pos)
        x0, y0 = r0.batch(pos)
        x1, y1 = r1.batch(pos)
        assert x.shape == (4, 16) and x.dtype.is_floating_point is False
        assert (x[:2] == x0).all() and (x[2:] == x1).all()
        assert (x[:, 1:] == y[:, :-1]).all()  # targets are inputs shifted by one
    # A different epoch is a different order; the same seed the same order.
    assert not (one.batch(0)[0] == one.batch(len(w))[0]).all()
    assert (D.Sampler(w, 4, 1, 0, seed=7).batch(8)[0] == one.batch(8)[0]).all()


# ---------------------------------------------------------------- config, schedule, launch


def test_toml_config_then_flags_win(tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text('data = "a.jsonl"\nout = "runs/x"\nbatch-size = 16\n'
                    '[train]\nlr = 1e-3\nsteps = 50\n')
    cfg = resolve_config({"steps": 70, "lr": None}, str(toml))
    assert cfg.data == ["a.jsonl"] and cfg.batch_size == 16 and cfg.lr == 1e-3
    assert cfg.steps == 70  # the flag wins
    toml.write_text('data = "a"\nout = "b"\nbatch_sise = 3\n')
    with pytest.raises(UsageError, match="run.toml: batch_sise: unknown key"):
        resolve_config({}, str(toml))
    # the domain names the key; the command words it as the flag (test_train_guards)
    with pytest.raises(UsageError, match="^schedule: must be one of"):
        resolve_config({"data": ["a"], "out": "b", "schedule": "linear"}, None)
    with pytest.raises(UsageError, match="^data: is required"):
        resolve_config({"out": "b"}, None)


def test_lr_schedules():
    cfg = section(OptimSpec, TrainConfig(lr=1.0, min_lr=0.1, warmup=10, steps=110))
    assert lr_at(0, cfg) == pytest.approx(0.1) and lr_at(9, cfg) == pytest.approx(1.0)
    assert lr_at(10, cfg) == pytest.approx(1.0)
    assert lr_at(60, cfg) == pytest.approx(0.55)  # half way down the cosine
    assert lr_at(109, cfg) == pytest.approx(0.1, abs=1e-3)
    wsd = section(OptimSpec, TrainConfig(lr=1.0, min_lr=0.0, warmup=10, steps=110,
                                         schedule="wsd", decay_fraction=0.1))
    assert lr_at(50, wsd) == 1.0 and lr_at(98, wsd) == 1.0
    # 11 decay steps (99..109), linear to min_lr
    assert lr_at(104, wsd) == pytest.approx(1 - 6 / 11) and lr_at(109, wsd) == pytest.approx(0.0)


def test_torchrun_argv():
    argv = torchrun_argv(nproc_per_node=8, nnodes=1, node_rank=None, rdzv_endpoint=None,
                         rdzv_id=None, rdzv_backend="c10d", max_restarts=0,
                         worker_args=["--data", "x"])
    assert argv == ["--nproc-per-node=8", "--max-restarts=0", "--standalone", "-m", "llmtk",
                    "train", "--data", "x"]
    argv = torchrun_argv(nproc_per_node=4, nnodes=2, node_rank=None, rdzv_endpoint="h:29500",
                         rdzv_id="job", rdzv_backend="c10d", max_restarts=3, worker_args=[])
    assert "--rdzv-endpoint=h:29500" in argv and "--nnodes=2" in argv
    assert "--rdzv-id=job" in argv and "--max-restarts=3" in argv
    with pytest.raises(UsageError, match="rdzv_endpoint: HOST:PORT is required with nnodes > 1"):
        resolve_launch({"nproc_per_node": 1, "nnodes": 2}, None)


@pytest.mark.parametrize("args, message", [
    (["--out", "x"], b"--data: is required"),
    (["--data", "NOPE.jsonl", "--out", "x"], b"NOPE.jsonl: no such file"),
    (["--data", "D", "--out", "x", "--model", "huge"], b"--model: must be one of"),
    (["--data", "D", "--out", "x", "--heads", "5"], b"model shape"),
    # a choice-valued option is a click choice (its values from the field's rule)
    (["--data", "D", "--out", "x", "--on-nan", "maybe"],
     b"Invalid value for '--on-nan': 'maybe' is not one of 'skip', 'stop'."),
])
def test_usage_errors_exit_2_with_one_line(tmp_path, args, message):
    data = write_jsonl(tmp_path / "d.jsonl", TEXTS)
    args = [data if a == "D" else a for a in args]
    p = llmtk("train", *args, cwd=tmp_path, in_process=True)
    assert p.returncode == 2, p.stderr
    assert message in p.stderr and b"Traceback" not in p.stderr


def test_data_error_exits_1(tmp_path):
    src = tmp_path / "d.jsonl"
    src.write_text('{"text": "ok"}\nnot json\n')
    p = llmtk("train", "--data", str(src), "--out", str(tmp_path / "r"), in_process=True)
    assert p.returncode == 1
    assert p.stderr.decode().strip().endswith("d.jsonl:2: malformed JSON (unexpected character: "
                                              "line 1 column 1 (char 0))") or \
        b"d.jsonl:2: malformed JSON" in p.stderr


def test_mfu_flops_per_token_palm_formula():
    from llmtk.compute.flops import flops_per_token_for_config
    from llmtk.compute.hardware import device_peak_flops
    from llmtk.train.model.config import PRESETS, count_params

    cfg = PRESETS["llmtk-124m"]
    n = count_params(cfg)  # tied: the embedding matrix is the output matmul, counted once
    assert flops_per_token_for_config(cfg) == pytest.approx(6 * n + 12 * 12 * 768 * 1024,
                                                            rel=1e-9)
    assert device_peak_flops("NVIDIA H100 80GB HBM3") == pytest.approx(989e12, rel=0.01)
    assert device_peak_flops("Some Unknown GPU") is None


def test_mfu_counts_each_token_once_whatever_splits_it():
    """The metrics log's `mfu` (the trainer calls compute.flops.mfu with the global batch's
    token rate and the world's GPUs): model FLOPs per GPU. Two tensor-parallel GPUs that
    each do half of every token's work at twice one GPU's rate are as utilised as it is."""
    from llmtk.compute.flops import flops_per_token_for_config, mfu
    from llmtk.train.model.config import PRESETS

    f = flops_per_token_for_config(PRESETS["llmtk-124m"], causal=True)
    peak = 989e12
    one = mfu(f, 400_000, 1, peak)
    assert one == pytest.approx(f * 400_000 / peak, rel=1e-12)
    assert 0.2 < one < 0.5  # 124M at 400k tokens/s on an H100: a plausible MFU
    assert mfu(f, 800_000, 2, peak) == pytest.approx(one, rel=1e-12)  # tp 2, twice as fast
    assert mfu(f, 400_000, 2, peak) == pytest.approx(one / 2, rel=1e-12)  # tp 2, no faster


def test_cache_with_a_bpe_tokenizer(tmp_path):
    import numpy as np

    from llmtk.train.data import cache as D

    tok_path = str(tmp_path / "tok.json")
    train_bpe(iter(TEXTS * 20), 300, tok_path, min_frequency=1)
    tok = load_tokenizer(tok_path)
    src = write_jsonl(tmp_path / "d.jsonl", TEXTS)
    d = D.build_cache([src], [], tok, str(tmp_path / "c"))
    meta = D.open_cache(d)[0].meta
    assert meta["vocab_size"] == tok.vocab_size and meta["eos_id"] == tok.eos_id
    ids = np.fromfile(os.path.join(d, "train", "part-00000-of-00001", "tokens.bin"),
                      dtype=np.uint16).tolist()
    assert ids.count(tok.eos_id) == 3 and ids[-1] == tok.eos_id
    docs, cur = [], []
    for i in ids:
        if i == tok.eos_id:
            docs.append(tok.decode(cur))
            cur = []
        else:
            cur.append(i)
    assert docs == TEXTS
    # Another tokenizer means another cache.
    assert D.build_cache([src], [], ByteTokenizer(), str(tmp_path / "c")) != d


def test_a_run_begun_on_an_older_cache_resumes_only_on_the_same_windows(tmp_path,
                                                                       monkeypatch):
    """Caches before version 3 cut windows inside each 64M-token shard, a token dataset
    across its whole stream: the same windows while every split fits in one old shard. A
    checkpoint of such a cache then names this one's data (cache_names: no warning on
    resume), and a run begun on one resumes; past one old shard (OLD_SHARD_TOKENS made
    small here) the earlier name is another data, and the run is refused with advice."""
    from llmtk.errors import ConfigError
    from llmtk.train.config import section
    from llmtk.train.data import cache as D
    from llmtk.train.data.inputs import DataSpec, open_source

    texts = [f"doc {i:03d} " * 8 for i in range(30)]  # 30 documents of 65 tokens
    src = write_jsonl(tmp_path / "d.jsonl", texts)
    tok = ByteTokenizer()
    out = tmp_path / "run"
    out.mkdir()
    cfg = TrainConfig(data=[src], out=str(out), cache_dir=str(tmp_path / "c"))
    cache = D.build_cache([src], [], tok, cfg.cache_dir)
    v2 = D.cache_key([src], [], tok.fingerprint(), "text", 0.0, version=2)
    (out / "config.json").write_text(json.dumps({"cache": str(tmp_path / "c" / v2)}))
    assert D.earlier_names(cache)[v2] is True and v2 in D.cache_names(cache)
    assert open_source(section(DataSpec, cfg), tok).key == cache

    monkeypatch.setattr(D, "OLD_SHARD_TOKENS", 29 * 65)  # the 30th document: a 2nd shard
    assert D.cache_names(cache) == {os.path.basename(cache)}
    with pytest.raises(ConfigError, match="resuming would train on other windows") as e:
        open_source(section(DataSpec, cfg), tok)
    assert e.value.key == "resume" and "--resume never" in e.value.message
    fresh = TrainConfig(data=[src], out=str(out), cache_dir=cfg.cache_dir, resume="never")
    assert open_source(section(DataSpec, fresh), tok).key == cache
    monkeypatch.setattr(D, "OLD_SHARD_TOKENS", 29 * 65 + 1)  # 30 documents in one shard
    assert v2 in D.cache_names(cache)


@pytest.mark.integration
@pytest.mark.parametrize("status", [0, 3])
def test_slurm_script_passes_srun_status_and_timeouts(tmp_path, status):
    """bin/llmtk-train.sbatch with stand-ins for srun and scontrol on PATH."""
    import subprocess

    from tests.util import ROOT

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text(
        f'#!/bin/bash\necho "$@" > {tmp_path}/srun.args\n'
        f'echo "$SRUN_CPUS_PER_TASK $OMP_NUM_THREADS" > {tmp_path}/srun.env\nexit {status}\n')
    (fake / "scontrol").write_text("#!/bin/bash\necho node1\necho node2\n")
    for f in fake.iterdir():
        f.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "n[1-2]",
           "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_ID": "42", "SLURM_CPUS_PER_TASK": "48"}
    env.pop("OMP_NUM_THREADS", None)
    p = subprocess.run(["bash", str(ROOT / "bin" / "llmtk-train.sbatch"), "run.toml", "--steps",
                        "9"], env=env, capture_output=True)
    assert p.returncode == status, p.stderr
    args = (tmp_path / "srun.args").read_text().split()
    assert args[args.index("--rdzv-timeout") + 1] == "900"
    assert args[args.index("--nccl-timeout") + 1] == "3600"
    assert args[args.index("--rdzv-endpoint") + 1] == "node1:29500"
    assert args[-2:] == ["--steps", "9"]
    # srun (Slurm >= 22.05) does not inherit the job's --cpus-per-task: the script passes it,
    # and each of the 8 workers per node gets its share of threads.
    assert "--cpus-per-task=48" in args[:args.index("train")]
    assert (tmp_path / "srun.env").read_text().split() == ["48", "6"]


def test_non_logging_steps_never_read_the_device(tmp_path, monkeypatch):
    """The loop's host sync budget: nothing is read back from the device during a step;
    settling the pending steps (once per logging row) is a single read."""
    import torch

    from llmtk.train.config import TrainConfig, section
    from llmtk.train.data.inputs import DataSpec, open_source
    from llmtk.train.runtime import Faults, setup_dist
    from llmtk.train.trainer import Trainer

    data = write_jsonl(tmp_path / "d.jsonl", TEXTS * 20)
    cfg = TrainConfig(data=[data], out=str(tmp_path / "run"), layers=1, d_model=32, heads=2,
                      seq_len=16, batch_size=2, steps=100, log_every=100, quiet=True,
                      cache_dir=str(tmp_path / "c"))
    os.makedirs(cfg.out)
    tok = ByteTokenizer()
    trainer = Trainer(cfg, setup_dist("cpu", 60), tok, open_source(section(DataSpec, cfg), tok),
                      Faults())
    st = trainer._start()
    reads = []
    for name in ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__"):
        real = getattr(torch.Tensor, name)

        def counting(self, *a, _real=real, _name=name, **k):
            reads.append(_name)
            return _real(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counting)
    for _ in range(3):
        trainer.health.pending.append(trainer._train_step(st))
    assert reads == []
    assert trainer.health.settle(st) and reads == ["tolist"]
    assert st.step == 3 and st.bad_streak == 0 and st.ema_loss > 0


def test_a_finished_worker_exits_0_after_its_atexit_handlers_and_buffered_output(tmp_path):
    """exit_worker skips the interpreter's module teardown (where gloo's threads could
    abort a finished worker) but keeps what a normal exit does: a thread is joined, atexit
    handlers run, buffered output reaches the pipe, and the status is 0."""
    import subprocess
    import sys

    marker = tmp_path / "atexit.txt"
    code = (
        "import atexit, sys, threading, time\n"
        f"atexit.register(lambda: open({str(marker)!r}, 'w').write('ran'))\n"
        "threading.Thread(target=lambda: (time.sleep(0.2), print('thread done'))).start()\n"
        "sys.stdout.write('no newline yet')\n"
        "from llmtk.train.runtime import exit_worker\n"
        "exit_worker()\n"
        "print('never')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.decode() == "no newline yetthread done\n"
    assert marker.read_text() == "ran"
