"""`llmtk train` across processes on CPU (gloo): DDP, FSDP2, HSDP and two-node runs match
one process; FSDP2's sharded (DCP) checkpoints resume bit-exactly and export to one file.
The launcher runs in this process (torchrun's own code), its workers are real.
"""

import json
import os
import shutil
import signal
import subprocess
import time

import pytest

from tests.train_runs import (
    LLMTK,
    TINY,
    events,
    free_port,
    losses,
    nothing_half_written,
    rows,
    run_train,
    same_samples_and_scores,
    task_files,
    torch_rng,
    torchrun_with_faults,
    train_corpus,  # noqa: F401 (the corpus fixture)
)
from tests.util import ROOT, env, llmtk, popen_module

# ---------------------------------------------------------------- parallel (gloo)


# Every layout is compared with one process in fp64 (--dtype fp64). In fp32 these runs agree to
# the last bits only for a few steps: a layout sums in another order (a row-parallel matmul
# adds two half sums, HSDP reduces in two stages), AdamW turns a rounding difference in a
# tiny gradient into a full-size update, and by step 18 one machine measured the grad norms
# 2.0e-5 apart (100+ units of fp32 rounding) where another measured 2e-7. In fp64 the same
# amplification leaves them within 5.5e-14 (measured: tp 2, HSDP, FSDP2 + LoRA), and any
# layout bug moves them by far more than 1e-3. PARITY_REL = 1e-9 is 4.5e6 units of fp64
# rounding (2^-53): the amplification seen in fp32 (x170), with room to spare 10^4 times.
PARITY_REL = 1e-9
FP64 = ["--dtype", "fp64"]


def _parallel_matches(ref, out, grad_rel=PARITY_REL, loss_rel=PARITY_REL):
    a, b = losses(ref), losses(out)
    assert [x[0] for x in a] == [x[0] for x in b]
    for (s, la, ga, lra, ta), (_, lb, gb, lrb, tb) in zip(a, b, strict=True):
        assert lb == pytest.approx(la, rel=loss_rel, abs=loss_rel / 10), s
        assert gb == pytest.approx(ga, rel=grad_rel), s
        assert (lra, ta) == (lrb, tb)


def _same_weights(run, ref):
    """The run's checkpoint (DTensors of any layout), consolidated as `train export` does,
    holds the reference run's weights."""
    import torch

    from llmtk.train import full_state_dict

    got, want = full_state_dict(run), full_state_dict(ref)
    assert got.keys() == want.keys()
    assert all(torch.allclose(got[k], want[k], atol=1e-5) for k in want)


# a sample and the task scores at the last step (they draw nothing from the run's RNG)
SAMPLED = ["--sample-every", "5", "--sample-tokens", "8", "--prompt", "def",
           "--eval-max-new-tokens", "4"]


@pytest.fixture(scope="module")
def single_ref(corpus, tmp_path_factory):
    d = tmp_path_factory.mktemp("single")
    out = str(d / "run")
    run_train(corpus, out, "--steps", "5", "--batch-size", "4", *FP64, *SAMPLED,
              *task_files(d))
    return out


def test_grad_accum_matches_a_bigger_batch(corpus, tmp_path, single_ref):
    out = str(tmp_path / "accum")
    run_train(corpus, out, "--steps", "5", "--batch-size", "2", "--grad-accum", "2", *FP64)
    _parallel_matches(single_ref, out)


@pytest.mark.integration
def test_ddp_two_processes_match_one(corpus, tmp_path, single_ref):
    out = str(tmp_path / "ddp")
    run_train(corpus, out, "--steps", "5", "--batch-size", "2", "--nproc-per-node", "2",
              *FP64)
    _parallel_matches(single_ref, out)
    assert json.load(open(os.path.join(out, "config.json")))["parallel"] == "ddp"


