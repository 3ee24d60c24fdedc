"""`train --log-to tensorboard,wandb`: every metrics.jsonl row and event, read back from the
TensorBoard event file and from the offline W&B run folder."""

import glob
import json
import math
import re
import struct
import sys

import pytest

pytest.importorskip("torch")

from llmtk.errors import UsageError  # noqa: E402
from llmtk.train.config import resolve_config  # noqa: E402
from llmtk.train.loggers import parse_log_to  # noqa: E402
from llmtk.train.trainer import train  # noqa: E402
from tests.util import own_signal_handlers  # noqa: E402

TEXT = "Pack my box with five dozen liquor jugs. How vexingly quick daft zebras jump! " * 6


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("logcorpus")
    with open(d / "docs.jsonl", "w") as f:
        for i in range(40):
            f.write(json.dumps({"text": f"{i}: {TEXT[i:]}"}) + "\n")
    return d


def run(corpus, out, log_to, **flags):
    values = dict(data=[str(corpus / "docs.jsonl")], cache_dir=str(corpus / "cache"),
                  out=str(out), layers=1, d_model=32, heads=2, seq_len=32, batch_size=2,
                  steps=4, warmup=1, log_every=1, checkpoint_every=2, sample_every=4,
                  prompt="Pack", sample_tokens=4, device="cpu", quiet=True, log_to=log_to)
    values.update(flags)
    with own_signal_handlers():
        train(resolve_config(values, None))
    with open(out / "metrics.jsonl") as f:
        return [json.loads(line) for line in f]


def tensorboard_events(out):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    scalars = {tag: [(e.step, e.value) for e in acc.Scalars(tag)]
               for tag in acc.Tags()["scalars"]}
    texts = {tag.removesuffix("/text_summary"):  # add_text's plugin suffix
             [(e.step, e.tensor_proto.string_val[0].decode()) for e in acc.Tensors(tag)]
             for tag in acc.Tags()["tensors"]}
    return scalars, texts


