"""`llmtk dedup`: exact and near-duplicates with known answers, streaming, stages, index."""

import functools
import hashlib
import inspect
import json
import random

import numpy as np
import pytest

from llmtk.dedup.config import DedupConfig, bands_rows_for, candidate_probability
from llmtk.dedup.minhash import MinHasher
from llmtk.dedup.table import HashTable
from tests.util import llmtk, shell

# -- fixtures: real text from the standard library's docstrings ----------------------


@functools.cache
def _docstrings(min_len: int = 600, limit: int = 60) -> list[str]:
    import argparse
    import collections
    import difflib
    import email.message
    import json as json_mod
    import logging
    import pathlib
    import shutil
    import subprocess
    import tarfile
    import threading
    import unittest
    import zipfile

    seen, texts = set(), []
    modules = (argparse, collections, difflib, email.message, json_mod, logging, pathlib, shutil,
               subprocess, tarfile, threading, unittest, zipfile)
    objects = []
    for module in modules:
        for _, obj in sorted(vars(module).items()):
            if inspect.isclass(obj) or inspect.isfunction(obj):
                objects.append(obj)
                if inspect.isclass(obj):
                    objects.extend(v for _, v in sorted(vars(obj).items()) if inspect.isfunction(v))
    hasher = MinHasher(DedupConfig())
    shingle_sets = []
    for obj in objects:
        doc = inspect.getdoc(obj)
        if doc and len(doc) >= min_len and doc not in seen and len(doc.split()) >= 80:
            seen.add(doc)
            # Keep the fixture free of near-duplicates of its own (similar methods' docs).
            s = _shingle_set(hasher, doc)
            if all(len(s & t) / len(s | t) < 0.2 for t in shingle_sets):
                shingle_sets.append(s)
                texts.append(doc)
    assert len(texts) >= limit, "not enough stdlib docstrings for the fixture"
    return tuple(texts[:limit])


def _edit(text: str, rate: float, rng: random.Random) -> str:
    """Substitute a `rate` share of the words with new ones."""
    words = text.split(" ")
    for i in rng.sample(range(len(words)), max(1, int(rate * len(words)))):
        words[i] = f"zq{rng.randrange(10**6)}"
    return " ".join(words)


def _jsonl(records) -> bytes:
    return b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in records)


