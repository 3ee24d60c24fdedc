"""The data behind a loss spike: a tiny run on the in-process token cache with a batch of
garbage documents planted at a known data position. `diagnose` finds the spike and prints
`llmtk train batch` for its step, which lists the planted documents; per-layer gradient
norms name a layer; `--on-spike rollback` records the planted documents in its event and
`train batch --skipped` lists them. Training runs as real processes (tests/train_runs.py)."""

import json
import os
import random
import shutil

import pytest

from llmtk.curves.detect import diagnose
from llmtk.curves.logs import load_run
from llmtk.train.data.cache import old_caches, window_order
from tests.train_runs import TINY, events
from tests.util import env, llmtk, run_module

T, B, SEED = 32, 4, 0      # seq-len, batch size, seed: one document per window (below)
DOCS, PLANTED = 160, 16  # the planted batch is step 16's
WORDS = ("the of and to in is that for it as with was on be by this are from or have an not "
         "which but at they one all data model value list file name when return").split()


def _normal(rng) -> str:
    text = ""
    while len(text) < T - 1:
        text += rng.choice(WORDS) + " "
    return text[:T - 1]  # T - 1 bytes, + EOS: each document is exactly one window's stride


def _garbage(rng, k: int) -> str:
    if k % 2:  # one repeated token, a byte the text never has
        return "\x01" * (T - 1)
    # random bytes: two-byte characters no normal document has, plus one to make T - 1
    return "".join(chr(rng.randrange(0x400, 0x7ff)) for _ in range((T - 2) // 2)) + "~"


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """The corpus: document d fills window d (bytes tokenizer, T tokens each with its
    EOS), so the windows step PLANTED reads (the sampler's seeded order) hold garbage."""
    rng = random.Random(1)
    d = tmp_path_factory.mktemp("planted")
    order = window_order(DOCS - 1, [SEED, 0])  # DOCS * T tokens make DOCS - 1 windows
    bad = {int(order[(PLANTED - 1) * B + j]): j for j in range(B)}
    with open(d / "docs.jsonl", "w") as f:
        for i in range(DOCS):
            text = _garbage(rng, bad[i]) if i in bad else _normal(rng)
            f.write(json.dumps({"id": f"{'bad' if i in bad else 'doc'}-{i}", "text": text})
                    + "\n")
    return d, sorted(f"bad-{i}" for i in bad)


def _train(d, out, *args):
    argv = ["train", "--data", str(d / "docs.jsonl"), "--cache-dir", str(d / "cache"),
            "--out", str(out), *TINY, "--seq-len", str(T), "--batch-size", str(B),
            "--seed", str(SEED), "--spike-factor", "1.1", *args]
    p = run_module("llmtk", argv, environ=env())
    assert p.returncode == 0, p.stderr.decode()[-3000:]


def _ids(*argv) -> list[str]:
    """The ids of the documents `train batch ARGV` lists that fill a window (not the
    one-token head of the next document each window ends with)."""
    p = llmtk("train", "batch", *argv, "--json", in_process=True)
    assert p.returncode == 0, p.stderr
    return [d["id"] for d in map(json.loads, p.stdout.splitlines()) if d["tokens"] == [0, T]]


def test_the_planted_batch_is_found_named_and_rolled_back(planted, tmp_path):
    d, bad = planted
    run = tmp_path / "run"
    _train(d, run, "--steps", str(PLANTED + 2), "--grad-stats", "per-layer",
           "--grad-stats-every", "4")
    findings = diagnose(load_run(str(run / "metrics.jsonl")))
    spikes = [f for f in findings if f.kind in ("spike", "spikes")]
    assert spikes and spikes[0].step == PLANTED, [f.summary for f in findings]
    command = f"llmtk train batch {run} --step {PLANTED}"
    assert command in spikes[0].commands
    p = llmtk("diagnose", run / "metrics.jsonl", in_process=True)
    assert command in p.stdout.decode(), p.stdout.decode()
    # the command's documents: the planted ones, each the whole of its window but the
    # window's last token (the next document's first)
    assert sorted(_ids(run, "--step", str(PLANTED))) == bad
    (layer,) = [f for f in findings if f.kind == "layer_grads"]
    assert layer.step == PLANTED and "per-layer gradient norms" in layer.summary

    rolled = tmp_path / "rolled"
    _train(d, rolled, "--steps", str(PLANTED), "--on-spike", "rollback",
           "--checkpoint-every", str(PLANTED - 2))
    (rb,) = events(str(rolled), "rollback")
    assert rb["from_step"] == PLANTED and rb["to_step"] == PLANTED - 2
    recorded = {doc["id"] for doc in rb["documents"]}
    assert set(bad) <= recorded
    assert all(doc["file"].endswith("docs.jsonl") for doc in rb["documents"])
    (named,) = [f for f in diagnose(load_run(str(rolled / "metrics.jsonl")))
                if f.kind == "rollback"]
    assert named.step == PLANTED and named.commands == [f"llmtk train batch {rolled} --skipped"]
    skipped = _ids(rolled, "--skipped")
    assert set(bad) <= set(skipped) <= recorded and len(skipped) == 2 * B
    # after the rollback, step PLANTED trained on the batches after the skipped ones
    assert not set(bad) & set(_ids(rolled, "--step", str(PLANTED)))

    # a cache before version 3 (its own files, windows cut per shard): train batch refuses
    # it and says what to do; a run beside it notices it (old_caches)
    cache = json.loads((run / "config.json").read_text())["cache"]
    shutil.rmtree(os.path.join(cache, "train"))
    with open(os.path.join(cache, "meta.json"), "w") as f:
        json.dump({"version": 2}, f)
    p = llmtk("train", "batch", run, "--step", "1", in_process=True)
    assert p.returncode == 1 and b"a token cache written by an older llmtk" in p.stderr
    assert old_caches(os.path.dirname(cache)) == [os.path.basename(cache)]


def test_an_old_cache_beside_a_new_one_is_noticed_in_one_line(tmp_path):
    from llmtk.text.tokenizer import ByteTokenizer
    from llmtk.train.data.cache import CACHE_VERSION, build_cache

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"text": f"document {i} " * 5}) + "\n"
                            for i in range(20)))
    old = tmp_path / "cache" / "0123456789abcdef"
    old.mkdir(parents=True)
    (old / "meta.json").write_text(json.dumps({"version": 1}))
    said: list[str] = []
    built = build_cache([str(data)], [], ByteTokenizer(), str(tmp_path / "cache"),
                        log=said.append)
    notes = [line for line in said if line.startswith("note:")]
    assert len(notes) == 1 and "1 cache(s) of an older version" in notes[0]
    assert f"version {CACHE_VERSION}" in notes[0]
    assert json.loads(open(os.path.join(built, "train", "meta.json")).read())["cache"][
        "version"] == CACHE_VERSION


