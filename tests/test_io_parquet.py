"""Parquet and Hugging Face `datasets` folders as input, `-o x.parquet` as output."""

import json
import subprocess
import sys

import pytest

from tests.util import InProcess, env, llmtk

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


@pytest.fixture
def cli():
    return InProcess()


def records(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def make_table(n: int, start: int = 0):
    return pa.table({
        "id": [f"doc-{i}" for i in range(start, start + n)],
        "text": [f"document number {i} " * 3 for i in range(start, start + n)],
        "score": [i / 10 for i in range(start, start + n)],
        "tags": [[f"t{i % 3}", "x"] for i in range(start, start + n)],
        "meta": [{"url": f"https://example.org/{i}", "len": i} for i in range(start, start + n)],
    })


@pytest.fixture
def pq_file(tmp_path):
    path = tmp_path / "data.parquet"
    pq.write_table(make_table(250), path, row_group_size=100)  # 3 row groups
    return path


def test_parquet_input_every_column_becomes_a_field(cli, pq_file):
    r = cli("cat", pq_file, "-q")
    assert r.exit_code == 0, r.output
    out = records(r.stdout)
    assert len(out) == 250
    assert out[7] == {"id": "doc-7", "text": "document number 7 " * 3, "score": 0.7,
                      "tags": ["t1", "x"], "meta": {"url": "https://example.org/7", "len": 7}}
    assert list(out[0]) == ["id", "text", "score", "tags", "meta"]  # the schema's order


def test_parquet_is_detected_by_content_not_name(cli, tmp_path, pq_file):
    odd = tmp_path / "shard-000.data"
    odd.write_bytes(pq_file.read_bytes())
    r = cli("cat", odd, "-q")
    assert r.exit_code == 0 and len(records(r.stdout)) == 250


def test_folders_and_globs_of_parquet_in_sorted_order(cli, tmp_path):
    d = tmp_path / "corpus"
    (d / "sub").mkdir(parents=True)
    pq.write_table(make_table(5, 0), d / "b.parquet")
    pq.write_table(make_table(5, 5), d / "a.parquet")
    pq.write_table(make_table(5, 10), d / "sub" / "c.parquet")
    (d / "notes.json").write_text('{"text": "not data"}\n')  # plain .json: not picked
    ids = [r["id"] for r in records(cli("cat", d, "-q").stdout)]
    assert ids == [f"doc-{i}" for i in (5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 10, 11, 12, 13, 14)]
    ids = [r["id"] for r in records(cli("cat", f"{d}/*.parquet", "-q").stdout)]
    assert len(ids) == 10


def test_null_text_is_a_bad_record_with_file_and_row(cli, tmp_path):
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"text": ["fine", None, "also fine"], "n": [1, 2, 3]}), path)
    r = cli("cat", path)
    assert r.exit_code == 1
    assert f"{path}:2: field 'text' is not a string" in r.output
    stats = tmp_path / "s.json"
    r = cli("cat", path, "--on-error", "skip", "--stats", stats, "-q")
    assert r.exit_code == 0 and [x["n"] for x in records(r.stdout)] == [1, 3]
    s = json.loads(stats.read_text())
    assert s["records_in"] == 3 and s["records_out"] == 2
    assert s["errors"] == {"io.text_not_string": 1}
    r = cli("cat", path, "--text-field", "body")
    assert r.exit_code == 1 and "x.parquet:1: no 'body' field" in r.output


def test_reading_streams_one_batch_at_a_time(tmp_path):
    """Bounded memory: the first record arrives while Arrow holds a fraction of the file."""
    from llmtk.io import read_docs

    path = tmp_path / "big.parquet"
    n = 40_000
    big = pa.table({"text": [f"{i:08d} " + "lorem ipsum dolor sit amet " * 20 for i in range(n)]})
    pq.write_table(big, path, row_group_size=4000)
    total = big.nbytes
    del big
    docs = read_docs([str(path)])
    first = next(docs)
    assert first.text.startswith("00000000")
    held = pa.total_allocated_bytes()
    assert held < total / 4, (held, total)
    assert sum(1 for _ in docs) == n - 1


def test_parquet_from_a_pipe_is_a_clear_error(pq_file):
    r = llmtk("cat", "-", input=pq_file.read_bytes())
    assert r.returncode == 1
    assert b"Parquet cannot be read from a pipe" in r.stderr


def test_corrupt_parquet_is_an_error_naming_the_file(cli, tmp_path, pq_file):
    bad = tmp_path / "cut.parquet"
    bad.write_bytes(pq_file.read_bytes()[:300])
    r = cli("cat", bad)
    assert r.exit_code == 1 and f"{bad}:1: not a readable Parquet file" in r.output


