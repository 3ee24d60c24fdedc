"""Token-shard datasets: `llmtk train tokenize` as a task array, `train --data DIR`, and
blends (`--data NAME=DIR:WEIGHT`). Tokenizing runs in this process; training runs as
real processes (tests/train_runs.py), few steps of the tiny model."""

import json
import os
import signal
import time

import numpy as np
import pytest

from llmtk.io import read_docs
from llmtk.text.tokenizer import encode_batch, load_tokenizer
from llmtk.train.data.blend import BLOCK, BlendSampler, parse_spec, pattern
from llmtk.train.data.tokens import TokenDataset
from tests.train_runs import TINY, events, losses, rows
from tests.util import env, invoke, llmtk, popen_module, run_module

WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi "
         "rho sigma tau upsilon phi chi psi omega Ünïcode 漢字 кириллица").split()


def _text(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Seven uneven files (one empty, one with a line that is not JSON, one gzip-free
    .jsonl.zst), records with and without an `id`."""
    import random

    import zstandard

    rng = random.Random(7)
    d = tmp_path_factory.mktemp("inputs")
    sizes = [40, 3, 0, 120, 1, 25, 60]
    for f, n in enumerate(sizes):
        lines = []
        for i in range(n):
            rec = {"text": _text(rng, rng.randint(1, 60))}
            if i % 3:
                rec = {"id": f"f{f}-{i}" if i % 2 else i, **rec}
            lines.append(json.dumps(rec, ensure_ascii=False))
        if f == 3:
            lines.insert(17, "{not json")
        data = ("\n".join(lines) + ("\n" if lines else "")).encode()
        name = d / (f"{f:02d}.jsonl.zst" if f == 5 else f"{f:02d}.jsonl")
        name.write_bytes(zstandard.ZstdCompressor().compress(data) if f == 5 else data)
    return d


def tokenize(src, out, *more):
    code, msg = invoke("train", "tokenize", str(src), "-o", str(out), "--on-error", "skip",
                       "-q", *more)
    assert code == 0, msg
    if "--shard" not in more:
        return TokenDataset.open(str(out))


def stream(ds):
    """The dataset's token stream, document index (end offsets in the stream, identity)
    and ids, concatenated over its parts in order."""
    tokens = np.concatenate([np.asarray(p.tokens) for p in ds.parts])
    ends, keys, ids, base = [], [], [], 0
    for p in ds.parts:
        index = p.index()
        ends.append(index[:, 0].astype(np.int64) + base)
        keys.append(index[:, 1])
        ids += [p.record_id(d) for d in range(len(index))]
        base += p.manifest["tokens"]
    return tokens, np.concatenate(ends), np.concatenate(keys), ids


def test_n_tasks_make_the_one_task_dataset(inputs, tmp_path):
    one = stream(tokenize(inputs, tmp_path / "one"))
    for n in (3, 7):
        out = tmp_path / f"n{n}"
        for k in range(n):
            tokenize(inputs, out, "--shard", f"{k}/{n}")
        many = stream(TokenDataset.open(str(out)))
        assert np.array_equal(many[0], one[0]) and np.array_equal(many[1], one[1])
        assert np.array_equal(many[2], one[2]) and many[3] == one[3]
    # The stream is every good record's tokens + EOS, in input order, with its identity.
    tokens, ends, keys, ids = one
    tok = load_tokenizer("bytes")
    docs = list(read_docs(sorted(str(p) for p in inputs.iterdir()),
                          on_bad=lambda bad: None))
    assert len(docs) == len(ends) == 249
    want = np.concatenate([[*tok.encode(d.text), tok.eos_id] for d in docs])
    assert np.array_equal(tokens, want)
    assert ids == [d.id for d in docs]
    file_3 = [int(k) & ((1 << 40) - 1) for k in keys if int(k) >> 40 == 3]
    assert file_3 == [*range(17), *range(18, 121)]  # record 17 is the bad line


def test_a_window_maps_back_to_its_documents(inputs, tmp_path):
    one = tokenize(inputs, tmp_path / "ds")
    for k in range(3):
        tokenize(inputs, tmp_path / "ds3", "--shard", f"{k}/3")
    tok = load_tokenizer("bytes")
    for ds in (one, TokenDataset.open(str(tmp_path / "ds3"))):
        windows = ds.windows(64)
        # and the windows that straddle a part boundary (the 3-task dataset's)
        bounds = np.cumsum([p.manifest["tokens"] for p in ds.parts])[:-1]
        straddle = [i for i in {int(b) // 64 for b in bounds} if i < len(windows)]
        assert len(straddle) == len(ds.parts) - 1
        for i in (0, 5, len(windows) // 2, len(windows) - 1, *straddle):
            lo, hi = windows.token_range(i)
            got = []
            for doc in ds.documents(lo, hi):  # read the record back from its file
                rec = [d for d in read_docs([doc["file"]], on_bad=lambda bad: None)
                       if d.index == doc["record"]][0]
                assert rec.id == doc["id"]
                ids = [*tok.encode(rec.text), tok.eos_id]
                got += ids[doc["tokens"][0]:doc["tokens"][1]]
            assert got == windows.get(i).tolist()


def test_killed_task_leaves_nothing_and_a_rerun_finishes(inputs, tmp_path, monkeypatch):
    import llmtk.train.data.tokens as T

    out = tmp_path / "ds"
    tokenize(inputs, out, "--shard", "0/2")
    monkeypatch.setattr(T, "BATCH_DOCS", 10)
    real = T.PartWriter.add
    calls = []

    def dies(self, *a):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("killed")  # the task dies half-way
        return real(self, *a)

    monkeypatch.setattr(T.PartWriter, "add", dies)
    code, msg = invoke("train", "tokenize", str(inputs), "-o", str(out), "--shard", "1/2",
                       "--on-error", "skip", "-q")
    assert code == 1 and "RuntimeError: killed" in msg and len(calls) == 3
    assert sorted(os.listdir(out)) == ["meta.json", "part-00000-of-00002",
                                       "part-00000-of-00002.done"]
    code, msg = invoke("train", "--data", str(out), "--out", str(tmp_path / "r"))
    assert code == 1 and "ds: token dataset lacks finished task(s) 1 of 2" in msg, msg
    monkeypatch.setattr(T.PartWriter, "add", real)
    tokenize(inputs, out, "--shard", "1/2")
    code, msg = invoke("train", "tokenize", str(inputs), "-o", str(out), "--shard", "0/2")
    assert code == 0 and "is done; skipping this task" in msg
    # another tokenizer into the same folder is refused
    code, msg = invoke("train", "tokenize", str(inputs), "-o", str(out), "--shard", "0/3")
    assert code == 2 and "holds a dataset with other tasks" in msg


def test_train_refuses_a_corrupt_part_and_another_tokenizer(inputs, tmp_path):
    from llmtk.text.tokenizer import train_bpe

    out = tmp_path / "ds"
    tokenize(inputs, out)
    tok = tmp_path / "tok.json"
    train_bpe(iter([" ".join(WORDS)] * 20), 300, str(tok))
    bpe = load_tokenizer(str(tok))  # its batch encoder gives encode()'s ids
    texts = [" ".join(WORDS[i:]) + " Ünï 漢" for i in range(len(WORDS))]
    assert encode_batch(bpe, texts) == [bpe.encode(t) for t in texts]
    code, msg = invoke("train", "--data", str(out), "--tokenizer", str(tok), "--out",
                       str(tmp_path / "r"))
    assert code == 1 and "tokenized with bytes (bytes-v1), this run's tokenizer is" in msg
    code, msg = invoke("train", "--data", f"web={out}:0.5", "--data", str(inputs), "--out",
                       str(tmp_path / "r"))
    assert code == 2 and "mixes documents and token datasets" in msg
    bin_ = out / "part-00000-of-00001" / "tokens.bin"
    bin_.write_bytes(bin_.read_bytes()[:-6])
    code, msg = invoke("train", "--data", str(out), "--out", str(tmp_path / "r"))
    assert code == 1 and "tokens.bin: " in msg and "its manifest says" in msg, msg


def test_blend_shares_world_size_and_resume_positions():
    class W:  # a source of n windows whose window i is [source, i]
        seq_len = 1

        def __init__(self, s, n):
            self.s, self.n = s, n

        def __len__(self):
            return self.n

        def get(self, i):
            return np.array([self.s, i])

    weights = [0.6, 0.3, 0.1]
    sources = [W(0, 5000), W(1, 700), W(2, 90)]
    one = BlendSampler(["a", "b", "c"], sources, weights, 8, 1, 0, seed=3)
    two = [BlendSampler(["a", "b", "c"], sources, weights, 4, 2, r, seed=3) for r in (0, 1)]
    steps = 200
    for pos in range(0, steps * 8, 8):  # 1 and 2 processes: the same global batches
        assert np.array_equal(one.windows_at(pos),
                              np.concatenate([s.windows_at(pos) for s in two]))
    counts = one.counts(steps * 8)
    assert np.all(np.abs(counts / (steps * 8) - weights) <= 0.01 * np.array(weights) + 1e-9)
    # Counting matches what was drawn, and a source repeats only after an epoch.
    drawn = np.array([one.locate(p) for p in range(steps * 8)])
    assert np.array_equal(np.bincount(drawn[:, 0]), counts)
    c = drawn[drawn[:, 0] == 2][:, 1]
    assert sorted(c[:90]) == list(range(90)) and len(set(c[90:])) == len(c) - 90 > 0
    # Any position is a pure function of itself and the seed (resume needs nothing else).
    fresh = BlendSampler(["a", "b", "c"], sources, weights, 8, 1, 0, seed=3)
    assert fresh.locate(BLOCK * 3 + 17) == one.locate(BLOCK * 3 + 17)
    per_block = np.bincount(pattern(weights), minlength=3)
    assert per_block.sum() == BLOCK and np.all(np.abs(per_block - BLOCK * np.array(weights)) <= 1)
    assert one.source_tokens(2 * BLOCK) == {f"tokens/{n}": 2 * int(c)
                                            for n, c in zip("abc", per_block, strict=True)}
    assert parse_spec("data", "web=a/b:c:0.25").weight == 0.25
    assert parse_spec("data", "web=a/b:c").path == "a/b:c"
    assert parse_spec("data", "./x=y").name is None


def _train(out, *args, quiet=True):
    tiny = TINY if quiet else [a for a in TINY if a != "-q"]
    argv = ["train", "--out", str(out), *tiny, "--seq-len", "32", "--batch-size", "2", *args]
    p = run_module("llmtk", argv, environ=env())
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    return p


def test_the_cache_is_the_one_task_dataset_of_its_documents(inputs, tmp_path):
    """One token store: `train --data FILES` tokenizes into a one-task dataset, the files
    `train tokenize FILES` writes (the same stream, index, ids and checksum)."""
    from llmtk.train.data.cache import build_cache, open_cache

    files = [str(p) for p in sorted(inputs.iterdir()) if p.name != "03.jsonl"]  # no bad line
    train, val = open_cache(build_cache(files, [], load_tokenizer("bytes"),
                                        str(tmp_path / "cache")))
    code, msg = invoke("train", "tokenize", *files, "-o", str(tmp_path / "ds"), "-q")
    assert code == 0, msg
    ds = TokenDataset.open(str(tmp_path / "ds"))
    got, want = stream(train), stream(ds)
    assert all(np.array_equal(a, b) for a, b in zip(got[:3], want[:3], strict=True))
    assert got[3] == want[3] and train.parts[0].manifest == ds.parts[0].manifest
    assert {k: v for k, v in train.meta.items() if k != "cache"} == ds.meta
    assert val.docs == 0 and len(val.windows(8)) == 0  # nothing held out


def test_token_dataset_trains_as_the_cache_does(inputs, tmp_path):
    files = [str(p) for p in sorted(inputs.iterdir()) if p.name != "03.jsonl"]  # no bad line
    for k in range(3):
        code, msg = invoke("train", "tokenize", *files, "-o", str(tmp_path / "ds"), "--shard",
                           f"{k}/3", "-q")
        assert code == 0, msg
    _train(tmp_path / "cache", *(x for f in files for x in ("--data", f)), "--steps", "4")
    _train(tmp_path / "tokens", "--data", str(tmp_path / "ds"), "--steps", "4")
    assert losses(tmp_path / "tokens") == losses(tmp_path / "cache")
    # the cache keeps the same document boundaries and identities: the same batch listed
    batch = [[{**json.loads(line), "source": None} for line in llmtk(
        "train", "batch", tmp_path / run, "--step", "3", "--json", in_process=True
    ).stdout.splitlines()] for run in ("cache", "tokens")]
    assert batch[0] == batch[1] and {d["window"] for d in batch[0]} == {4, 5}


@pytest.mark.integration
def test_blended_run_resumes_bit_exactly_after_sigkill(inputs, tmp_path):
    # (tokenize arrays on `llmtk run`: docs/cluster.md, run by tests/test_doc_commands.py)
    for k in range(2):
        tokenize(inputs, tmp_path / "a", "--shard", f"{k}/2")
    tokenize(sorted(inputs.iterdir())[3], tmp_path / "b")
    args = ["--data", f"web={tmp_path / 'a'}:0.75", "--data", f"code={tmp_path / 'b'}:0.25",
            "--val-data", f"code={tmp_path / 'b'}", "--eval-every", "3", "--eval-batches", "1",
            "--steps", "6", "--checkpoint-every", "2", "--max-epochs", "0.001"]
    ref = _train(tmp_path / "ref", *args, quiet=False)
    assert "warning: code is read 0.00" in ref.stderr.decode()  # --max-epochs
    # The same run SIGKILLed after step 3, then the same command again: it resumes from a
    # checkpoint and every step, before and after the kill, equals the uninterrupted run.
    out = tmp_path / "run"
    argv = ["train", "--out", str(out), *TINY, "--seq-len", "32", "--batch-size", "2", *args]
    proc = popen_module("tests.train_driver", argv, env(LLMTK_TEST_FAULTS='{"step_delay": 0.3}'))
    deadline = time.time() + 120
    while time.time() < deadline:
        if (out / "metrics.jsonl").exists() and any(r.get("step", 0) >= 3 for r in rows(out)):
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    assert max(r["step"] for r in rows(out)) < 6  # really interrupted
    _train(out, *args)
    assert events(out, "resume")
    assert losses(out) == losses(tmp_path / "ref")
    train_rows = [r for r in rows(tmp_path / "ref") if "loss" in r]
    assert [r["tokens/web"] + r["tokens/code"] for r in train_rows] == \
        [r["tokens"] for r in train_rows]
    assert train_rows[-1]["tokens/code"] == 3 * 32
    vals = [r for r in rows(tmp_path / "ref") if "val/code/loss" in r]
    assert [r["step"] for r in vals] == [3, 6] and vals[0]["val_loss"] == vals[0]["val/code/loss"]
    _check_train_batch(tmp_path / "ref", [tmp_path / "a", tmp_path / "b"])


def _check_train_batch(run, dirs):
    """`llmtk train batch --json` lists each window's documents: their text, read back from
    the files and tokenized, gives the window's tokens; the ranks' shares make the batch."""
    from llmtk.train.config import TrainConfig, section
    from llmtk.train.data.inputs import DataSpec, open_training_data, recorded_source

    config = json.loads((run / "config.json").read_text())
    p = llmtk("train", "batch", run, "--step", "4", "--json", in_process=True)
    assert p.returncode == 0, p.stderr
    docs = [json.loads(line) for line in p.stdout.splitlines()]
    assert {d["window"] for d in docs} == {6, 7}  # step 4 of 2 windows per step
    tok = load_tokenizer("bytes")
    cfg = TrainConfig(**config["train"])
    spec = section(DataSpec, cfg)
    sampler = open_training_data(spec, recorded_source(spec, config["cache"]), 32, 1, 0).train
    for w in (6, 7):
        got = []
        for d in (d for d in docs if d["window"] == w):
            assert d["file"].endswith(".jsonl") and isinstance(d["record"], int)
            got += [*tok.encode(d["text"]), tok.eos_id][d["tokens"][0]:d["tokens"][1]]
        assert got == sampler.windows_at(w)[0].tolist()
    # The same batch on 2 data-parallel ranks, as a 2-process run records it.
    config["world_size"], config["train"]["batch_size"] = 2, 1
    config["layout"]["dp_shard"] = 2
    (run / "config.json").write_text(json.dumps(config))
    shares = [llmtk("train", "batch", run, "--step", "4", "--json", "--rank", r,
                    in_process=True).stdout for r in (0, 1)]
    assert [json.loads(line) for s in shares for line in s.splitlines()] == \
        [{**d, "rank": d["window"] - 6} for d in docs]



def test_a_large_epoch_is_ordered_without_an_array(monkeypatch):
    """Past ORDER_IN_MEMORY windows the epoch order is a keyed Feistel bijection: every
    window once per epoch, another order per epoch and seed, nothing held per window."""
    import llmtk.train.data.cache as D

    for n in (1, 2, 3, 17, 1000, 4099):
        order = D.FeistelOrder(n, [5, 0])
        assert sorted(order[i] for i in range(n)) == list(range(n))
    big = D.FeistelOrder(10**12, [5, 0])
    assert len({big[i] for i in range(2000)}) == 2000 and max(big[i] for i in range(50)) > 10**11
    monkeypatch.setattr(D, "ORDER_IN_MEMORY", 10)

    class W:
        seq_len = 1

        def __len__(self):
            return 500

    sampler = D.Sampler(W(), 1, 1, 0, seed=5)
    epochs = [[sampler.locate(e * 500 + i)[1] for i in range(500)] for e in (0, 1)]
    assert isinstance(sampler._perm, D.FeistelOrder)
    assert sorted(epochs[0]) == sorted(epochs[1]) == list(range(500)) and epochs[0] != epochs[1]
