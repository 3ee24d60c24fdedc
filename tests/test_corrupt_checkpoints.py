"""Corrupt, missing and hostile checkpoints: resume verifies, falls back, moves the bad one
aside and says so in one line; writing one onto a full disk says so in one line.

Runs train in this process (llmtk.train.trainer.train) on a tiny model: a template run
with checkpoints at steps 2 and 4 is trained once and copied for each test.
"""

import errno
import json
import os
import shutil

import pytest

torch = pytest.importorskip("torch")

from llmtk.errors import LlmtkError  # noqa: E402
from llmtk.train.checkpoint import files as C  # noqa: E402
from llmtk.train.checkpoint.checkpointer import Checkpointer  # noqa: E402
from llmtk.train.config import resolve_config  # noqa: E402
from llmtk.train.runtime import CollectiveError, Dist  # noqa: E402
from llmtk.train.trainer import train  # noqa: E402

TEXTS = [f"Document {i}: the quick brown fox jumps over the lazy dog, {i * 7} times. " * 4
         for i in range(60)]
ARGS = dict(layers=1, d_model=32, heads=2, seq_len=32, warmup=1, lr=3e-3, log_every=1,
            batch_size=2, checkpoint_every=2, keep_checkpoints=0)


def run(tmp, out, steps, **kw):
    flags = dict(ARGS, data=[str(tmp / "d.jsonl")], cache_dir=str(tmp / "cache"), out=str(out),
                 steps=steps, **kw)
    train(resolve_config(flags, None))


def losses(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return [(r["step"], r["loss"]) for r in rows if "loss" in r and "event" not in r]


def resumed_from(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return [r["path"] for r in rows if r.get("event") == "resume"]


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ckpt")
    with open(tmp / "d.jsonl", "w") as f:
        for t in TEXTS:
            f.write(json.dumps({"text": t}) + "\n")
    run(tmp, tmp / "four", 4)      # checkpoints at 2 and 4
    run(tmp, tmp / "six", 6)       # the uninterrupted reference
    return tmp


@pytest.fixture
def four(template, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(template / "four", out)
    return out


def ckpt(out, step):
    return os.path.join(out, "checkpoints", f"step-{step:07d}")


def assert_fell_back(template, out, err, problem):
    bad = ckpt(out, 4)
    assert f"warning: checkpoint {bad} is corrupt ({problem})" in err
    assert f"moved it to {bad}.corrupt-1" in err
    assert os.path.isdir(bad + ".corrupt-1")  # kept aside, never deleted
    assert resumed_from(out) == ["checkpoints/step-0000002"]
    # Resuming two steps earlier still reproduces the uninterrupted run bit for bit.
    assert losses(out) == losses(template / "six")


def test_truncated_model_falls_back_to_the_previous_checkpoint(template, four, capsys):
    path = os.path.join(ckpt(four, 4), "model.pt")
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size // 2)
    run(template, four, 6)
    assert_fell_back(template, four, capsys.readouterr().err,
                     f"model.pt has {size // 2} bytes, {size} were written")


def test_empty_optimizer_state_falls_back(template, four, capsys):
    path = os.path.join(ckpt(four, 4), "optim.pt")
    size = os.path.getsize(path)
    open(path, "w").close()
    run(template, four, 6)
    assert_fell_back(template, four, capsys.readouterr().err,
                     f"optim.pt has 0 bytes, {size} were written")


def test_bad_state_json_falls_back(template, four, capsys):
    with open(os.path.join(ckpt(four, 4), "state.json"), "w") as f:
        f.write('{"step": 4, "tok')
    run(template, four, 6)
    assert "state.json" in capsys.readouterr().err
    assert resumed_from(four) == ["checkpoints/step-0000002"]
    assert os.path.isdir(ckpt(four, 4) + ".corrupt-1")


def test_bit_flip_with_the_same_size_is_caught_by_the_checksum(template, four, capsys):
    path = os.path.join(ckpt(four, 4), "model.pt")
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(path, "wb").write(bytes(data))
    run(template, four, 6)
    assert_fell_back(template, four, capsys.readouterr().err,
                     "model.pt does not match its checksum")


def test_complete_marker_without_files(template, four, capsys):
    bad = ckpt(four, 4)
    for name in os.listdir(bad):
        if name != "COMPLETE":
            os.remove(os.path.join(bad, name))
    run(template, four, 6)
    err = capsys.readouterr().err
    assert f"warning: checkpoint {bad} is corrupt (" in err
    assert resumed_from(four) == ["checkpoints/step-0000002"]


def test_latest_naming_a_missing_directory(template, four, capsys):
    shutil.rmtree(ckpt(four, 4))
    with open(os.path.join(four, "checkpoints", "latest"), "w") as f:
        f.write("step-0000004\n")
    run(template, four, 6)
    err = capsys.readouterr().err
    assert "names 'step-0000004', which is not a checkpoint directory" in err
    assert resumed_from(four) == ["checkpoints/step-0000002"]
    assert losses(four) == losses(template / "six")


def test_every_checkpoint_corrupt_starts_fresh_and_keeps_them(template, four, capsys):
    for step in (2, 4):
        open(os.path.join(ckpt(four, step), "model.pt"), "w").close()
    run(template, four, 2)
    err = capsys.readouterr().err
    assert err.count("is corrupt") == 2
    assert resumed_from(four) == []
    assert os.path.isdir(ckpt(four, 2) + ".corrupt-1") and os.path.isdir(ckpt(four, 4) +
                                                                          ".corrupt-1")
    assert os.path.exists(os.path.join(ckpt(four, 2), "COMPLETE"))  # a new, good one


def test_missing_rng_file_is_a_warning(template, four, capsys):
    rng = os.path.join(ckpt(four, 4), "rng-00000.pt")
    os.remove(rng)
    C.seal(ckpt(four, 4), 4)  # still a consistent checkpoint, just without RNG
    run(template, four, 6)
    err = capsys.readouterr().err
    assert f"warning: {rng} is missing" in err
    assert resumed_from(four) == ["checkpoints/step-0000004"]


def test_steps_below_the_checkpoint_step_exits_2(template, four):
    with pytest.raises(LlmtkError, match=r"--steps 3 is below the step of the checkpoint "
                                         r"to resume, 4") as e:
        run(template, four, 3)
    assert e.value.exit_code == 2


def test_a_stale_config_temp_file_of_a_dead_run_is_removed(template, four):
    import subprocess

    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = four / f"config.json.tmp-{dead.pid}"
    stale.write_text("{")
    run(template, four, 5)
    assert not stale.exists() and json.loads((four / "config.json").read_text())


def test_a_changed_seed_is_a_notice(template, four, capsys):
    run(template, four, 5, seed=9)
    assert "note: --seed 9 differs from the checkpoint's 0: the data order from step 4 on " \
           "follows seed 9" in capsys.readouterr().err


def test_malicious_pickle_is_refused_in_one_line(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    d = tmp_path / "step-0000001"
    d.mkdir()
    torch.save({"w": torch.zeros(2), "x": Evil()}, d / "model.pt")
    with pytest.raises(C.CheckpointError) as e:
        C.load_tensors(str(d), "model.pt")
    assert str(e.value) == (f"refused to load {d}/model.pt: it contains code objects; "
                            "llmtk loads weights only")


def test_unreadable_file_without_a_manifest_is_one_line(tmp_path):
    d = tmp_path / "step-0000001"
    d.mkdir()
    (d / "model.pt").write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(C.CheckpointError, match=r"model.pt is not a valid checkpoint file \("):
        C.load_tensors(str(d), "model.pt")


def test_disk_full_while_checkpointing_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    """The trainer's own writer (the Checkpointer): a full disk is one line naming the file,
    the temporary directory is removed, the previous checkpoint stays the latest."""
    root = str(tmp_path / "checkpoints")
    ckpt, model = Checkpointer(root), torch.nn.Linear(3, 1)
    ckpt.save(1, {"step": 1}, model)
    real_save = torch.save

    def full_disk(obj, f):
        real_save(obj, f)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(CollectiveError) as e:
        ckpt.save(2, {"step": 2}, model)
    assert str(e.value).startswith(f"no space left writing {root}/.tmp-step-0000002/model.pt (")
    assert str(e.value).endswith(f" free on {root}); the last complete checkpoint (step 1) is "
                                 "kept")
    assert sorted(os.listdir(root)) == ["latest", "step-0000001"]  # nothing half-written
    assert C.find_latest(root) == os.path.join(root, "step-0000001")


class _OtherRankFails(Dist):
    """Rank 0 of two, in this process: the host-side reduction reports that the other
    rank's write failed (its RNG file, say); barriers have nobody to wait for."""

    def __init__(self):
        super().__init__(rank=0, world=2)

    def barrier(self):
        pass

    def host_max(self, values):
        # The first agreement (rank 0 created the temporary directory) holds; the next
        # (every rank wrote its part) reports the other rank's failure.
        self.agreed = getattr(self, "agreed", 0) + 1
        return values if self.agreed == 1 else [1.0 for _ in values]


def test_a_write_that_fails_on_another_rank_stops_every_rank_and_leaves_nothing(tmp_path):
    """No rank waits at the commit for one whose write failed: they agree on it after
    writing (one host-side reduction), and rank 0 removes the temporary directory."""
    root = str(tmp_path / "checkpoints")
    Checkpointer(root).save(1, {"step": 1}, torch.nn.Linear(3, 1))
    with pytest.raises(CollectiveError) as e:
        Checkpointer(root, _OtherRankFails()).save(2, {"step": 2}, torch.nn.Linear(3, 1))
    assert str(e.value).startswith("checkpoint step 2: another rank could not write its part "
                                   "(its message is above) (")
    assert str(e.value).endswith(f" free on {root}); the last complete checkpoint (step 0) is "
                                 "kept")
    assert sorted(os.listdir(root)) == ["latest", "step-0000001"]


def test_verify_names_what_is_wrong(tmp_path):
    root = str(tmp_path / "c")
    ckpt = Checkpointer(root)
    ckpt.save(3, {"step": 3}, torch.nn.Linear(3, 1))
    path = ckpt.latest()
    assert path == os.path.join(root, "step-0000003") and ckpt.verify(path) is None
    manifest = json.load(open(os.path.join(path, C.MANIFEST)))
    assert set(manifest["files"]) == {"model.pt", "optim.pt", "state.json", "rng-00000.pt"}
    os.remove(os.path.join(path, "optim.pt"))
    assert ckpt.verify(path) == "optim.pt is missing"
    with open(os.path.join(path, C.MANIFEST), "w") as f:
        f.write("{")
    assert ckpt.verify(path) == "MANIFEST.json does not match its checksum (recorded in COMPLETE)"
    with open(os.path.join(path, C.COMPLETE), "w") as f:
        f.write("3\n")  # an older checkpoint's marker: the manifest is read as it is
    assert ckpt.verify(path) == "MANIFEST.json is unreadable"


def test_a_checkpoint_in_the_older_qkv_order_is_converted_as_it_loads(template, four):
    """Written before wqkv was grouped by kv head (all q rows, then k, then v; no
    qkv_layout in state.json): its weights and Adam moments are reordered as they load, so
    export reads the same model and the resumed run continues the reference bit for bit."""
    from llmtk.train import full_state_dict
    from llmtk.train.model.gpt import ModelConfig, ungroup_qkv

    shutil.rmtree(ckpt(four, 4))  # step 2 then resumes to the reference's (a 6-step run's)
    C.set_latest(os.path.join(four, "checkpoints"), "step-0000002")
    path = ckpt(four, 2)
    before = full_state_dict(path)
    state = json.load(open(os.path.join(path, "state.json")))
    cfg = ModelConfig(**state["model_config"])
    model = torch.load(os.path.join(path, "model.pt"), weights_only=True)
    optim = torch.load(os.path.join(path, "optim.pt"), weights_only=True)
    key = "layers.0.attn.wqkv.weight"
    model[key] = ungroup_qkv(model[key], cfg)
    for name in ("exp_avg", "exp_avg_sq"):
        optim["state"][key][name] = ungroup_qkv(optim["state"][key][name], cfg)
    del state["qkv_layout"]
    torch.save(model, os.path.join(path, "model.pt"))
    torch.save(optim, os.path.join(path, "optim.pt"))
    C.write_text(os.path.join(path, "state.json"), json.dumps(state))
    C.seal(path, 2)
    assert not torch.equal(torch.load(os.path.join(path, "model.pt"))[key], before[key])
    after = full_state_dict(path)
    assert all(torch.equal(after[k], before[k]) for k in before)
    # An `export` file of that time (no qkv_layout in its header) reads the same way.
    from llmtk.train.checkpoint.state_dict import EXPORT_FORMAT

    old_export = str(four / "old.pt")
    torch.save({"format": EXPORT_FORMAT, "model_config": state["model_config"],
                "state_dict": model}, old_export)
    exported = full_state_dict(old_export)
    assert all(torch.equal(exported[k], before[k]) for k in before)
    run(template, four, 6)
    assert resumed_from(four) == ["checkpoints/step-0000002"]
    assert losses(four) == losses(template / "six")