def wandb_records(path):
    """Records of a .wandb file: a LevelDB-style log (32 KiB blocks; records of
    crc32 u32, length u16, type u8 = full/first/middle/last) of protobuf Records."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = open(path, "rb").read()
    assert data[:4] == b":W&B"
    pos, block, buf = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if n == 0 and kind == 0:  # block padding
            pos += left
            continue
        buf += data[pos + 7:pos + 7 + n]
        pos += 7 + n
        if kind in (1, 4):  # full, last
            record = pb.Record()
            record.ParseFromString(buf)
            buf = b""
            yield record


def test_tensorboard_gets_every_field_event_and_the_config(corpus, tmp_path):
    pytest.importorskip("tensorboard")
    rows = run(corpus, tmp_path / "run", "tensorboard")
    scalars, texts = tensorboard_events(tmp_path / "run")
    train_rows = [r for r in rows if "loss" in r and "event" not in r]
    assert len(train_rows) == 4
    for field in ("loss", "lr", "grad_norm", "tokens", "tokens_per_s", "mem_gb", "data_s",
                  "step_s"):
        assert [s for s, _ in scalars[f"train/{field}"]] == [1, 2, 3, 4]
        expected = [float(r[field]) for r in train_rows]
        assert [v for _, v in scalars[f"train/{field}"]] == pytest.approx(expected, rel=1e-6)
    assert "train/mfu" not in scalars  # null on CPU: not measured, not a zero
    checkpoints = [r for r in rows if r.get("event") == "checkpoint"]
    assert [s for s, _ in texts["events/checkpoint"]] == [r["step"] for r in checkpoints]
    assert json.loads(texts["events/checkpoint"][0][1])["path"] == checkpoints[0]["path"]
    assert [v for _, v in scalars["events/checkpoint/seconds"]] == pytest.approx(
        [r["seconds"] for r in checkpoints])
    sample = json.loads(texts["events/sample"][0][1])
    assert sample["prompt"] == "Pack" and "text" in sample
    config = texts["config"][0][1]
    assert '"log_to": "tensorboard"' in config and '"d_model": 32' in config


def test_wandb_offline_run_holds_the_config_history_and_events(corpus, tmp_path,
                                                               monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    rows = run(corpus, tmp_path / "run", "wandb")
    # The run file is complete when W&B's service stops, as at the end of a training process;
    # here training ran inside the test process, so stop it as that exit would.
    import wandb

    wandb.teardown()
    (path,) = glob.glob(str(tmp_path / "run" / "wandb" / "offline-run-*" / "run-*.wandb"))
    history, config = {}, {}
    for record in wandb_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json)
                     for i in record.history.item}
            history.setdefault(record.history.step.num, {}).update(items)
        elif kind in ("run", "config"):  # the config comes with the run, or after it
            items = record.run.config.update if kind == "run" else record.config.update
            config.update({i.key: json.loads(i.value_json) for i in items})
    assert config["train"]["d_model"] == 32
    assert config["model"]["n_layer"] == 1
    train_rows = [r for r in rows if "loss" in r and "event" not in r]
    assert sorted(history) == [1, 2, 3, 4]
    for r in train_rows:
        for field in ("loss", "lr", "grad_norm", "tokens"):
            assert history[r["step"]][field] == pytest.approx(r[field], rel=1e-9)
    for r in rows:
        if r.get("event") == "checkpoint":
            assert json.loads(history[r["step"]]["events/checkpoint"])["path"] == r["path"]


def test_both_at_once_and_metrics_jsonl_is_unchanged(corpus, tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    pytest.importorskip("tensorboard")
    monkeypatch.setenv("WANDB_MODE", "offline")
    plain = run(corpus, tmp_path / "a", "none")
    both = run(corpus, tmp_path / "b", "tensorboard,wandb")
    # checkpoint bytes too: the saved config names --log-to, so its length differs
    strip = {"time", "tokens_per_s", "step_s", "data_s", "mem_gb", "seconds", "path", "bytes"}

    def same(rows):  # of the per-rank measures, the losses (the others are times)
        return [{k: v["loss"] if k == "ranks" else v for k, v in r.items() if k not in strip}
                for r in rows]

    assert same(plain) == same(both)
    assert (tmp_path / "b" / "tensorboard").is_dir() and (tmp_path / "b" / "wandb").is_dir()
    assert not (tmp_path / "a" / "tensorboard").exists()


def test_log_to_values():
    assert parse_log_to("tensorboard, wandb") == ["tensorboard", "wandb"]
    assert parse_log_to(["wandb"]) == ["wandb"]
    assert parse_log_to("none") == parse_log_to("") == []
    with pytest.raises(UsageError, match="'mlflow' is not one of tensorboard, wandb"):
        parse_log_to("tensorboard,mlflow")
    with pytest.raises(UsageError, match="^log_to: 'tb' is not one of"):
        resolve_config({"data": ["x"], "out": "o", "log_to": "tb"}, None)


def test_a_missing_backend_is_a_clear_usage_error(corpus, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb -> ImportError
    with pytest.raises(UsageError, match=r"pip install 'llmtk\[logging\]'"):
        run(corpus, tmp_path / "run", "wandb")


def test_non_finite_values_reach_tensorboard_as_nan(tmp_path):
    pytest.importorskip("tensorboard")
    from llmtk.train.loggers import open_mirrors

    mirrors = open_mirrors("tensorboard", str(tmp_path), {"x": 1})
    mirrors.log({"step": 1, "loss": "NaN", "lr": 0.1, "time": 1.0})
    mirrors.log({"step": 2, "event": "nan", "loss": float("inf"), "bad_params": ["a"],
                 "time": 2.0})
    mirrors.close()
    scalars, texts = tensorboard_events(tmp_path)
    assert math.isnan(scalars["train/loss"][0][1])
    assert scalars["events/nan/loss"][0][1] == math.inf
    assert json.loads(texts["events/nan"][0][1])["bad_params"] == ["a"]


def test_a_resumed_run_continues_its_logs(corpus, tmp_path, monkeypatch):
    """Resume: TensorBoard purges the redone steps (as metrics.jsonl is truncated) and W&B
    continues the same run id."""
    pytest.importorskip("wandb")
    pytest.importorskip("tensorboard")
    monkeypatch.setenv("WANDB_MODE", "offline")
    out = tmp_path / "run"
    run(corpus, out, "tensorboard,wandb", steps=3, checkpoint_every=2)  # checkpoints 2 and 3
    (out / "checkpoints" / "latest").write_text("step-0000002\n")
    import shutil

    shutil.rmtree(out / "checkpoints" / "step-0000003")  # as if killed after step 3's row
    rows = run(corpus, out, "tensorboard,wandb", steps=5, checkpoint_every=2)
    assert [r["step"] for r in rows if "loss" in r and "event" not in r] == [1, 2, 3, 4, 5]
    scalars, _ = tensorboard_events(out)
    assert [s for s, _ in scalars["train/loss"]] == [1, 2, 3, 4, 5]
    losses = {r["step"]: r["loss"] for r in rows if "loss" in r and "event" not in r}
    assert [v for _, v in scalars["train/loss"]] == pytest.approx([losses[s] for s in
                                                                   range(1, 6)])
    runs = sorted(glob.glob(str(out / "wandb" / "offline-run-*")))
    # one folder per start, offline-run-DATE_TIME-ID; a second start within the same second
    # gets a "-1" suffix: the run id is what must be the same
    ids = {re.search(r"offline-run-\d{8}_\d{6}-([a-z0-9]+)", r).group(1) for r in runs}
    assert len(runs) == 2 and len(ids) == 1