@pytest.mark.integration
def test_fsdp2_two_processes_match_one(corpus, tmp_path, single_ref):
    """FSDP2 over 2 processes, 2 micro-steps of 1 window each (each one's gradients
    reduce-scattered) = one process, one micro-step of 4."""
    out = str(tmp_path / "fsdp")
    run_train(corpus, out, "--steps", "5", "--batch-size", "1", "--grad-accum", "2",
              "--nproc-per-node", "2", "--parallel", "fsdp", "--checkpoint-every", "3",
              *FP64, *SAMPLED, *task_files(tmp_path))
    _parallel_matches(single_ref, out)
    # Sampling and --eval-tasks run the sharded model itself on both ranks (no whole copy
    # on rank 0, train/layout/whole.py): the one-process text and scores.
    same_samples_and_scores(single_ref, out, [5])
    # The FSDP checkpoint is a full state dict: a single process can resume it.
    resumed = str(tmp_path / "resumed")
    os.makedirs(os.path.join(resumed, "checkpoints"))
    os.rename(os.path.join(out, "checkpoints", "step-0000003"),
              os.path.join(resumed, "checkpoints", "step-0000003"))
    run_train(corpus, resumed, "--steps", "5", "--batch-size", "4", *FP64)
    after = losses(resumed)[-2:]
    assert [x[0] for x in after] == [4, 5]
    for x, y in zip(after, losses(single_ref)[-2:], strict=True):
        assert x[1] == pytest.approx(y[1], rel=PARITY_REL)


# fp32, the dtype a CPU run trains in, checked where its rounding has not been amplified:
# steps 1 and 2. Step 1's loss and gradients differ from one process only by summation
# order: the tp ranks add two half sums of each row-parallel matmul (d_model 64, FFN 192
# terms) and split the loss's log-sum-exp over the padded vocabulary (384 logits), and a
# gradient sums 4 x 64 = 256 positions; a reordered sum of n fp32 terms is within
# gamma_n = n * 2^-24 / (1 - n * 2^-24) of the exact one, 2.3e-5 for the longest (384).
# Step 2 adds step 1's AdamW update, lr * m / (sqrt(v) + eps) = lr * sign(g) at step 1 for
# every gradient well above eps, so the first update carries no relative difference of
# the gradients forward. 1e-4 is 4 x gamma_384: any layout bug (a missing or doubled
# shard, a wrong split) moves the loss or the grad norm by percent, not 1e-4. Measured on
# one machine: the losses equal, the grad norms 1.4e-7 and 1.0e-7 apart (2 fp32 units).
FP32_REL = 1e-4


@pytest.mark.integration
def test_fp32_first_steps_match_one_process_within_rounding(corpus, tmp_path):
    one, tp = str(tmp_path / "one"), str(tmp_path / "tp")
    flags = ["--steps", "2", "--batch-size", "4", "--dtype", "fp32"]
    run_train(corpus, one, *flags)
    run_train(corpus, tp, *flags, "--nproc-per-node", "2", "--tp", "2")
    _parallel_matches(one, tp, grad_rel=FP32_REL, loss_rel=FP32_REL)


@pytest.fixture(scope="module")
def hsdp_run(corpus, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("hsdp") / "run")
    run_train(corpus, out, "--steps", "5", "--batch-size", "1", "--nproc-per-node", "4",
              "--dp-replicate", "2", "--checkpoint-every", "3", "--no-async-checkpoint", *FP64)
    return out


@pytest.mark.integration
def test_hsdp_2x2_matches_one(hsdp_run, single_ref):
    """HSDP on a (dp_replicate 2, dp_shard 2) mesh: each replica's shards count once in
    the global grad norm (the all-reduced squares are divided by the 2 replicas)."""
    _parallel_matches(single_ref, hsdp_run)
    config = json.load(open(os.path.join(hsdp_run, "config.json")))
    assert config["parallel"] == "fsdp" and config["checkpoint_format"] == "dcp"
    assert config["layout"] == {"pp": 1, "dp_replicate": 2, "dp_shard": 2, "cp": 1,
                                "tp": 1, "ep": 1}
    _same_weights(hsdp_run, single_ref)  # its DCP checkpoint holds 2-D DTensors


@pytest.mark.integration
@pytest.mark.slow  # one more 2-process run
def test_hsdp_dcp_checkpoint_resumes_resharded_under_fsdp2(corpus, tmp_path, hsdp_run,
                                                           single_ref):
    """The HSDP run's DCP checkpoint (2-D DTensors) resumes under FSDP2 on 2 processes
    (a 1-D mesh) and continues the one-process loss curve."""
    resumed = str(tmp_path / "fsdp")
    os.makedirs(os.path.join(resumed, "checkpoints"))
    shutil.copytree(os.path.join(hsdp_run, "checkpoints", "step-0000003"),
                    os.path.join(resumed, "checkpoints", "step-0000003"))
    run_train(corpus, resumed, "--steps", "5", "--batch-size", "2", "--nproc-per-node", "2",
              "--parallel", "fsdp", *FP64)
    assert events(resumed, "resume")[0]["path"] == "checkpoints/step-0000003"
    after = losses(resumed)
    assert [x[0] for x in after] == [4, 5]
    for x, y in zip(after, losses(single_ref)[-2:], strict=True):
        assert x[1] == pytest.approx(y[1], rel=PARITY_REL)
        assert x[2] == pytest.approx(y[2], rel=PARITY_REL)


