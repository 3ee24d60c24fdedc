"""`llmtk estimate --measure`: predicted bytes against the real llmtk model on CPU."""

import io
import json

import pytest

from llmtk.commands.measure import compare, measure_report
from llmtk.compute.models import Dims
from llmtk.estimate.activations import llmtk_saved_bytes
from llmtk.train.measure import config_from
from tests.util import llmtk

SHAPES = [
    # (dims, batch): MHA, GQA, a wide MLP, one layer with a big vocabulary
    (Dims(layers=4, d_model=128, heads=4, vocab=257, seq_len=128), 2),
    (Dims(layers=3, d_model=96, heads=6, kv_heads=2, vocab=300, seq_len=64), 3),
    (Dims(layers=2, d_model=64, heads=2, ffn=512, vocab=100, seq_len=96), 1),
    (Dims(layers=1, d_model=32, heads=4, kv_heads=1, vocab=4096, seq_len=40), 4),
]


@pytest.mark.parametrize("dims,batch", SHAPES)
def test_measured_matches_predicted(dims, batch):
    r = compare(config_from(None, dims), batch)
    rows = r["rows"]
    for k in ("weights", "gradients", "optimizer"):
        assert rows[k]["measured"] == rows[k]["predicted"], k
    assert abs(rows["activations"]["error"]) < 0.15, rows["activations"]
    # weights are fp32 on CPU: 4 bytes per parameter; AdamW m and v: 8
    assert rows["weights"]["measured"] == 4 * r["params"]
    assert rows["optimizer"]["measured"] == 8 * r["params"]


@pytest.mark.parametrize("dims,batch", SHAPES[1:2])
def test_full_recompute_keeps_only_layer_inputs(dims, batch):
    cfg = config_from(None, dims)
    full = compare(cfg, batch, recompute="full")["rows"]["activations"]
    assert abs(full["error"]) < 0.15, full
    normal = compare(cfg, batch)["rows"]["activations"]["measured"]
    assert full["measured"] < normal / 3
    # per layer: the layer input only, C fp32 values per token
    per_layer = llmtk_saved_bytes(cfg, batch, cfg.seq_len, recompute="full")["per_layer"]
    assert per_layer == batch * cfg.seq_len * cfg.d_model * 4


def test_activations_scale_with_batch_and_layers():
    cfg = config_from(None, Dims(layers=2, d_model=64, heads=4, vocab=100, seq_len=32))
    one, two = llmtk_saved_bytes(cfg, 1, 32), llmtk_saved_bytes(cfg, 2, 32)
    # per token, but for the head's weight gradient (Vp x C, fp32) and its token count
    fixed = cfg.padded_vocab * cfg.d_model * 4 + 8
    assert two["total"] - fixed == 2 * (one["total"] - fixed)
    got = compare(cfg, 2)["rows"]["activations"]["measured"]
    assert got == two["total"]


def test_cli_measure_json_and_table():
    args = ["estimate", "--layers", "2", "--d-model", "64", "--heads", "4", "--kv-heads", "2",
            "--vocab", "128", "--seq-len", "32", "--measure", "--batch", "2"]
    p = llmtk(*args, "--json", in_process=True)  # tensor bytes: nothing process-wide
    assert p.returncode == 0, p.stderr.decode()
    r = json.loads(p.stdout)
    assert r["config"]["n_kv_head"] == 2 and r["batch"] == 2
    assert abs(r["rows"]["activations"]["error"]) < 0.15
    # the table, from the function itself
    buf = io.StringIO()
    measure_report(None, Dims(layers=2, d_model=64, heads=4, kv_heads=2, vocab=128, seq_len=32),
                   batch=2, json_out=False, file=buf)
    table = buf.getvalue()
    for word in ("measured", "predicted", "weights", "gradients", "optimizer", "activations",
                 "big-model formula", f"{r['rows']['weights']['measured']:,}"):
        assert word in table


def test_measure_refuses_big_and_foreign_shapes():
    # GPT-2: not llmtk's model
    p = llmtk("estimate", "--model", "gpt2-124m", "--measure", in_process=True)
    assert p.returncode == 2 and b"--model" in p.stderr
    # trainable, but too big
    p = llmtk("estimate", "--model", "llama3-8b", "--measure", in_process=True)
    assert p.returncode == 2 and b"too big for a CPU check" in p.stderr
    p = llmtk("estimate", "--layers", "48", "--d-model", "4096", "--heads", "32", "--measure",
              in_process=True)
    assert p.returncode == 2 and p.stderr.decode().startswith("llmtk: error: --measure:")