def _lines(data: bytes) -> list[dict]:
    return [json.loads(line) for line in data.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def corpus():
    """Originals, exact copies (case/spacing changed) and 1%-edited near copies, shuffled.

    Returns (records, expected): expected maps the id of every duplicate to
    (reason, id of the original it copies).
    """
    rng = random.Random(7)
    originals = _docstrings()
    records = [{"id": f"o{i}", "text": t} for i, t in enumerate(originals)]
    dups = []
    for i, t in enumerate(originals):
        if i % 3 == 0:
            exact = "  " + t.replace(" ", "  ").replace(".", "!") + "\n"  # same when normalised
            dups.append(({"id": f"x{i}", "text": exact}, ("dedup.exact", f"o{i}")))
        elif i % 3 == 1:
            dups.append(({"id": f"n{i}", "text": _edit(t, 0.01, rng)}, ("dedup.minhash", f"o{i}")))
    # Duplicates come after their original, interleaved with other documents.
    out, expected = list(records), {}
    for rec, exp in dups:
        pos = next(k for k, r in enumerate(out) if r["id"] == exp[1])
        out.insert(rng.randrange(pos + 1, len(out) + 1), rec)
        expected[rec["id"]] = exp
    return out, expected


# -- MinHash itself -----------------------------------------------------------------


def _shingle_set(hasher, text):
    return set(hasher.shingles(text).tolist())


def test_signature_jaccard_estimates_match_exact_and_datasketch(corpus):
    datasketch = pytest.importorskip("datasketch")
    hasher = MinHasher(DedupConfig())
    rng = random.Random(3)
    texts = _docstrings()
    ours, theirs = [], []
    for i in range(24):
        a = texts[i]
        b = _edit(a, rng.choice([0.02, 0.05, 0.1, 0.2]), rng)
        sa, sb = _shingle_set(hasher, a), _shingle_set(hasher, b)
        true = len(sa & sb) / len(sa | sb)
        sig = hasher.signatures([np.array(sorted(sa), np.uint64), np.array(sorted(sb), np.uint64)])
        ours.append(abs(float((sig[0] == sig[1]).mean()) - true))
        ma, mb = (datasketch.MinHash(num_perm=112, seed=1) for _ in range(2))
        ma.update_batch([x.to_bytes(8, "little") for x in sa])
        mb.update_batch([x.to_bytes(8, "little") for x in sb])
        theirs.append(abs(ma.jaccard(mb) - true))
    # 112 permutations: standard error ~ sqrt(J(1-J)/112) <= 0.047.
    assert np.mean(ours) < 0.04, ours
    assert np.mean(ours) < np.mean(theirs) * 1.5 + 0.01, (np.mean(ours), np.mean(theirs))


def test_shingles_are_stable_and_normalised():
    hasher = MinHasher(DedupConfig())
    a = hasher.shingles("The quick, brown fox jumps over the lazy dog 1999.")
    b = hasher.shingles("the quick brown   FOX jumps over the lazy dog 2024")
    assert a.dtype == np.uint64 and len(a) == 6
    assert np.array_equal(a, b)  # case, punctuation, spacing and digits normalised away
    # Fixed across processes and versions: the same 64-bit value every time.
    again = MinHasher(DedupConfig()).shingles("The quick, brown fox jumps over the lazy dog 1999.")
    assert np.array_equal(a, again)
    assert len(hasher.shingles("")) == 0
    assert len(hasher.shingles("two words")) == 1


def test_cjk_text_uses_character_shingles():
    hasher = MinHasher(DedupConfig())
    text = "我们今天去公园散步，天气很好。"
    assert hasher.unit_for(text) == "char"
    assert hasher.unit_for("plain English words") == "word"
    assert len(hasher.shingles(text)) == len("我们今天去公园散步天气很好") - 4


def test_hash_table_matches_a_dict():
    rng = np.random.default_rng(0)
    table, ref = HashTable(16), {}
    for _ in range(20):
        keys = rng.integers(1, 2**63, size=500, dtype=np.uint64)
        keys[:50] = keys[50:100]  # repeats inside a batch
        found = table.get(keys)
        for k, v in zip(keys.tolist(), found.tolist(), strict=True):
            assert v == ref.get(k, -1)
        new = np.unique(keys[found < 0])
        table.insert_new(new, new.astype(np.int64) % 1000)
        ref.update({k: k % 1000 for k in new.tolist()})
    assert table.size == len(ref)
    assert table.size <= 0.5 * table.capacity


@pytest.mark.parametrize("threshold", [0.5, 0.7, 0.8, 0.9])
def test_threshold_picks_bands_and_rows_around_it(threshold):
    bands, rows = bands_rows_for(threshold)
    assert bands * rows <= 112
    # The S-curve crosses 1/2 near the requested similarity.
    grid = np.linspace(0, 1, 1001)
    half = grid[np.argmax(candidate_probability(grid, bands, rows) >= 0.5)]
    assert abs(half - threshold) < 0.08, (bands, rows, half)


# -- the command --------------------------------------------------------------------


def test_exact_and_near_duplicates_found_with_reasons(corpus, tmp_path):
    records, expected = corpus
    rejects = tmp_path / "rejects.jsonl"
    r = llmtk("dedup", "--rejects", rejects, input=_jsonl(records))
    assert r.returncode == 0, r.stderr
    kept = _lines(r.stdout)
    dropped = _lines(rejects.read_bytes())
    assert {d["id"]: (d["llmtk"]["reason"], d["llmtk"]["dup_of"]) for d in dropped} == expected
    # Kept documents are untouched, in input order; in = out + rejects.
    kept_ids = [d["id"] for d in kept]
    assert kept_ids == [d["id"] for d in records if d["id"] not in expected]
    assert r.stdout == _jsonl(d for d in records if d["id"] not in expected)
    assert len(kept) + len(dropped) == len(records)


def test_unrelated_documents_are_all_kept():
    texts = _docstrings()
    r = llmtk("dedup", "-q", input=_jsonl({"text": t} for t in texts))
    assert r.returncode == 0 and len(_lines(r.stdout)) == len(texts)


def test_cjk_near_duplicates(tmp_path):
    rng = random.Random(11)
    common = [chr(c) for c in range(0x4E00, 0x4E00 + 3000)]
    docs, expected = [], {}
    for i in range(8):
        base = "".join(rng.choice(common) for _ in range(400))
        docs.append({"id": f"z{i}", "text": base})
        chars = list(base)
        for k in rng.sample(range(len(chars)), 3):  # 3 of 400 characters changed: J ~ 0.93
            chars[k] = rng.choice(common)
        docs.append({"id": f"z{i}-near", "text": "".join(chars)})
        expected[f"z{i}-near"] = f"z{i}"
    rejects = tmp_path / "r.jsonl"
    r = llmtk("dedup", "--rejects", rejects, "-q", input=_jsonl(docs))
    assert r.returncode == 0, r.stderr
    got = {d["id"]: d["llmtk"]["dup_of"] for d in _lines(rejects.read_bytes())}
    assert got == expected
    assert {d["llmtk"]["reason"] for d in _lines(rejects.read_bytes())} == {"dedup.minhash"}


def test_same_bytes_for_any_workers(corpus, tmp_path):
    records, _ = corpus
    data = _jsonl(records * 3)  # repeats across --workers chunks too
    outs = []
    for workers in ("1", "3"):
        rej = tmp_path / f"rej{workers}.jsonl"
        r = llmtk("dedup", "--workers", workers, "--rejects", rej, "-q", input=data)
        assert r.returncode == 0, r.stderr
        outs.append((hashlib.sha256(r.stdout).hexdigest(), rej.read_bytes()))
    assert outs[0] == outs[1]


def test_save_and_load_index(corpus, tmp_path):
    records, expected = corpus
    old, new = records[: len(records) // 2], records[len(records) // 2 :]
    r = llmtk("dedup", "--save-index", tmp_path / "idx", "-q", input=_jsonl(old))
    assert r.returncode == 0, r.stderr
    rej = tmp_path / "rej.jsonl"
    r = llmtk("dedup", "--index", tmp_path / "idx", "--rejects", rej, "-q", input=_jsonl(new))
    assert r.returncode == 0, r.stderr
    # The same decisions as deduplicating old + new in one go, for the new part.
    whole = tmp_path / "whole.jsonl"
    both = llmtk("dedup", "--rejects", whole, "-q", input=_jsonl(records))
    new_ids = {d["id"] for d in new}
    assert r.stdout == b"".join(
        line + b"\n" for line in both.stdout.splitlines() if json.loads(line)["id"] in new_ids)
    assert _lines(rej.read_bytes()) == [
        d for d in _lines(whole.read_bytes()) if d["id"] in new_ids]
    assert any(d["llmtk"]["dup_of"] in {x["id"] for x in old} for d in _lines(rej.read_bytes()))
    # Other parameters than the index was built with: a usage error.
    r = llmtk("dedup", "--index", tmp_path / "idx", "--ngram", "3", input=_jsonl(new))
    assert r.returncode == 2 and b"ngram=5" in r.stderr


def test_keep_longest(tmp_path):
    base = _docstrings()[0]
    docs = [
        {"id": "short", "text": base},
        {"id": "other", "text": _docstrings()[1]},
        {"id": "long", "text": base + " And one more closing sentence here."},
        {"id": "same", "text": base},
    ]
    rej = tmp_path / "rej.jsonl"
    r = llmtk("dedup", "--keep", "longest", "--rejects", rej, "-q", input=_jsonl(docs))
    assert r.returncode == 0, r.stderr
    assert [d["id"] for d in _lines(r.stdout)] == ["other", "long"]
    got = {d["id"]: (d["llmtk"]["reason"], d["llmtk"]["dup_of"]) for d in _lines(rej.read_bytes())}
    assert got == {"short": ("dedup.minhash", "long"), "same": ("dedup.minhash", "long")}


def test_annotate_and_clusters(corpus, tmp_path):
    records, expected = corpus
    cl = tmp_path / "clusters.jsonl"
    r = llmtk("dedup", "--annotate", "--clusters", cl, "-q", input=_jsonl(records))
    assert r.returncode == 0, r.stderr
    out = _lines(r.stdout)
    assert len(out) == len(records)
    marked = {d["id"]: (d["llmtk"]["dup_reason"], d["llmtk"]["dup_of"]) for d in out
              if "llmtk" in d}
    assert marked == expected
    lines = _lines(cl.read_bytes())
    heads = {d["id"] for d in lines if d["id"] == d["cluster"]}
    assert heads == {orig for _, orig in expected.values()}
    assert {d["id"]: d["cluster"] for d in lines if d["id"] != d["cluster"]} == {
        k: v for k, (_, v) in expected.items()}


def test_paragraph_level_removes_repeated_lines(tmp_path):
    footer = "Copyright 2024 Example Corp. All rights reserved."
    docs = [
        {"id": 1, "text": f"First article body.\n\n{footer}"},
        {"id": 2, "text": f"Second article, other words.\n\n{footer}"},
        {"id": 3, "text": f"copyright 2025 example corp all rights reserved\n{footer}"},
        {"id": 4, "text": "Second article, other words."},
    ]
    rej = tmp_path / "rej.jsonl"
    r = llmtk("dedup", "--level", "paragraph", "--rejects", rej, "--stats", tmp_path / "s.json",
              input=_jsonl(docs))
    assert r.returncode == 0, r.stderr
    assert [(d["id"], d["text"]) for d in _lines(r.stdout)] == [
        (1, f"First article body.\n\n{footer}"),
        (2, "Second article, other words.\n"),
    ]
    assert [(d["id"], d["llmtk"]["reason"]) for d in _lines(rej.read_bytes())] == [
        (3, "dedup.paragraph"), (4, "dedup.paragraph")]
    stats = json.loads((tmp_path / "s.json").read_text())
    assert stats["counts"]["dedup.paragraphs_removed"] == 4
    r = llmtk("dedup", "--level", "paragraph", "--max-repeats", "2", "-q", input=_jsonl(docs))
    # The footer's 3rd and 4th occurrences are both in doc 3; doc 4's line is only the 2nd.
    assert [d["id"] for d in _lines(r.stdout)] == [1, 2, 4]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--threshold", "0.8", "--bands", "10"], b"--threshold"),
        (["--unit", "syllable"], b"--unit"),
        (["--normalise", "lowercase,accents"], b"--normalise"),
        (["--keep", "last"], b"--keep"),
        (["--level", "sentence"], b"--level"),
        (["--threshold", "1.5"], b"--threshold"),
        (["--bands", "200", "--rows", "8"], b"--bands"),
    ],
)
def test_usage_errors_exit_2(args, needle):
    r = llmtk("dedup", *args, input=b'{"text": "x"}\n')
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr and b"Traceback" not in r.stderr


