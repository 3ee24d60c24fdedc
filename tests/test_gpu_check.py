"""benchmarks/gpu_check.py: --layout's layout and, on a machine without GPUs, one line and
nothing recorded (its GPU runs need a GPU node: docs/train.md); --cpu-smoke end to end."""

import json
import subprocess
import sys

import pytest

from benchmarks.gpu_check import parse_layout, run_train
from tests.util import ROOT, env, run_module


def test_layout_names_are_the_train_flags():
    assert parse_layout("tp2") == {"tp": 2, "pp": 1, "cp": 1, "dp_shard": 1}
    assert parse_layout("tp2xpp2") == {"tp": 2, "pp": 2, "cp": 1, "dp_shard": 1}
    assert parse_layout("FSDP4xTP2") == {"tp": 2, "pp": 1, "cp": 1, "dp_shard": 4}
    assert parse_layout("fsdp2xcp2xtp2") == {"tp": 2, "pp": 1, "cp": 2, "dp_shard": 2}
    for bad in ("tp", "tp0", "dp2", "tp2x", "cp"):
        with pytest.raises(ValueError, match="expected parts like tp2"):
            parse_layout(bad)


def test_without_gpus_it_says_so_and_records_nothing(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available() and torch.cuda.device_count() >= 8:
        pytest.skip("this machine has the GPUs: the layout would run")
    report = tmp_path / "layout.json"
    p = run_module("benchmarks.gpu_check", ["--layout", "fsdp4xtp2", "--json", str(report)],
                   environ=env())
    err = p.stderr.decode().strip().splitlines()
    assert p.returncode == 1 and len(err) == 1, p.stderr
    assert err[0].startswith("gpu_check --layout fsdp4xtp2: needs 8 CUDA GPUs on this node")
    assert err[0].endswith("nothing measured, nothing recorded")
    assert not report.exists()


def test_a_failed_layout_run_keeps_the_worker_messages(tmp_path):
    # train's last line says only that a worker failed; the reason is the worker's
    # traceback above it, which the report must carry (a GPU run cannot be repeated)
    worker = ("import sys\n"
              "print('worker 0: ModuleNotFoundError: No module named zlib_ng', file=sys.stderr)\n"
              "print('llmtk: error: training failed: worker exit status [1]', file=sys.stderr)\n"
              "sys.exit(1)\n")
    failure = run_train([sys.executable, "-c", worker], str(tmp_path / "run"))
    assert failure["error"] == "llmtk: error: training failed: worker exit status [1]"
    assert failure["worker_messages"][0].endswith("No module named zlib_ng")
    assert "No module named zlib_ng" in (tmp_path / "run" / "stderr.log").read_text()
    assert run_train([sys.executable, "-c", "pass"], str(tmp_path / "ok")) is None
    assert not (tmp_path / "ok").exists()


@pytest.mark.parametrize("name,mode,doc_mask", [
    ("pp2", "eager", False), ("tp2xpp2", "eager", False), ("fsdp4xtp2", "eager", False),
    ("cp2", "compile", True), ("fsdp2xcp2xtp2", "compile", False)])
def test_the_launched_layout_is_one_train_accepts(tmp_path, name, mode, doc_mask):
    """The `llmtk train` command --layout launches, planned by --dry-run (which checks a
    layout as a launch does): a pipeline needs a micro-step per stage at least (1F1B), so
    pp layouts accumulate; the prediction prices the same global batch. cp layouts pass
    --cp (compiled, and with --doc-mask: accepted, not refused)."""
    import argparse

    from benchmarks.gpu_check import grad_accum_for, train_command
    from tests.util import llmtk

    layout = parse_layout(name)
    args = argparse.Namespace(seq_len=256, batch_size=2, steps=5, warmup=1, dtype="auto",
                              doc_mask=doc_mask)
    cmd = train_command(args, layout, "tiny", mode, "corpus.jsonl", str(tmp_path / "run"))
    assert cmd[:3] == ["-m", "llmtk", "train"]
    accum = grad_accum_for(layout)
    assert accum >= layout["pp"] and f"--grad-accum {accum}" in " ".join(cmd)
    assert ("--doc-mask" in cmd) == doc_mask
    n = layout["tp"] * layout["pp"] * layout["cp"] * layout["dp_shard"]
    p = llmtk(*cmd[2:], "--dry-run", in_process=True)
    assert p.returncode == 0, p.stderr
    out = p.stdout.decode()
    assert f"{n} processes (1 x {n})" in out
    if layout["cp"] > 1:
        assert f"cp {layout['cp']}" in out


def test_the_cp_layout_is_predicted_with_its_key_value_gather():
    """--layout cp2's prediction (llmtk estimate's step-time model for an H100 node) has
    the K/V all-gather's time; fsdp2, the same two GPUs without cp, has none."""
    import argparse

    from benchmarks.gpu_check import predict_layout

    args = argparse.Namespace(seq_len=8192, batch_size=1, dtype="auto", mfu=0.4)
    cp = predict_layout(args, "1b", parse_layout("cp2"), "NVIDIA H100 80GB HBM3", 8)
    dp = predict_layout(args, "1b", parse_layout("fsdp2"), "NVIDIA H100 80GB HBM3", 8)
    assert cp["cp_s"] > 0 and dp["cp_s"] == 0
    assert cp["tokens_per_s_per_gpu"] > 0 and cp["step_s"] > 0


def test_doc_mask_needs_a_layout():
    p = run_module("benchmarks.gpu_check", ["--doc-mask"], environ=env())
    assert p.returncode == 2 and b"--doc-mask: only with --layout" in p.stderr


@pytest.mark.slow  # torch.compile on CPU (inductor) takes a while
def test_gpu_check_cpu_smoke(tmp_path):
    """benchmarks/gpu_check.py runs end to end (tiny model, CPU, eager and compile)."""
    report = tmp_path / "gpu_check.json"
    # Inductor compiles in the process: a pool of compile workers (each importing torch)
    # costs more than it saves on 2 cores for these few kernels.
    p = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--cpu-smoke", "--json",
                        str(report)], cwd=ROOT, env=env(TORCHINDUCTOR_COMPILE_THREADS="1"),
                       capture_output=True, timeout=1200)
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    results = json.loads(report.read_text())["results"]
    assert [r["compile"] for r in results] == [False, True]
    for r in results:
        assert r["tokens_per_s"] > 0 and r["plain_tokens_per_s"] > 0
        assert r["checkpoint_bytes"] > 0 and r["checkpoint_s"] >= 0