@pytest.mark.integration
@pytest.mark.slow
def test_two_nodes_c10d_rendezvous_match_one(corpus, tmp_path, single_ref):
    out = str(tmp_path / "nodes")
    port = free_port()
    cmd = [*LLMTK, "train", "--data", corpus["data"], "--cache-dir", corpus["cache"],
           "--out", out, *TINY, "--steps", "5", "--batch-size", "2", "--nnodes", "2",
           "--nproc-per-node", "1", "--rdzv-endpoint", f"127.0.0.1:{port}",
           "--rdzv-id", "llmtk-test", *FP64]
    nodes = [subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE) for _ in range(2)]
    for node in nodes:
        _, err = node.communicate(timeout=300)
        assert node.returncode == 0, err.decode()[-2000:]
    _parallel_matches(single_ref, out)
    assert json.load(open(os.path.join(out, "config.json")))["world_size"] == 2


# Twenty steps against one process, each layout with the same global batch of 4 windows:
# (name, the one-process flags, the layout's flags). Where fp32 drifted apart (above).
TWENTY_STEPS = [
    ("tp2", [], ["--batch-size", "4", "--nproc-per-node", "2", "--tp", "2"]),
    ("hsdp2x2", [], ["--batch-size", "1", "--nproc-per-node", "4", "--dp-replicate", "2"]),
    ("fsdp2-lora", ["--lora-rank", "4"],
     ["--batch-size", "2", "--nproc-per-node", "2", "--parallel", "fsdp", "--lora-rank", "4"]),
]


@pytest.fixture(scope="module")
def twenty_step_ref(corpus, tmp_path_factory):
    """The one-process 20-step fp64 run with these flags, run once for the module."""
    runs: dict[tuple, str] = {}

    def ref(flags: list[str]) -> str:
        if tuple(flags) not in runs:
            out = str(tmp_path_factory.mktemp("one20") / "run")
            run_train(corpus, out, "--steps", "20", "--batch-size", "4", *FP64, *flags)
            runs[tuple(flags)] = out
        return runs[tuple(flags)]
    return ref


@pytest.mark.integration
@pytest.mark.slow  # a 2- or 4-process run of 20 steps (and its one-process reference)
@pytest.mark.parametrize("single,layout", [x[1:] for x in TWENTY_STEPS],
                         ids=[x[0] for x in TWENTY_STEPS])
def test_twenty_steps_match_one_process(corpus, tmp_path, twenty_step_ref, single, layout):
    ref, out = twenty_step_ref(single), str(tmp_path / "layout")
    run_train(corpus, out, "--steps", "20", *FP64, *layout)
    assert [x[0] for x in losses(out)] == list(range(1, 21))
    _parallel_matches(ref, out)


# ---------------------------------------------------------------- tensor parallel (DTensor)

TP_ARGS = ["--steps", "5", "--batch-size", "4", "--nproc-per-node", "2", "--tp", "2", *FP64,
           "--checkpoint-every", "3", "--no-async-checkpoint"]


@pytest.fixture(scope="module")
def tp_run(corpus, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("tp") / "run")
    run_train(corpus, out, *TP_ARGS)
    return out


@pytest.mark.integration
def test_tensor_parallel_two_processes_match_one(tp_run, single_ref):
    """--tp 2: wqkv, w1, w3 split by rows, wo, w2 by columns, the norms sequence-parallel,
    the (tied) embedding and head by vocabulary rows with the loss on vocab-sharded logits:
    the same losses and grad norms as one process, and its DCP checkpoint consolidates to
    the one-process run's weights."""
    _parallel_matches(single_ref, tp_run)
    config = json.load(open(os.path.join(tp_run, "config.json")))
    assert config["layout"] == {"pp": 1, "dp_replicate": 1, "dp_shard": 1, "cp": 1,
                                "tp": 2, "ep": 1}
    _same_weights(tp_run, single_ref)


