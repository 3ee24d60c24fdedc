"""The dedup stages (signatures, buckets, clusters, filter) equal the single command."""

import json
import random

import pytest
import zstandard

from llmtk.dedup import stages
from tests.test_dedup import _docstrings, _edit, _jsonl
from tests.util import llmtk


class Result:
    def __init__(self, exit_code: int, output: str, stdout: str = "") -> None:
        self.exit_code, self.output, self.stdout = exit_code, output, stdout


def cli(*args, input: bytes | None = None) -> Result:
    """`llmtk ARGS` in this process, through llmtk.cli.main (one error line, exit status);
    `output` is stdout and stderr."""
    r = llmtk(*args, input=input, in_process=True)
    out, err = r.stdout.decode(), r.stderr.decode()
    return Result(r.returncode, out + err, out)


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    """Seven input files (plain and .zst, one empty, one with a bad line) of originals,
    exact and near copies; ids on three records in four, so dup_of also names positions."""
    rng = random.Random(11)
    texts = list(_docstrings())
    recs = []
    for i, t in enumerate(texts):
        recs.append({"text": t})
        if i % 3 == 0:
            recs.append({"text": t.upper()})
        if i % 3 == 1:
            recs.append({"text": _edit(t, 0.01, rng)})
    rng.shuffle(recs)
    recs = [dict(r, id=f"d{i}") if i % 4 else r for i, r in enumerate(recs * 2)]
    d = tmp_path_factory.mktemp("stages") / "in"
    d.mkdir()
    cuts = [0, 30, 31, 31, 90, 150, 200, len(recs)]
    for f, (a, b) in enumerate(zip(cuts, cuts[1:], strict=False)):
        data = _jsonl(recs[a:b])
        if f == 4:
            data += b'{"text": broken\n'
        path = d / (f"part-{f}.jsonl.zst" if f % 2 else f"part-{f}.jsonl")
        path.write_bytes(zstandard.ZstdCompressor().compress(data) if f % 2 else data)
    return d


def _single(src, out, extra):
    r = cli("dedup", src, "-o", out / "single.jsonl", "--rejects", out / "single.rej.jsonl",
            "--clusters", out / "single.cl.jsonl", "--on-error", "skip", "--stats",
            out / "single.stats.json", "-q", *extra)
    assert r.exit_code == 0, r.output


def _staged(src, work, sig_tasks, bucket_tasks, filter_tasks, params, extra):
    for k in range(sig_tasks):
        r = cli("dedup", "signatures", src, "--shard", f"{k}/{sig_tasks}", "-o", work / "sigs",
                "--on-error", "skip", "-q", *params)
        assert r.exit_code == 0, r.output
    for k in range(bucket_tasks):
        r = cli("dedup", "buckets", work / "sigs", "--shard", f"{k}/{bucket_tasks}", "-o",
                work / "buckets", "-q")
        assert r.exit_code == 0, r.output
    r = cli("dedup", "clusters", work / "buckets", "-o", work / "clusters", "-q")
    assert r.exit_code == 0, r.output
    out, rej, cl = b"", b"", b""
    for k in range(filter_tasks):
        r = cli("dedup", "filter", src, "--index", work / "clusters", "--shard",
                f"{k}/{filter_tasks}", "-o", work / f"out{k}.jsonl", "--rejects",
                work / f"rej{k}.jsonl", "--clusters", work / f"cl{k}.jsonl", "--on-error",
                "skip", "--stats", work / f"stats{k}.json", "-q", *extra)
        assert r.exit_code == 0, r.output
        out += (work / f"out{k}.jsonl").read_bytes()
        rej += (work / f"rej{k}.jsonl").read_bytes()
        cl += (work / f"cl{k}.jsonl").read_bytes()
    return out, rej, cl


@pytest.mark.parametrize("params,extra", [
    ([], []),
    (["--verify", "0.9", "--ngram", "3"], ["--annotate"]),
])
def test_stages_equal_the_single_command_byte_for_byte(corpus_dir, tmp_path, params, extra):
    _single(corpus_dir, tmp_path, params + extra)
    bands = 14
    # 3 signature tasks x (bands + exact key) x 2 key ranges, then 3 filter tasks.
    out, rej, cl = _staged(corpus_dir, tmp_path, 3, 2 * (bands + 1), 3, params, extra)
    assert out == (tmp_path / "single.jsonl").read_bytes()
    assert rej == (tmp_path / "single.rej.jsonl").read_bytes()
    assert cl == (tmp_path / "single.cl.jsonl").read_bytes()
    assert cl.count(b"\n") > 20 and (rej or b"dup_of" in out)
    # --stats of the filter tasks merge into the single run's.
    r = cli("stats", "merge", *sorted(tmp_path.glob("stats*.json")), "-o", tmp_path / "m.json")
    assert r.exit_code == 0, r.output
    merged = json.loads((tmp_path / "m.json").read_text())
    single = json.loads((tmp_path / "single.stats.json").read_text())
    for s in (merged, single):
        s.pop("seconds")
    assert merged == single