def test_bad_json_is_a_data_error_with_location():
    r = llmtk("dedup", input=b'{"text": "fine"}\n{"text": \n')
    assert r.returncode == 1
    assert r.stderr.startswith(b"llmtk: error: <stdin>:2:")


def test_help_has_default_usage_and_examples():
    r = llmtk("dedup", "--help")
    assert r.returncode == 0
    assert b"llmtk dedup [OPTIONS]" in r.stdout and b"Examples" in r.stdout
    assert b"signatures" in r.stdout
    for stage in ("signatures", "buckets", "clusters", "filter"):
        r = llmtk("dedup", stage, "-h")
        assert r.returncode == 0 and b"Examples" in r.stdout, stage


@pytest.mark.integration
def test_pipe_into_head_is_quiet(corpus, tmp_path):
    rng = random.Random(5)
    vocab = sorted({w for t in _docstrings() for w in t.split()})
    src = tmp_path / "in.jsonl"
    # Enough distinct records (random word salad) that output outlasts the pipe buffer.
    src.write_bytes(_jsonl({"id": i, "text": " ".join(rng.choices(vocab, k=60))}
                           for i in range(3000)))
    for extra in ({}, {"PYTHONUNBUFFERED": "1"}):
        # llmtk's own status: cat may die of SIGPIPE once llmtk stops reading.
        r = shell(f"cat {src} | llmtk dedup | head -1; echo \"status=${{PIPESTATUS[1]}}\"",
                  **extra)
        lines = r.stdout.splitlines()
        assert lines[-1] == b"status=0", r.stderr
        assert r.stderr == b""
        assert len(lines) == 2