def test_resuming_a_run_begun_on_an_older_cache_of_the_same_data_gives_no_warning(tmp_path):
    """The cache of the same inputs is rebuilt under a new CACHE_VERSION with a new name;
    a checkpoint naming the old one resumes on the same data, silently."""
    from llmtk.text.tokenizer import ByteTokenizer
    from llmtk.train.checkpoint.checkpointer import check_shape
    from llmtk.train.data.cache import build_cache, cache_key
    from llmtk.train.model.config import ModelConfig

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"text": f"document {i} " * 5}) + "\n"
                            for i in range(20)))
    tok = ByteTokenizer()
    built = build_cache([str(data)], [], tok, str(tmp_path / "cache"))
    mcfg = ModelConfig(vocab_size=tok.vocab_size, seq_len=16, n_layer=1, n_head=2, d_model=16)

    def warnings(saved_cache: str) -> list[str]:
        said: list[str] = []
        state = {"model_config": mcfg.to_dict(), "seq_len": 16, "windows_per_step": 4,
                 "world_size": 1, "data_cache": saved_cache}
        check_shape(state, "ckpt", mcfg, say=said.append, for_init=False,
                    windows_per_step=4, world=1, cache=built)
        return said

    v1 = cache_key([str(data)], [], tok.fingerprint(), "text", 0.0, version=1)
    assert v1 != os.path.basename(built)
    assert warnings(v1) == [] and warnings(os.path.basename(built)) == []
    other = cache_key([str(data)], [], tok.fingerprint(), "content", 0.0, version=1)
    assert warnings(other) == ["warning: resuming ckpt on different data (the data position "
                               "is kept)"]


def test_nan_findings_name_their_step_and_only_for_an_llmtk_run(tmp_path):
    rows = [{"step": s, "loss": "NaN" if s == 7 else 4 - s / 10, "grad_norm": 1.0}
            for s in range(1, 13)]
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (nan,) = [f for f in diagnose(load_run(str(run / "metrics.jsonl"))) if f.kind == "nan"]
    assert nan.commands == []  # no config.json beside it: not an llmtk run to trace
    (run / "config.json").write_text("{}")
    (nan,) = [f for f in diagnose(load_run(str(run))) if f.kind == "nan"]
    assert nan.step == 7 and nan.commands == [f"llmtk train batch {run} --step 7"]