@pytest.mark.integration
@pytest.mark.slow  # one more 2-process run
def test_tensor_parallel_resumes_its_sharded_checkpoint_exactly(corpus, tmp_path, tp_run):
    out = str(tmp_path / "stopped")
    shutil.copytree(tp_run, out)
    shutil.rmtree(os.path.join(out, "checkpoints", "step-0000005"))
    with open(os.path.join(out, "checkpoints", "latest"), "w") as f:
        f.write("step-0000003\n")
    run_train(corpus, out, *TP_ARGS)
    assert events(out, "resume")[0]["path"] == "checkpoints/step-0000003"
    assert losses(out) == losses(tp_run)


def _resume_from(run, out, step=3):
    """A new run directory holding only `run`'s checkpoint at `step`."""
    name = f"step-{step:07d}"
    os.makedirs(os.path.join(out, "checkpoints"))
    shutil.copytree(os.path.join(run, "checkpoints", name),
                    os.path.join(out, "checkpoints", name))


def _continues(resumed, ref, steps=(4, 5)):
    """The resumed run logged `steps`, with the losses and grad norms of the run it was
    resumed from (the reference: the same trained weights, Adam moments and data position,
    so only the layout's rounding differs)."""
    after, want = losses(resumed), [r for r in losses(ref) if r[0] in steps]
    assert [x[0] for x in after] == list(steps)
    for x, y in zip(after, want, strict=True):
        assert x[1] == pytest.approx(y[1], rel=PARITY_REL)
        assert x[2] == pytest.approx(y[2], rel=PARITY_REL)
        assert (x[3], x[4]) == (y[3], y[4])  # lr and tokens


@pytest.mark.integration
def test_tensor_parallel_checkpoint_resumes_in_one_process(corpus, tmp_path, tp_run):
    """tp 2's DCP checkpoint (wqkv split by kv groups, Adam moments as DTensors) resumes in
    one process and continues the tp 2 run's loss curve."""
    resumed = str(tmp_path / "one")
    _resume_from(tp_run, resumed)
    run_train(corpus, resumed, "--steps", "5", "--batch-size", "4", *FP64)
    assert events(resumed, "resume")[0]["path"] == "checkpoints/step-0000003"
    _continues(resumed, tp_run)


@pytest.fixture(scope="module")
def tp_dp_run(corpus, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("tp_fsdp") / "run")
    run_train(corpus, out, "--steps", "5", "--batch-size", "2", "--nproc-per-node", "4",
              "--tp", "2", "--checkpoint-every", "3", "--no-async-checkpoint", *FP64)
    return out


@pytest.mark.integration
def test_each_data_parallel_rank_draws_its_own_random_stream(tp_dp_run):
    """Dropout (--lora-dropout) draws from each rank's torch generator, which the init
    leaves in the same state on every rank: every data-parallel rank masked its windows
    with the same masks. Each dp rank has its own stream now, shared by its tp group (whose
    ranks slice one draw): ranks 0, 1 (dp rank 0) and 2, 3 (dp rank 1) of tp 2 x dp 2."""
    import torch

    rng = [torch_rng(tp_dp_run, 3, r) for r in range(4)]
    assert torch.equal(rng[0], rng[1]) and torch.equal(rng[2], rng[3])
    assert not torch.equal(rng[0], rng[2])


@pytest.mark.integration
@pytest.mark.slow  # a 4-process run
def test_tensor_parallel_under_fsdp2_matches_one(tp_dp_run, single_ref):
    """tp 2 x dp_shard 2: fully_shard over the dp sub-mesh after tensor parallelism (2-D
    DTensors, a _StridedShard on dp: each shard counts once in the grad norm)."""
    _parallel_matches(single_ref, tp_dp_run)
    assert json.load(open(os.path.join(tp_dp_run, "config.json")))["layout"]["dp_shard"] == 2


@pytest.mark.integration
@pytest.mark.slow  # two 4-process runs
def test_tensor_parallel_checkpoint_resumes_resharded_under_fsdp2(corpus, tmp_path,
                                                                   tp_dp_run):
    """tp 2 x dp_shard 2's DCP checkpoint (2-D DTensors) resumes under FSDP2 alone over 4
    processes (dp_shard 4, no tp) and continues the tp 2 x dp_shard 2 run's curve."""
    resumed = str(tmp_path / "dp4")
    _resume_from(tp_dp_run, resumed)
    run_train(corpus, resumed, "--steps", "5", "--batch-size", "1", "--nproc-per-node", "4",
              "--parallel", "fsdp", *FP64)
    assert json.load(open(os.path.join(resumed, "config.json")))["layout"] == {
        "pp": 1, "dp_replicate": 1, "dp_shard": 4, "cp": 1, "tp": 1, "ep": 1}
    assert events(resumed, "resume")[0]["path"] == "checkpoints/step-0000003"
    _continues(resumed, tp_dp_run)


