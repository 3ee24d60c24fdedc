"""`llmtk train --dry-run`'s per-rank memory against a real CPU run's measured allocation:
benchmarks/memory_check.py trains one step with llmtk's own Trainer (one process, or
torchrun with gloo), measures each rank's parameter shards, gradients, AdamW states and
the bytes saved for backward during one micro-step's forward, and sets the dry-run's
numbers for the same configuration beside them."""

import json

import pytest

from tests.util import env, run_module

PARTS = ("weights", "gradients", "optimizer", "activations")


def memory_check(tmp_path, nproc: int, *args: str) -> dict:
    report = tmp_path / "memory.json"
    # As modules forked from the tests' server, which has imported torch already
    # (tests/forkserver.py): torchrun, and its workers.
    script = ["benchmarks.memory_check", *args, "--json", str(report)]
    if nproc == 1:
        p = run_module(script[0], script[1:], environ=env(OMP_NUM_THREADS="1"))
    else:
        p = run_module("torch.distributed.run", ["--standalone", f"--nproc-per-node={nproc}",
                                                 "-m", *script],
                       environ=env(OMP_NUM_THREADS="1"))
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    return json.loads(report.read_text())


def assert_within(report: dict, rel: float = 0.10) -> None:
    """Every part of every rank within rel of the dry run's; under --ep a rank's
    activations against the dry run's count at that rank's own routing (the report's
    "routing": the mean plus the rows it received beyond it)."""
    for rank, measured in enumerate(report["measured"]):
        predicted = dict(report["predicted"])
        if "routing" in report:
            predicted["activations"] = report["routing"][rank]["activations"]
        for part in PARTS:
            assert measured[part] > 0
            assert measured[part] == pytest.approx(predicted[part], rel=rel), (rank, part)
        # FSDP: the whole gradients held through a step's micro-steps (none: each one's
        # backward reduce-scatters)
        if report["parallel"] == "fsdp":
            assert measured["held_gradients"] == report["predicted"]["held_gradients"] == 0


@pytest.mark.integration
@pytest.mark.parametrize("nproc,args,layout", [
    (1, [], "one process"),
    (2, ["--parallel", "fsdp"], "dp_shard 2"),
    (2, ["--tp", "2"], "tp 2"),
])
def test_dry_run_memory_is_the_measured_per_rank_memory(tmp_path, nproc, args, layout):
    """fp32, the tiny preset (4 layers, d_model 128): every rank's weights, gradients,
    optimizer states and activations within 10% of the dry-run's row (they agree to the
    byte: the dry-run uses the llmtk model's own activation accounting; Korthikanti's
    block, which it used before, was 32% under on one process and 38% under on tp 2)."""
    r = memory_check(tmp_path, nproc, *args)
    assert r["layout"] == layout and len(r["measured"]) == nproc
    assert_within(r)
    if nproc == 2:  # the two ranks of these layouts hold the same amounts
        assert r["measured"][0] == r["measured"][1]


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("nproc,args", [
    (1, ["--dtype", "bf16"]),
    (2, ["--parallel", "fsdp", "--dtype", "bf16", "--activation-checkpointing"]),
    (2, ["--tp", "2", "--dtype", "bf16"]),
    (2, ["--tp", "2", "--d-model", "96", "--heads", "6", "--kv-heads", "2", "--batch-size",
         "3", "--seq-len", "32"]),
    (2, ["--tp", "2", "--lora-rank", "4"]),
])
def test_dry_run_memory_under_bf16_recompute_gqa_and_lora(tmp_path, nproc, args):
    """bf16 autocast on CPU (as a GPU run trains: autocast's weight copies on one process,
    bf16 gathers under FSDP2), activation checkpointing, a grouped-query shape, and LoRA
    under tp (each adapter's half its base does not split is whole on every rank)."""
    assert_within(memory_check(tmp_path, nproc, *args))