def test_corrupt_parquet_under_on_error_skip_is_one_counted_bad_record(cli, tmp_path, pq_file):
    # the same accounting as a damaged JSONL file: counted, and the next file is read
    bad = tmp_path / "a-cut.parquet"
    bad.write_bytes(pq_file.read_bytes()[:300])
    good = tmp_path / "b.jsonl"
    good.write_text('{"text": "after"}\n')
    stats = tmp_path / "s.json"
    r = cli("cat", bad, good, "--on-error", "skip", "--stats", stats, "-q")
    assert r.exit_code == 0, r.output
    assert records(r.stdout) == [{"text": "after"}]
    s = json.loads(stats.read_text())
    assert s["errors"] == {"io.corrupt": 1} and s["records_in"] == 2


def test_jsonl_to_parquet_and_back_keeps_every_record(cli, tmp_path):
    src = tmp_path / "in.jsonl"
    rows = [{"id": i, "text": f"text {i}", "lang": "en", "score": 0.5 + i, "opt": None}
            for i in range(50)]
    rows[3]["opt"] = "set"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.parquet"
    r = cli("cat", src, "-o", out, "-q")
    assert r.exit_code == 0, r.output
    f = pq.ParquetFile(out)
    assert f.metadata.num_rows == 50
    assert f.metadata.row_group(0).column(0).compression == "ZSTD"
    assert f.schema_arrow.field("text").type == pa.string()
    assert f.schema_arrow.field("score").type == pa.float64()
    back = records(cli("cat", out, "-q").stdout)
    assert back == rows
    assert not list(tmp_path.glob("*.tmp-*"))


def test_parquet_to_parquet_passes_columns_through(cli, tmp_path, pq_file):
    out = tmp_path / "copy.parquet"
    r = cli("cat", pq_file, "-o", out, "-q")
    assert r.exit_code == 0, r.output
    assert pq.read_table(out).to_pylist() == pq.read_table(pq_file).to_pylist()


def test_row_groups_are_bounded(cli, tmp_path, monkeypatch):
    from llmtk.io import parquet

    monkeypatch.setattr(parquet, "ROW_GROUP_ROWS", 64)
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": f"t{i}", "n": i}) + "\n" for i in range(200)))
    out = tmp_path / "o.parquet"
    assert cli("cat", src, "-o", out, "-q").exit_code == 0
    md = pq.ParquetFile(out).metadata
    assert [md.row_group(i).num_rows for i in range(md.num_row_groups)] == [64, 64, 64, 8]


@pytest.mark.parametrize("late, message", [
    ({"text": "x", "n": "seven"}, "field 'n' does not fit the Parquet schema: str 'seven'"),
    ({"text": "x", "n": 1, "extra": True}, "field 'extra' is not in the Parquet schema"),
    ({"text": "x", "n": {"a": 1}}, "field 'n' does not fit the Parquet schema: dict"),
])
def test_a_record_that_does_not_fit_the_schema_is_an_error_naming_it(
        cli, tmp_path, monkeypatch, late, message):
    from llmtk.io import parquet

    monkeypatch.setattr(parquet, "ROW_GROUP_ROWS", 10)
    src = tmp_path / "in.jsonl"
    lines = [json.dumps({"text": f"t{i}", "n": i}) for i in range(25)]
    lines[17] = json.dumps(late)
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "o.parquet"
    r = cli("cat", src, "-o", out)
    assert r.exit_code == 1
    assert f"{src}:18: {message}" in r.output
    assert not out.exists() and not list(tmp_path.glob("*.tmp-*"))


def test_records_that_disagree_within_the_first_row_group_are_named(cli, tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "a", "n": 1}\n{"text": "b", "n": "two"}\n')
    r = cli("cat", src, "-o", tmp_path / "o.parquet")
    assert r.exit_code == 1 and f"{src}:2: field 'n' does not fit" in r.output


def test_missing_fields_are_null_and_integers_widen_to_floats(cli, tmp_path, monkeypatch):
    from llmtk.io import parquet

    monkeypatch.setattr(parquet, "ROW_GROUP_ROWS", 2)
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "a", "x": 0.5, "y": "s"}\n{"text": "b", "x": 1.5, "y": "t"}\n'
                   '{"text": "c", "x": 2}\n')
    out = tmp_path / "o.parquet"
    assert cli("cat", src, "-o", out, "-q").exit_code == 0
    assert pq.read_table(out).to_pylist()[2] == {"text": "c", "x": 2.0, "y": None}


def test_clean_reads_and_writes_parquet_with_rejects_and_stats(cli, tmp_path):
    src = tmp_path / "web.parquet"
    texts = ["The quick brown fox jumps over the lazy dog. " * 20, "short", "ok " * 3]
    pq.write_table(pa.table({"id": ["a", "b", "c"], "text": texts, "url": ["u1", "u2", "u3"]}),
                   src)
    out, rej, stats = tmp_path / "clean.parquet", tmp_path / "rej.jsonl", tmp_path / "s.json"
    r = cli("clean", src, "-o", out, "--rejects", rej, "--stats", stats, "-q")
    assert r.exit_code == 0, r.output
    kept = pq.read_table(out).to_pylist()
    dropped = records(rej.read_text())
    assert {d["id"] for d in kept} | {d["id"] for d in dropped} == {"a", "b", "c"}
    assert all("reason" in d["llmtk"] and d["url"] for d in dropped)
    s = json.loads(stats.read_text())
    assert s["records_in"] == 3 == s["records_out"] + sum(s["dropped"].values())


def test_parquet_rejects_and_compress_are_usage_errors(cli, tmp_path, pq_file):
    assert cli("cat", pq_file, "--rejects", tmp_path / "r.parquet",
               "-o", tmp_path / "o.jsonl").exit_code == 2
    assert cli("cat", pq_file, "-o", tmp_path / "o.parquet", "--compress", "gzip").exit_code == 2
    assert not list(tmp_path.glob("o.*"))


def test_shards_of_a_parquet_file_partition_it(cli, pq_file):
    ids = []
    for k in range(3):
        ids += [r["id"] for r in records(cli("cat", pq_file, "--shard", f"{k}/3", "-q").stdout)]
    assert sorted(ids) == sorted(f"doc-{i}" for i in range(250))


def test_empty_output_is_a_valid_parquet_file(cli, tmp_path):
    src = tmp_path / "empty.jsonl"
    src.write_text("")
    out = tmp_path / "o.parquet"
    assert cli("cat", src, "-o", out, "-q").exit_code == 0
    assert pq.read_table(out).num_rows == 0


# ---------------------------------------------------------------- HF datasets folders


def test_hf_save_to_disk_folder_is_readable(cli, tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = {"text": [f"row {i}" for i in range(30)], "label": list(range(30))}
    ds = datasets.Dataset.from_dict(rows)
    ds.save_to_disk(str(tmp_path / "ds"), num_shards=3)
    r = cli("cat", tmp_path / "ds", "-q")
    assert r.exit_code == 0, r.output
    assert records(r.stdout) == [{"text": t, "label": n} for t, n in zip(*rows.values(),
                                                                       strict=True)]
    dd = datasets.DatasetDict({"train": ds, "test": ds.select(range(3))})
    dd.save_to_disk(str(tmp_path / "dd"))
    r = cli("cat", tmp_path / "dd", "-q")
    assert r.exit_code == 2 and "DatasetDict" in r.output and "train" in r.output
    r = cli("cat", tmp_path / "dd" / "test", "-q")
    assert [x["label"] for x in records(r.stdout)] == [0, 1, 2]


def test_arrow_ipc_stream_and_file_by_content(cli, tmp_path):
    table = make_table(12)
    with pa.OSFile(str(tmp_path / "s.bin"), "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
        w.write_table(table, max_chunksize=5)
    with pa.OSFile(str(tmp_path / "f.bin"), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table, max_chunksize=5)
    for name in ("s.bin", "f.bin"):
        assert records(cli("cat", tmp_path / name, "-q").stdout) == table.to_pylist()


def test_jsonl_runs_never_import_pyarrow(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "hello"}\n')
    code = ("import sys\nsys.argv = ['llmtk', 'cat', sys.argv[1], '-q']\n"
            "from llmtk.cli import main\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
            "sys.stderr.write('PYARROW=%s' % ('pyarrow' in sys.modules))\n")
    p = subprocess.run([sys.executable, "-c", code, str(src)], capture_output=True, env=env())
    assert p.stdout == b'{"text": "hello"}\n'
    assert b"PYARROW=False" in p.stderr


def test_workers_give_the_same_parquet_bytes(cli, tmp_path):
    src = tmp_path / "in.parquet"
    import inspect
    import json as json_module

    texts = [inspect.getdoc(obj) for mod in (json_module, subprocess, inspect, pytest)
             for _, obj in inspect.getmembers(mod) if inspect.getdoc(obj)]
    pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), src,
                   row_group_size=64)
    outs = []
    for workers in ("1", "2"):
        out = tmp_path / f"o{workers}.parquet"
        r = cli("clean", src, "-o", out, "--workers", workers, "-q")
        assert r.exit_code == 0, r.output
        outs.append(pq.read_table(out).to_pylist())
    assert outs[0] == outs[1] and 0 < len(outs[0]) < len(texts)


def test_parquet_output_through_a_symlink_replaces_the_target_and_keeps_the_link(
        cli, tmp_path, pq_file):
    target = tmp_path / "real.parquet"
    target.write_bytes(b"old")
    link = tmp_path / "link.parquet"
    link.symlink_to(target)
    planted = tmp_path / "victim"
    planted.write_bytes(b"keep")
    r = cli("cat", pq_file, "-o", link, "-q")
    assert r.exit_code == 0, r.output
    assert link.is_symlink() and pq.read_table(target).num_rows == pq.read_table(
        pq_file).num_rows
    assert planted.read_bytes() == b"keep"
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