# LoRA on every linear (with dropout), sampling and task evaluation, all at once (one run
# pair)
EVERYTHING_ELSE = ["--steps", "4", "--batch-size", "4", "--lora-rank", "4", "--lora-dropout",
                   "0.1", *FP64,
                   "--sample-every", "2", "--sample-tokens", "16", "--prompt", "def",
                   "--eval-every", "2", "--eval-max-new-tokens", "4"]


@pytest.mark.integration
@pytest.mark.slow  # a 1-process and a 2-process run with sampling and task evaluation
def test_lora_sampling_and_task_eval_under_tensor_parallel_match_one(corpus, tmp_path):
    """--tp 2 with --lora-rank (adapters split with their base: B by rows on column-wise
    linears, A by columns on row-wise ones; each rank's part of one process's dropout
    mask), --sample-every and --eval-tasks (rank 0 runs a whole copy gathered from the
    shards): the one-process losses and grad norms (fp64, within PARITY_REL), the same
    sampled text, the same task scores, and `train export` (the
    adapters merged) writes the one-process run's weights."""
    import torch

    tasks = task_files(tmp_path)
    one, tp = str(tmp_path / "one"), str(tmp_path / "tp")
    run_train(corpus, one, *EVERYTHING_ELSE, *tasks)
    run_train(corpus, tp, *EVERYTHING_ELSE, *tasks, "--nproc-per-node", "2", "--tp", "2")
    _parallel_matches(one, tp)
    same_samples_and_scores(one, tp, [2, 4])
    for run in (one, tp):
        p = llmtk("train", "export", run, "-o", os.path.join(run, "model.pt"),
                  in_process=True)
        assert p.returncode == 0, p.stderr
    want, got = (torch.load(os.path.join(r, "model.pt"), weights_only=True)["state_dict"]
                 for r in (one, tp))
    assert got.keys() == want.keys() and not any(".lora_" in k for k in got)
    for k in want:
        assert torch.allclose(got[k], want[k], rtol=0, atol=1e-5), k


@pytest.mark.integration
@pytest.mark.slow  # inductor compiles the blocks in both processes
def test_tensor_parallel_with_compiled_blocks_matches_one(corpus, tmp_path, single_ref,
                                                          monkeypatch):
    """--compile under --tp 2: each block's forward compiled with its DTensor hooks inside
    (the loss stays eager), the same numbers as one process."""
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "1")  # no worker pool on 2 cores
    out = str(tmp_path / "tp_compiled")
    run_train(corpus, out, *TP_ARGS[:10], "--compile")
    _parallel_matches(single_ref, out)
    assert json.load(open(os.path.join(out, "config.json")))["compiled"] is True


# ---------------------------------------------------------------- sharded (DCP) checkpoints

DCP_ARGS = ["--steps", "6", "--batch-size", "2", "--nproc-per-node", "2", "--parallel", "fsdp",
            "--schedule", "constant", "--checkpoint-every", "2"]


@pytest.fixture(scope="module")
def fsdp_ref(corpus, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("fsdp") / "ref")
    run_train(corpus, out, *DCP_ARGS)
    return out