def test_paragraph_level_same_bytes_for_any_workers(tmp_path):
    texts = _docstrings()
    footer = "Read the full documentation online."
    docs = [{"id": i, "text": f"{t}\n{footer}\n{texts[(i + 1) % len(texts)].splitlines()[0]}"}
            for i, t in enumerate(texts * 3)]
    outs = [llmtk("dedup", "--level", "paragraph", "--workers", w, "-q", input=_jsonl(docs))
            for w in ("1", "2")]
    assert outs[0].returncode == 0, outs[0].stderr
    assert outs[0].stdout == outs[1].stdout
    kept = _lines(outs[0].stdout)
    assert sum(footer in d["text"] for d in kept) == 1


def test_verify_rejects_band_matches_below_the_estimate(corpus, tmp_path):
    records, expected = corpus
    data = _jsonl(records)
    strict = tmp_path / "strict.jsonl"
    r = llmtk("dedup", "--verify", "0.97", "--rejects", strict, "-q", input=data)
    assert r.returncode == 0, r.stderr
    # The 1%-edited copies (true Jaccard ~0.9) share bands but fail a 0.97 check;
    # exact copies do not need one.
    got = {d["id"]: d["llmtk"]["reason"] for d in _lines(strict.read_bytes())}
    assert got == {k: v for k, (v, _) in expected.items() if v == "dedup.exact"}
    r = llmtk("dedup", "--verify", "0.7", "-q", input=data)
    assert len(_lines(r.stdout)) == len(records) - len(expected)
    # An index keeps the signature bytes that --verify needs.
    half = len(records) // 2
    llmtk("dedup", "--verify", "0.7", "--save-index", tmp_path / "idx", "-q",
          input=_jsonl(records[:half]), check=True)
    r2 = llmtk("dedup", "--verify", "0.7", "--index", tmp_path / "idx", "-q",
               input=_jsonl(records[half:]))
    assert r2.returncode == 0, r2.stderr
    assert r2.stdout == b"".join(line + b"\n" for line in r.stdout.splitlines()
                                 if json.loads(line)["id"] in {d["id"] for d in records[half:]})