def test_small_runs_and_windows_other_task_counts(corpus_dir, tmp_path, monkeypatch):
    # Many sorted runs per signature task, many merge windows per unit and --verify's
    # edges checked a few at a time: same answer.
    monkeypatch.setattr(stages, "RUN_DOCS", 40)
    monkeypatch.setattr(stages, "WINDOW", 16)
    monkeypatch.setattr(stages, "VERIFY_EDGES", 3)
    _single(corpus_dir, tmp_path, [])
    out, rej, cl = _staged(corpus_dir, tmp_path, 2, 7, 5, [], [])
    assert out == (tmp_path / "single.jsonl").read_bytes()
    assert rej == (tmp_path / "single.rej.jsonl").read_bytes()
    assert cl == (tmp_path / "single.cl.jsonl").read_bytes()


def test_stages_refuse_mismatches_and_incomplete_parts(corpus_dir, tmp_path):
    sigs = tmp_path / "sigs"
    assert cli("dedup", "signatures", corpus_dir, "--shard", "0/2", "-o", sigs, "--on-error",
               "skip", "-q").exit_code == 0
    r = cli("dedup", "buckets", sigs, "-o", tmp_path / "b")
    assert r.exit_code == 2 and "lacks finished task(s) 1 of 2" in r.output
    r = cli("dedup", "signatures", corpus_dir, "--shard", "1/2", "-o", sigs, "--ngram", "4",
            "--on-error", "skip")
    assert r.exit_code == 2 and "other config" in r.output
    r = cli("dedup", "signatures", corpus_dir, "--shard", "1/3", "-o", sigs, "--on-error", "skip")
    assert r.exit_code == 2 and "other tasks" in r.output
    assert cli("dedup", "signatures", corpus_dir, "--shard", "1/2", "-o", sigs, "--on-error",
               "skip", "-q").exit_code == 0
    for k in range(3):
        assert cli("dedup", "buckets", sigs, "--shard", f"{k}/3", "-o", tmp_path / "b",
                   "-q").exit_code == 0
    assert cli("dedup", "clusters", tmp_path / "b", "-o", tmp_path / "c", "-q").exit_code == 0
    other = tmp_path / "other.jsonl"
    other.write_bytes(_jsonl([{"text": "x"}]))
    r = cli("dedup", "filter", other, "--index", tmp_path / "c")
    assert r.exit_code == 2 and "other input files" in r.output
    r = cli("dedup", "signatures", "-o", tmp_path / "s2", input=b'{"text": "a"}\n')
    assert r.exit_code == 2 and "not stdin" in r.output


def test_rerun_skips_finished_tasks_and_redoes_killed_ones(corpus_dir, tmp_path):
    _single(corpus_dir, tmp_path, [])
    sigs = tmp_path / "sigs"
    sigs.mkdir()
    # Task 0 was killed after renaming its part into place, before its marker; task 1 was
    # killed while writing (a temporary folder that no later stage looks at).
    (sigs / "part-00000-of-00002").mkdir()
    (sigs / "part-00000-of-00002" / "junk").write_bytes(b"half")
    (sigs / ".part-00001-of-00002.tmp-999").mkdir()
    out, rej, cl = _staged(corpus_dir, tmp_path, 2, 3, 2, [], [])
    assert out == (tmp_path / "single.jsonl").read_bytes()
    assert not (sigs / "part-00000-of-00002" / "junk").exists()
    # Every stage's finished task is skipped on a rerun, without touching its outputs.
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()}
    for args in (["dedup", "signatures", corpus_dir, "--shard", "1/2", "-o", sigs,
                  "--on-error", "skip"],
                 ["dedup", "buckets", sigs, "--shard", "2/3", "-o", tmp_path / "buckets"],
                 ["dedup", "clusters", tmp_path / "buckets", "-o", tmp_path / "clusters"],
                 ["dedup", "filter", corpus_dir, "--index", tmp_path / "clusters", "--shard",
                  "0/2", "-o", tmp_path / "out0.jsonl", "--rejects", tmp_path / "rej0.jsonl",
                  "--clusters", tmp_path / "cl0.jsonl", "--on-error", "skip", "--stats",
                  tmp_path / "stats0.json"]):
        r = cli(*args)
        assert r.exit_code == 0 and "skipping" in r.output, (args, r.output)
    assert before == {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()}


def test_edge_file_appends_windows_into_one_npz(tmp_path):
    """A unit's edges are written a window at a time; the file reads back as np.savez's."""
    import numpy as np

    path = tmp_path / "edges-b000-r00000-of-00001.npz"
    with stages._EdgeFile(str(path)) as out:
        out.add(np.array([5, 9], np.uint64), np.array([1, 2], np.uint64))
        out.add(np.zeros(0, np.uint64), np.zeros(0, np.uint64))  # a window without duplicates
        out.add(np.array([1 << 63], np.uint64), np.array([3], np.uint64))
    with np.load(path) as z:
        assert z["child"].dtype == np.uint64
        assert z["child"].tolist() == [5, 9, 1 << 63]
        assert z["owner"].tolist() == [1, 2, 3]
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporaries left
    with stages._EdgeFile(str(tmp_path / "empty.npz")) as out:
        pass
    with np.load(tmp_path / "empty.npz") as z:
        assert z["child"].shape == (0,) and z["owner"].shape == (0,)


def test_edge_file_publishes_nothing_when_the_task_dies(tmp_path):
    import numpy as np

    with pytest.raises(KeyboardInterrupt), stages._EdgeFile(str(tmp_path / "e.npz")) as out:
        out.add(np.array([5], np.uint64), np.array([1], np.uint64))
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []
