"""Checkpoints you can trust: `llmtk train verify` (the restore drill), --verify-every,
failed saves as `checkpoint_failed` events and findings, load times, and a restart that
waits for a dying run's lock instead of being refused by it.

One process, in this process (llmtk.train.trainer.train on a tiny model): a template run
with checkpoints at steps 2, 4 and 6 is trained once and copied for each test that
changes it. The multi-process layouts are in tests/test_train_verify_parallel.py.
"""

import errno
import json
import os
import shutil
import socket
import subprocess
import threading

import pytest

torch = pytest.importorskip("torch")

from llmtk.train.checkpoint import files as C  # noqa: E402
from llmtk.train.config import resolve_config  # noqa: E402
from llmtk.train.lock import DirLock, lock_run_dir, process_state  # noqa: E402
from llmtk.train.runtime import CollectiveError, Faults  # noqa: E402
from llmtk.train.trainer import train  # noqa: E402
from tests.util import llmtk  # noqa: E402

TEXTS = [f"Document {i}: the quick brown fox jumps over the lazy dog, {i * 7} times. " * 4
         for i in range(60)]
ARGS = dict(layers=1, d_model=32, heads=2, seq_len=32, warmup=1, lr=3e-3, log_every=1,
            batch_size=2, checkpoint_every=2, keep_checkpoints=0, quiet=True)


def run(tmp, out, steps, faults=None, **kw):
    flags = dict(ARGS, data=[str(tmp / "d.jsonl")], cache_dir=str(tmp / "cache"), out=str(out),
                 steps=steps, **kw)
    train(resolve_config(flags, None), faults=faults)


def rows(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def events(out, name):
    return [r for r in rows(out) if r.get("event") == name]


def ckpt(out, step):
    return os.path.join(out, "checkpoints", f"step-{step:07d}")


def verify(*args):
    r = llmtk("train", "verify", *map(str, args), in_process=True)
    return r.returncode, r.stderr.decode()


def flip_byte(path):
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x01
    with open(path, "wb") as f:
        f.write(data)


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("verify")
    with open(tmp / "d.jsonl", "w") as f:
        for t in TEXTS:
            f.write(json.dumps({"text": t}) + "\n")
    run(tmp, tmp / "full", 6, verify_every=2)   # checkpoints at 2, 4 and 6 (full format)
    run(tmp, tmp / "dcp", 4, checkpoint_format="dcp", async_checkpoint=False)
    return tmp


@pytest.fixture
def copy(template, tmp_path):
    def copy(name):
        out = tmp_path / name
        shutil.copytree(template / name, out)
        return out
    return copy


# ---------------------------------------------------------------- train verify


def test_a_good_checkpoint_recomputes_the_next_logged_step_bit_for_bit(template):
    code, err = verify(template / "full", "--step", "4")
    assert code == 0, err
    loss = next(r["loss"] for r in rows(template / "full") if r.get("step") == 5
                and "event" not in r)
    assert (f"verified step-0000004: 4 files match MANIFEST.json; step 5 recomputed: loss "
            f"{loss!r}, bit for bit as logged") in err
    assert not any(n.startswith(("llmtk-verify", ".verify")) for n in
                   os.listdir(template / "full"))


def test_the_newest_checkpoint_of_a_finished_run_is_retrained_from_the_one_before(template):
    code, err = verify(template / "full")
    assert code == 0, err
    assert ("verified step-0000006: 4 files match MANIFEST.json; steps 5-6 retrained from "
            "step-0000004: 2 logged losses and the model and optimizer state equal it bit "
            "for bit") in err


def test_a_resealed_final_checkpoint_is_named_by_the_tensor_that_differs(copy):
    out = copy("full")
    path = ckpt(out, 6)
    sd = torch.load(os.path.join(path, "model.pt"), weights_only=True)
    sd["layers.0.mlp.w2.weight"][0, 0] += 1e-6
    torch.save(sd, os.path.join(path, "model.pt"))
    C.seal(path, 6)
    code, err = verify(out)
    assert code == 1, err
    assert (f"llmtk: error: {path}: model layers.0.mlp.w2.weight differs from the state "
            "retrained from step-0000004 (steps 5-6)") in err


def test_a_lone_final_checkpoint_loads_and_trains(copy):
    out = copy("full")
    for step in (2, 4):
        shutil.rmtree(ckpt(out, step))
    code, err = verify(out)
    assert code == 0, err
    assert "verified step-0000006: 4 files match MANIFEST.json; it loads and trains (step 7" \
        in err and "metrics.jsonl logs no step after 6 to compare with" in err


FULL_FILES = ["model.pt", "optim.pt", "state.json", "rng-00000.pt", "MANIFEST.json", "COMPLETE"]


@pytest.mark.parametrize("name", FULL_FILES)
def test_one_changed_byte_in_any_file_names_it(copy, name):
    out = copy("full")
    flip_byte(os.path.join(ckpt(out, 6), name))
    code, err = verify(out)
    assert code == 1
    assert err.startswith(f"llmtk: error: {ckpt(out, 6)}: {name} does not match its ")
    assert len(err.strip().splitlines()) == 1


def test_one_changed_byte_in_the_sharded_files_names_them(copy):
    out = copy("dcp")
    names = sorted(os.listdir(os.path.join(ckpt(out, 4), "dcp")))
    assert any(n.endswith(".distcp") for n in names) and ".metadata" in names
    assert verify(out, "--step", "2")[0] == 0  # DCP in one process recomputes exactly too
    assert verify(out)[0] == 0  # and its final state, consolidated from the shards
    for name in names:
        path = os.path.join(ckpt(out, 4), "dcp", name)
        saved = open(path, "rb").read()
        flip_byte(path)
        code, err = verify(out, "--checksums-only")
        assert code == 1 and f"dcp/{name} does not match its checksum" in err, err
        with open(path, "wb") as f:
            f.write(saved)
    assert verify(out, "--checksums-only")[0] == 0


def test_a_changed_latest_is_named(copy):
    out = copy("full")
    with open(os.path.join(out, "checkpoints", "latest"), "w") as f:
        f.write("step-0000007\n")
    code, err = verify(out, "--checksums-only")
    assert code == 1
    assert f"{out}/checkpoints/latest: names 'step-0000007', which is not a complete " \
        "checkpoint" in err


def test_a_resealed_checkpoint_that_does_not_restore_the_run_names_the_step(copy):
    """Checksums prove the bytes are the ones written, not that they are the run's state:
    weights changed and the manifest rewritten pass the checksums, and the recompute
    names the step whose loss no longer matches."""
    out = copy("full")
    path = ckpt(out, 4)
    sd = torch.load(os.path.join(path, "model.pt"), weights_only=True)
    key = "layers.0.attn.wo.weight"
    sd[key] = sd[key] * (1 + 1e-3)
    torch.save(sd, os.path.join(path, "model.pt"))
    C.seal(path, 4)
    code, err = verify(out, "--step", "4")
    assert code == 1, err
    assert "llmtk: error: step 5: the loss recomputed from the checkpoint is " in err
    assert "CPU recomputes bit for bit" in err


def test_a_resume_that_changed_the_schedule_is_recomputed_with_its_settings(template,
                                                                            tmp_path):
    """Trained on with --steps 8 from step 4 (the cosine schedule stretches): the rows
    after step 4 follow the new settings, which the next checkpoint records."""
    out = tmp_path / "run"
    run(template, out, 4, log_every=2)
    run(template, out, 8, log_every=2)
    code, err = verify(out, "--step", "4")
    assert code == 0, err
    assert "step 6 recomputed" in err


def test_no_such_step_is_a_usage_error(template):
    code, err = verify(template / "full", "--step", "3")
    assert code == 2 and "no complete checkpoint of step 3 (there are: 2, 4, 6)" in err


def test_an_older_checkpoint_marker_still_verifies(copy):
    out = copy("full")
    with open(os.path.join(ckpt(out, 6), C.COMPLETE), "w") as f:
        f.write("6\n")  # written before COMPLETE recorded the manifest's checksum
    assert verify(out, "--checksums-only")[0] == 0


# ---------------------------------------------------------------- during training


def test_verify_every_records_each_nth_checkpoint(template):
    verified = events(template / "full", "checkpoint_verified")
    assert [(e["step"], e["ok"], e["problem"]) for e in verified] == [(4, True, None)]
    assert [e["step"] for e in events(template / "full", "checkpoint")] == [2, 4, 6]


class _CorruptBeforeSeal(Faults):
    """Storage that changes a byte of model.pt after the manifest recorded it."""

    def before_commit(self, step):
        flip_byte(os.path.join(C.tmp_dir(self.root, step), "model.pt"))


def test_verify_every_catches_a_checkpoint_the_storage_changed(template, tmp_path, capsys):
    faults = _CorruptBeforeSeal()
    faults.root = str(tmp_path / "run" / "checkpoints")
    run(template, tmp_path / "run", 2, faults=faults, verify_every=1, quiet=False)
    (e,) = events(tmp_path / "run", "checkpoint_verified")
    assert (e["step"], e["ok"], e["problem"]) == (2, False, "model.pt does not match its "
                                                            "checksum")
    assert "does not verify right after it was written (model.pt does not match its " \
        "checksum): check the storage" in capsys.readouterr().err
    r = llmtk("diagnose", tmp_path / "run" / "metrics.jsonl", in_process=True)
    assert "checkpoint_failed" in r.stdout.decode() + r.stderr.decode()


@pytest.mark.parametrize("code,words", [(errno.ENOSPC, "no space left writing"),
                                        (errno.EACCES, "cannot write")])
def test_a_checkpoint_that_cannot_be_written_is_an_event_and_one_line(
        template, tmp_path, monkeypatch, code, words):
    """Through the trainer's own save path: the write of step 4 fails; the run stops with
    one line naming the file and the free space, the event is in metrics.jsonl, nothing
    half-written is left, and the same command resumes from step 2."""
    out = tmp_path / "run"
    real_save = torch.save

    def failing(obj, f):
        if "step-0000004" in getattr(f, "name", ""):
            raise OSError(code, os.strerror(code))
        real_save(obj, f)

    monkeypatch.setattr(torch, "save", failing)
    with pytest.raises(CollectiveError) as e:
        run(template, out, 6)
    file = f"{out}/checkpoints/.tmp-step-0000004/model.pt"
    free = shutil.disk_usage(out).free
    assert str(e.value).startswith(f"{words} {file}")
    assert f"free on {out}/checkpoints); the last complete checkpoint (step 2) is kept" \
        in str(e.value)
    (event,) = events(out, "checkpoint_failed")
    assert event["step"] == 4 and event["errno"] == code
    assert event["error"] == errno.errorcode[code]
    assert event["path"] == "checkpoints/.tmp-step-0000004/model.pt"
    assert abs(event["free_bytes"] - free) < 1 << 30
    assert sorted(os.listdir(out / "checkpoints")) == ["latest", "step-0000002"]
    r = llmtk("diagnose", out / "metrics.jsonl", in_process=True)
    text = r.stdout.decode()
    assert "checkpoint_failed" in text and r.returncode != 0
    assert ("free space" if code == errno.ENOSPC else "permissions") in text
    monkeypatch.setattr(torch, "save", real_save)
    run(template, out, 6)
    assert events(out, "resume")[-1]["path"] == "checkpoints/step-0000002"


def test_a_checkpoints_folder_the_run_cannot_write_in_is_one_line(template, tmp_path,
                                                                   monkeypatch):
    """Its temporary directory cannot be created (EACCES, injected: the tests run as root,
    whom permissions do not stop): the same event, one line, exit 1, no traceback."""
    out = tmp_path / "run"
    real = os.makedirs

    def refused(path, *args, **kw):
        if str(path).endswith(".tmp-step-0000004"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path, *args, **kw)

    monkeypatch.setattr(os, "makedirs", refused)
    with pytest.raises(CollectiveError) as e:
        run(template, out, 6)
    tmp = f"{out}/checkpoints/.tmp-step-0000004"
    assert str(e.value).startswith(f"cannot create {tmp}: Permission denied (")
    assert e.value.exit_code == 1
    (event,) = events(out, "checkpoint_failed")
    assert (event["path"], event["error"]) == ("checkpoints/.tmp-step-0000004", "EACCES")
    assert sorted(os.listdir(out / "checkpoints")) == ["latest", "step-0000002"]


def test_a_resume_records_how_long_the_load_took(copy, template):
    out = copy("full")
    run(template, out, 8)
    (e,) = events(out, "checkpoint_loaded")
    assert e["step"] == 6 and e["path"] == "checkpoints/step-0000006"
    assert isinstance(e["seconds"], float) and e["seconds"] >= 0


# ---------------------------------------------------------------- the run lock


def _gone_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _held_by(directory, pid):
    """The run lock taken by another open file of this process, recording `pid`."""
    other = DirLock(str(directory))
    assert other.acquire()
    os.ftruncate(other.fd, 0)
    os.pwrite(other.fd, f"{socket.gethostname()} {pid}\n".encode(), 0)
    return other


def test_process_states():
    assert process_state(os.getpid()) == "running"
    assert process_state(_gone_pid()) == "gone"
    zombie = subprocess.Popen(["true"])
    try:
        for _ in range(200):  # until it has exited (not yet reaped: a zombie)
            if process_state(zombie.pid) == "exiting":
                break
            threading.Event().wait(0.01)
        assert process_state(zombie.pid) == "exiting"
    finally:
        zombie.wait()


def test_a_lock_whose_holder_is_gone_is_waited_for(tmp_path):
    held = _held_by(tmp_path, _gone_pid())
    said = []
    threading.Timer(0.3, held.release).start()  # its last process lets go
    lock = lock_run_dir(str(tmp_path), wait_s=30, say=said.append)
    lock.release()
    assert len(said) == 1 and "is gone; waiting up to 30 s for its processes to let go" \
        in said[0]


def test_a_dying_holder_that_never_lets_go_is_named_after_the_wait(tmp_path):
    held = _held_by(tmp_path, _gone_pid())
    try:
        with pytest.raises(Exception) as e:
            lock_run_dir(str(tmp_path), wait_s=0.2, say=lambda m: None)
    finally:
        held.release()
    assert e.value.exit_code == 2
    assert f"is held open by PID {os.getpid()} (" in str(e.value)


def test_a_running_holder_is_refused_at_once(tmp_path):
    held = _held_by(tmp_path, os.getpid())
    said = []
    try:
        with pytest.raises(Exception) as e:
            lock_run_dir(str(tmp_path), wait_s=30, say=said.append)
    finally:
        held.release()
    assert said == [] and "is in use by another llmtk train" in str(e.value)


def test_on_gpu_the_loss_must_agree_within_one_input_rounding_per_step():
    from llmtk.errors import LlmtkError
    from llmtk.train.checkpoint.verify import compare

    logged = {"step": 9, "loss": 4.0}
    near = {"loss": 4.0 * (1 + 2 ** -9), "device": "cuda:0"}  # half a bf16 rounding
    assert "within the GPU tolerance" in compare(logged, near, 1, "auto")
    with pytest.raises(LlmtkError, match=r"^step 9: .* more than the GPU tolerance"):
        compare(logged, near, 1, "fp32")  # TF32: 2^-11 per step
    assert "within" in compare(logged, near, 4, "fp32")  # 4 steps recomputed
    with pytest.raises(LlmtkError, match="CPU recomputes bit for bit"):
        compare(logged, {"loss": 4.0 + 1e-15, "device": "cpu"}, 1, "auto")