@pytest.mark.integration
def test_fsdp2_writes_sharded_checkpoints_and_resumes_them_bit_exactly(corpus, tmp_path,
                                                                       fsdp_ref):
    ckpt = os.path.join(fsdp_ref, "checkpoints", "step-0000006")
    names = sorted(os.listdir(os.path.join(ckpt, "dcp")))
    assert ".metadata" in names and len([n for n in names if n.endswith(".distcp")]) == 2
    manifest = json.load(open(os.path.join(ckpt, "MANIFEST.json")))["files"]
    assert "dcp/.metadata" in manifest and "rng-00001.pt" in manifest
    event = events(fsdp_ref, "checkpoint")[-1]
    assert event["format"] == "dcp" and event["bytes"] == sum(f["size"]
                                                              for f in manifest.values())
    # The reference run as it stood after step 4 (its step-6 checkpoint gone; the log
    # rows after step 4 are dropped by the resume): one 2-process run fewer than
    # training a run that stops at step 4 again.
    out = str(tmp_path / "stopped")
    shutil.copytree(fsdp_ref, out)
    shutil.rmtree(os.path.join(out, "checkpoints", "step-0000006"))
    with open(os.path.join(out, "checkpoints", "latest"), "w") as f:
        f.write("step-0000004\n")
    run_train(corpus, out, *DCP_ARGS)  # resumes the sharded step-4 checkpoint
    assert events(out, "resume")[0]["path"] == "checkpoints/step-0000004"
    assert losses(out) == losses(fsdp_ref)
    assert [r[0] for r in losses(out)] == [1, 2, 3, 4, 5, 6]


def test_export_consolidates_a_sharded_checkpoint(fsdp_ref, tmp_path):
    import torch

    from llmtk.train import full_state_dict, load_model

    out = tmp_path / "model.pt"
    p = llmtk("train", "export", fsdp_ref, "-o", str(out), in_process=True)
    assert p.returncode == 0, p.stderr
    assert b"step-0000006 -> " in p.stderr
    blob = torch.load(out, weights_only=True)  # plain tensors and strings only
    assert blob["step"] == 6 and blob["model_config"]["d_model"] == 64
    sharded = full_state_dict(fsdp_ref)
    assert sharded.keys() == blob["state_dict"].keys()
    assert all(torch.equal(sharded[k], blob["state_dict"][k]) for k in sharded)
    model, tok = load_model(str(out))
    x = torch.tensor([tok.encode("def f(x):\n    return x")])
    _, loss = model(x[:, :-1], x[:, 1:])
    assert loss.item() < 5.0  # trained: below the uniform ln(257) = 5.55
    p = llmtk("train", "export", str(tmp_path), "-o", str(tmp_path / "x.pt"), in_process=True)
    assert p.returncode == 2 and b"no complete llmtk train checkpoint" in p.stderr


@pytest.mark.integration
@pytest.mark.slow  # three 2-process FSDP runs
def test_async_sharded_checkpoint_killed_mid_write_keeps_the_previous(corpus, tmp_path,
                                                                      fsdp_ref):
    out = str(tmp_path / "killed")
    p = torchrun_with_faults(corpus, out, 2, {"crash_in_checkpoint": 4}, *DCP_ARGS[:4],
                             *DCP_ARGS[6:])
    assert p.returncode != 0
    ckpts = os.path.join(out, "checkpoints")
    assert open(os.path.join(ckpts, "latest")).read().strip() == "step-0000002"
    partial = os.path.join(ckpts, ".tmp-step-0000004")
    assert os.path.exists(os.path.join(partial, "dcp", ".metadata"))  # written, not sealed
    assert not os.path.exists(os.path.join(partial, "COMPLETE"))
    run_train(corpus, out, *DCP_ARGS)
    assert events(out, "resume")[0]["path"] == "checkpoints/step-0000002"
    assert losses(out) == losses(fsdp_ref)


@pytest.mark.integration
@pytest.mark.slow  # a 2-process run
def test_ctrl_c_at_the_launcher_checkpoints_every_worker_and_exits_130(corpus, tmp_path):
    """Ctrl-C reaches the launcher alone (torchrun starts its workers in sessions of their
    own); it passes SIGINT on, the workers checkpoint at one step, the launcher exits 130
    without an error line."""
    out = str(tmp_path / "run")
    argv = ["train", "--data", corpus["data"], "--cache-dir", corpus["cache"], "--out", out,
            *TINY, "--steps", "100000", "--batch-size", "2", "--nproc-per-node", "2",
            "--threads", "1"]
    proc = popen_module("llmtk", argv, env(), stderr_pipe=True)
    deadline = time.time() + 120
    while time.time() < deadline and not (
            os.path.exists(os.path.join(out, "metrics.jsonl")) and rows(out)):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # as the terminal sends it
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err.decode()[-2000:]
    assert b"llmtk: error" not in err and b"Traceback" not in err
    (pre,) = events(out, "preempt")
    assert pre["signal"] == "SIGINT"
    step = os.path.join(out, "checkpoints", f"step-{pre['step']:07d}")
    assert os.path.exists(os.path.join(step, "COMPLETE"))
    nothing_half_written(out)
