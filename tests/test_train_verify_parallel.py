"""`llmtk train verify` on every checkpoint layout the multi-process tests write (DDP,
FSDP2, HSDP, tp, pp): the recompute runs in the run's own layout (torchrun, gloo) and
matches the log bit for bit; one changed byte in any of its files is named. And a run
killed with all its processes is restarted at once without being refused by its lock.
Integration tier: real processes, a few seconds each.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.train_runs import (
    TINY,
    run_train,
    train_corpus,  # noqa: F401 (the corpus fixture)
)
from tests.util import ROOT, env, llmtk

pytestmark = pytest.mark.integration

LAYOUTS = {
    "ddp": ["--batch-size", "2", "--nproc-per-node", "2"],
    "fsdp2": ["--batch-size", "2", "--nproc-per-node", "2", "--parallel", "fsdp"],
    "hsdp": ["--batch-size", "1", "--nproc-per-node", "4", "--dp-replicate", "2"],
    "tp": ["--batch-size", "4", "--nproc-per-node", "2", "--tp", "2"],
    "pp": ["--batch-size", "2", "--nproc-per-node", "2", "--pp", "2", "--grad-accum", "2"],
}


def flip_byte(path):
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x01
    with open(path, "wb") as f:
        f.write(data)


def files_of(step_dir):
    return sorted(os.path.relpath(os.path.join(base, n), step_dir)
                  for base, _, names in os.walk(step_dir) for n in names)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_verify_recomputes_in_the_runs_layout_and_names_a_changed_byte(corpus, tmp_path,
                                                                        layout):
    out = str(tmp_path / layout)
    run_train(corpus, out, "--steps", "3", "--checkpoint-every", "2", *LAYOUTS[layout])
    # The newest checkpoint (step 3) of the finished run: step 3 retrained from step 2's
    # in the run's layout; its logged loss and the whole state compared bit for bit.
    r = llmtk("train", "verify", out)
    err = r.stderr.decode()
    assert r.returncode == 0, err[-3000:]
    assert ("step 3 retrained from step-0000002: its logged loss and the model and "
            "optimizer state equal it bit for bit") in err
    step_dir = os.path.join(out, "checkpoints", "step-0000003")
    for name in files_of(step_dir):
        path = os.path.join(step_dir, name)
        saved = open(path, "rb").read()
        flip_byte(path)
        r = llmtk("train", "verify", out, "--checksums-only", in_process=True)
        assert r.returncode == 1 and f"{step_dir}: {name} does not match its " in \
            r.stderr.decode(), (name, r.stderr.decode())
        with open(path, "wb") as f:
            f.write(saved)


def _children(pid):
    """The PIDs whose parent is `pid` (torchrun's workers)."""
    found = []
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{p}/stat") as f:
                if p.isdigit() and int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(p))
        except (OSError, IndexError, ValueError):
            continue
    return found


def test_a_run_killed_with_all_its_processes_restarts_at_once(corpus, tmp_path):
    """SIGKILL to the launcher and both workers (what Slurm or a container runtime does to
    a job), then the same command at once. A process of the killed run still exiting
    holds the run lock a while (here a child of rank 0 that shares its files and outlives
    it by 20 s: the test's stand-in for a process whose exit is slow, as a CUDA context's
    teardown is); the restart waits for it instead of being refused (exit 2, before)."""
    out = str(tmp_path / "run")
    args = ["--data", corpus["data"], "--cache-dir", corpus["cache"], "--out", out,
            *TINY, "--batch-size", "2", "--parallel", "fsdp", "--checkpoint-every", "2"]
    first = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         "-m", "tests.train_driver", "train", *args, "--steps", "100000"],
        cwd=ROOT, env=env(LLMTK_TEST_FAULTS=json.dumps({"linger_child": 20})),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    latest = os.path.join(out, "checkpoints", "latest")
    deadline = time.time() + 180
    while not os.path.exists(latest) and time.time() < deadline:
        time.sleep(0.1)
    assert os.path.exists(latest)
    workers = _children(first.pid)
    assert len(workers) == 2
    for pid in [first.pid, *workers]:
        os.kill(pid, signal.SIGKILL)
    first.wait()
    step = int(open(latest).read().strip().split("-")[1])
    r = llmtk("train", *args, "--steps", str(step + 2), "--nproc-per-node", "2", real=True)
    err = r.stderr.decode()
    assert r.returncode == 0, err[-3000:]
    assert "is gone; waiting up to 30 s for its processes to let go of" in err
