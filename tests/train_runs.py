"""What tests/test_train.py and tests/test_train_parallel.py share: the stdlib-docstring
corpus, the tiny model's flags, `run_train` and the metrics-log readers. Two files, so
that pytest-xdist (`--dist loadfile`) runs the single-process and the multi-process
tests on different workers."""

import importlib
import inspect
import json
import os
import socket

import pytest

from tests.util import LLMTK, ROOT, env, run_module  # noqa: F401 (LLMTK: for the test files)

MODULES = ["json", "os", "re", "collections", "itertools", "functools", "pathlib", "argparse",
           "subprocess", "textwrap", "string", "random", "math", "datetime", "logging", "shutil",
           "tempfile", "csv", "heapq", "bisect"]

TINY = ["--layers", "2", "--d-model", "64", "--heads", "4", "--seq-len", "64", "--warmup", "2",
        "--lr", "3e-3", "--log-every", "1", "-q"]


@pytest.fixture(scope="module", name="corpus")
def train_corpus(tmp_path_factory):
    """~420 stdlib docstrings (~300 KB of English-ish technical text) as JSONL."""
    d = tmp_path_factory.mktemp("corpus")
    path = d / "docs.jsonl"
    with open(path, "w") as f:
        for name in MODULES:
            mod = importlib.import_module(name)
            for attr, obj in inspect.getmembers(mod):
                doc = inspect.getdoc(obj)
                if doc and len(doc) > 200 and not attr.startswith("_"):
                    f.write(json.dumps({"id": f"{name}.{attr}", "text": doc}) + "\n")
    return {"data": str(path), "cache": str(d / "cache")}


def run_train(corpus, out, *args, check=True, faults=None):
    """`llmtk train` on the corpus as a real process (tests/train_driver.py with faults),
    forked from the tests' server (tests/forkserver.py). Not in this process: a step there
    measured 4-5x slower than in a fresh process (cause not found yet)."""
    argv = ["train", "--data", corpus["data"], "--cache-dir", corpus["cache"], "--out", out,
            *TINY, *args]
    p = run_module("tests.train_driver" if faults else "llmtk", argv,
                   environ=env(LLMTK_TEST_FAULTS=json.dumps(faults or {})))
    if check:
        assert p.returncode == 0, p.stderr.decode()[-3000:]
    return p


def torchrun_with_faults(corpus, out, nproc, faults, *args, restarts=0):
    """`llmtk train` under torchrun itself, each worker the fault-injecting driver
    (tests/train_driver.py): for faults that must fire inside the workers, which `llmtk
    train --nproc-per-node` would start as plain llmtk processes."""
    argv = ["--standalone", f"--nproc-per-node={nproc}",
            *([f"--max-restarts={restarts}"] if restarts else []),
            "-m", "tests.train_driver", "train", "--data", corpus["data"],
            "--cache-dir", corpus["cache"], "--out", out, *TINY, *args]
    return run_module("torch.distributed.run", argv,
                      environ=env(LLMTK_TEST_FAULTS=json.dumps(faults)))


def rows(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def nothing_half_written(out):
    """A stopped run left no file half-written: no temporary file or checkpoint folder
    (llmtk.io.atomic's TARGET.tmp-PID, checkpoints/.tmp-step-N), every checkpoint folder
    complete, every line of metrics.jsonl whole."""
    left = [os.path.join(d, n) for d, dirs, files in os.walk(out) for n in dirs + files
            if ".tmp-" in n]
    assert left == [], left
    ckpts = os.path.join(out, "checkpoints")
    for name in os.listdir(ckpts):
        if name.startswith("step-"):
            assert os.path.exists(os.path.join(ckpts, name, "COMPLETE")), name
    with open(os.path.join(out, "metrics.jsonl"), "rb") as f:
        data = f.read()
    assert data.endswith(b"\n") and all(json.loads(x) for x in data.splitlines())


def losses(out):
    return [(r["step"], r["loss"], r["grad_norm"], r["lr"], r["tokens"])
            for r in rows(out) if "loss" in r and "event" not in r]


def events(out, name):
    return [r for r in rows(out) if r.get("event") == name]


def torch_rng(run, step, rank):
    """Rank `rank`'s torch generator state as the checkpoint of `step` saved it."""
    import torch

    path = os.path.join(run, "checkpoints", f"step-{step:07d}", f"rng-{rank:05d}.pt")
    return torch.load(path, weights_only=True)["torch"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def task_files(d) -> list[str]:
    """--eval-tasks for a run: a held-out text task and a two-question choice task."""
    held = d / "held.jsonl"
    held.write_text(json.dumps({"text": "Return the number of items in the list."}) + "\n")
    mc = d / "mc.jsonl"
    mc.write_text("".join(json.dumps(r) + "\n" for r in (
        {"question": "2+2?", "choices": ["3", "4"], "answer": 1},
        {"question": "Which module reads JSON?", "choices": ["json", "csv"], "answer": 0})))
    return ["--eval-tasks", str(held), "--eval-tasks", str(mc)]


def same_samples_and_scores(ref, out, sample_steps: list[int]) -> None:
    """Run `out` sampled the same text as `ref` at sample_steps and scored the same task
    metrics (task_files' 2 tasks, 4 metrics, at each of those steps) within 1e-5."""
    samples = [[(e["step"], e["text"]) for e in events(r, "sample")] for r in (ref, out)]
    assert [s for s, _ in samples[0]] == sample_steps and samples[1] == samples[0]
    scores = [{(e["step"], e["task"], e["metric"]): e["value"] for e in events(r, "eval")}
              for r in (ref, out)]
    assert len(scores[0]) == 4 * len(sample_steps) and scores[1].keys() == scores[0].keys()
    for key, value in scores[0].items():
        assert scores[1][key] == pytest.approx(value, rel=1e-5), key



def planned(mcfg, layout, **flags):
    """The RunPlan of model `mcfg` on `layout` (FSDP2 over a mesh; enough micro-steps for
    a pipeline's schedules), with the TrainConfig `flags`."""
    from llmtk.train.config import TrainConfig
    from llmtk.train.layout.plan import RunPlan

    mesh = dict(tp=layout.tp, pp=layout.pp, dp_replicate=layout.dp_replicate,
                dp_shard=layout.dp_shard, cp=layout.cp)
    cfg = TrainConfig(**{"grad_accum": 2 * layout.pp, **mesh, **flags})
    return RunPlan.resolve(cfg, layout.world, mcfg, cuda=False)
