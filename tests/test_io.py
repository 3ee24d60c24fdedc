"""The record-stream layer, through real `llmtk cat` processes and pipelines."""

import gzip
import hashlib
import json
import os
import pty
import signal
import subprocess
import time

import orjson
import pytest
import zstandard

from llmtk.errors import DataError, UsageError
from llmtk.io import Sink, expand_inputs, read_docs, shard_of
from llmtk.io.compression import detect
from tests.util import LLMTK, env, llmtk, shell

RECORDS = [
    {"id": f"doc-{i}", "text": f"Document {i}: café 训练 {'x' * (i % 7)}", "meta": {"n": i},
     "tags": ["a", i], "z": None}
    for i in range(500)
]


def jsonl(records) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def zst(data: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=3).compress(data)


@pytest.fixture
def plain(tmp_path):
    p = tmp_path / "in.jsonl"
    p.write_bytes(jsonl(RECORDS))
    return p


def test_round_trip_preserves_every_field_and_byte(plain):
    r = llmtk("cat", plain, "-q")
    assert r.returncode == 0, r.stderr
    assert r.stdout == plain.read_bytes()
    assert [json.loads(x) for x in r.stdout.splitlines()] == RECORDS
    assert r.stderr == b""


@pytest.mark.parametrize("ext,decompress", [
    (".zst", lambda b: zstandard.ZstdDecompressor().decompressobj().decompress(b)),
    (".gz", gzip.decompress),
])
def test_compressed_output_by_extension(plain, tmp_path, ext, decompress):
    out = tmp_path / f"out.jsonl{ext}"
    r = llmtk("cat", plain, "-o", out, "-q")
    assert r.returncode == 0, r.stderr
    assert r.stdout == b""
    assert decompress(out.read_bytes()) == plain.read_bytes()
    assert not list(tmp_path.glob("*.tmp-*"))


def test_zstd_and_gzip_inputs_detected_from_content_not_name(tmp_path, plain):
    data = plain.read_bytes()
    (tmp_path / "a.jsonl").write_bytes(zst(data))  # zstd under a plain name
    (tmp_path / "b.dat").write_bytes(gzip.compress(data))  # gzip under no known name
    r = llmtk("cat", tmp_path / "a.jsonl", tmp_path / "b.dat", "-q")
    assert r.returncode == 0, r.stderr
    assert r.stdout == data + data


def test_concatenated_zstd_frames_are_one_stream(tmp_path):
    a, b = jsonl(RECORDS[:100]), jsonl(RECORDS[100:])
    (tmp_path / "a.zst").write_bytes(zst(a))
    (tmp_path / "b.zst").write_bytes(zst(b))
    r = shell(f"cat {tmp_path}/a.zst {tmp_path}/b.zst | llmtk cat -q")
    assert r.returncode == 0, r.stderr
    assert r.stdout == a + b


def test_multi_member_gzip_on_stdin():
    a, b = jsonl(RECORDS[:10]), jsonl(RECORDS[10:20])
    r = llmtk("cat", "-q", input=gzip.compress(a) + gzip.compress(b))
    assert r.stdout == a + b


def test_stdin_dash_and_nothing_are_the_same(plain):
    data = plain.read_bytes()
    assert llmtk("cat", "-", "-q", input=zst(data)).stdout == data
    assert llmtk("cat", "-q", input=data).stdout == data


def test_directory_and_glob_inputs_in_sorted_order(tmp_path):
    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    (d / "b.jsonl").write_bytes(jsonl(RECORDS[2:3]))
    (d / "a.jsonl.zst").write_bytes(zst(jsonl(RECORDS[1:2])))
    (d / "sub" / "c.jsonl.gz").write_bytes(gzip.compress(jsonl(RECORDS[3:4])))
    (d / "notes.txt").write_text("not an input")
    assert expand_inputs([str(d)]) == sorted(
        [str(d / "a.jsonl.zst"), str(d / "b.jsonl"), str(d / "sub" / "c.jsonl.gz")]
    )
    r = llmtk("cat", d, "-q")
    assert r.stdout == jsonl([RECORDS[1], RECORDS[2], RECORDS[3]])
    r = llmtk("cat", str(d / "*.jsonl*"), "-q")
    assert r.stdout == jsonl([RECORDS[1], RECORDS[2]])


@pytest.mark.integration
@pytest.mark.parametrize("unbuffered", ["", "1"])
def test_head_closes_pipe_quietly(tmp_path, unbuffered):
    big = tmp_path / "big.jsonl"
    big.write_bytes(jsonl(RECORDS) * 40)  # several MB: the writer hits the closed pipe
    extra = {"PYTHONUNBUFFERED": unbuffered} if unbuffered else {}
    r = shell(f"llmtk cat {big} | head -1; echo \"status=${{PIPESTATUS[0]}}\"", **extra)
    lines = r.stdout.decode().splitlines()
    assert json.loads(lines[0]) == RECORDS[0]
    assert lines[1] == "status=0"
    assert r.stderr == b""


def test_malformed_json_names_file_and_line_and_leaves_no_output(tmp_path, plain):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(jsonl(RECORDS[:3]) + b'{"text": "oops"\n' + jsonl(RECORDS[3:5]))
    out = tmp_path / "out.jsonl.zst"
    r = llmtk("cat", plain, bad, "-o", out)
    assert r.returncode == 1
    msg = r.stderr.decode()
    assert msg.startswith(f"llmtk: error: {bad}:4: malformed JSON")
    assert len(msg.strip().splitlines()) == 1 and "Traceback" not in msg
    assert not out.exists()
    assert {p.name for p in tmp_path.iterdir()} == {"in.jsonl", "bad.jsonl"}  # no temp file


@pytest.mark.parametrize("line,reason,message", [
    (b"[1, 2]", "io.not_object", "expected a JSON object, got list"),
    (b'{"id": 1, "body": "b"}', "io.missing_text", "no 'text' field (its fields: 'id', "
     "'body'); name the field that holds the text with --text-field"),
    (b'{"text": 3}', "io.text_not_string", "field 'text' is not a string"),
    (b'{"text": "\xff\xfe"}', "io.invalid_utf8", "invalid UTF-8"),
    (b'{"text": "a"', "io.malformed_json", "malformed JSON"),
    (b'id,"a, b"', "io.malformed_json", "malformed JSON (unexpected character, expected a JSON "
     "value: line 1 column 1 (char 0)); this looks like CSV, not JSON Lines: convert it first, "
     "e.g. python3 -c 'import csv, json, sys; [print(json.dumps(r)) for r in "
     "csv.DictReader(sys.stdin)]' < data.csv > data.jsonl\n"),
])
def test_each_kind_of_bad_line(tmp_path, line, reason, message):
    p = tmp_path / "x.jsonl"
    p.write_bytes(b'{"text": "fine"}\n\n' + line + b"\n")
    r = llmtk("cat", p)
    assert r.returncode == 1
    assert r.stderr.decode().startswith(f"llmtk: error: {p}:3: {message}")
    # --on-error reject: counted under its reason and written to --rejects
    rej, stats = tmp_path / "rej.jsonl", tmp_path / "stats.json"
    r = llmtk("cat", p, "--on-error", "reject", "--rejects", rej, "--stats", stats, "-q")
    assert r.returncode == 0, r.stderr
    assert r.stdout == b'{"text": "fine"}\n'
    (rejected,) = [json.loads(x) for x in rej.read_bytes().splitlines()]
    assert rejected["llmtk"]["reason"] == reason
    assert rejected["llmtk"]["line"] == 3
    s = json.loads(stats.read_text())
    assert s["errors"] == {reason: 1} and s["records_in"] == 2 and s["records_out"] == 1


def test_truncated_zstd_is_a_clear_error(tmp_path, plain):
    data = zst(plain.read_bytes())
    t = tmp_path / "t.jsonl.zst"
    t.write_bytes(data[: len(data) // 2])
    out = tmp_path / "o.jsonl"
    r = llmtk("cat", t, "-o", out)
    assert r.returncode == 1
    msg = r.stderr.decode()
    assert msg.startswith(f"llmtk: error: {t}:") and "truncated" in msg
    assert not out.exists()
    r = shell(f"cat {t} | llmtk cat -q > /dev/null")
    assert r.returncode == 1 and b"<stdin>:" in r.stderr and b"truncated" in r.stderr


def test_on_error_skip_counts_every_record(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_bytes(jsonl(RECORDS[:5]) + b"nope\n[]\n" + jsonl(RECORDS[5:8]) + b'{"text": null}\n')
    stats = tmp_path / "s.json"
    r = llmtk("cat", p, "--on-error", "skip", "--stats", stats)
    assert r.returncode == 0
    assert r.stdout == jsonl(RECORDS[:8])
    s = json.loads(stats.read_text())
    assert s["records_in"] == 11 and s["records_out"] == 8
    assert s["errors"] == {"io.malformed_json": 1, "io.not_object": 1, "io.text_not_string": 1}
    assert b"records in" in r.stderr  # the summary, on stderr only


def test_stats_json_has_sorted_keys_and_adds_across_shards(plain, tmp_path):
    totals = {}
    for k in range(3):
        st = tmp_path / f"s{k}.json"
        llmtk("cat", plain, "--shard", f"{k}/3", "--stats", st, "-q", check=True)
        text = st.read_text()
        data = json.loads(text)
        assert list(data) == sorted(data)
        for key in ("records_in", "records_out", "bytes_out"):
            totals[key] = totals.get(key, 0) + data[key]
    assert totals["records_in"] == totals["records_out"] == len(RECORDS)
    assert totals["bytes_out"] == len(plain.read_bytes())


def test_stdin_shards_partition_the_input_exactly(plain, tmp_path):
    data = plain.read_bytes()
    parts = [llmtk("cat", "--shard", f"{k}/3", "-q", input=data, check=True).stdout
             for k in range(3)]
    lines = [line for part in parts for line in part.splitlines()]
    assert sorted(lines) == sorted(plain.read_bytes().splitlines())
    assert all(parts)  # every shard got something
    # The rule is documented: xxh64 of "id:<id>" (or "pos:<index>") modulo N.
    expected0 = [r for i, r in enumerate(RECORDS) if shard_of(r["id"], i, 3) == 0]
    assert parts[0] == jsonl(expected0)


def test_shard_without_ids_uses_position(tmp_path):
    p = tmp_path / "noid.jsonl"
    recs = [{"text": f"t{i}"} for i in range(50)]
    p.write_bytes(jsonl(recs))
    parts = [llmtk("cat", "--shard", f"{k}/2", "-q", input=p.read_bytes()).stdout
             for k in range(2)]
    assert sorted(parts[0].splitlines() + parts[1].splitlines()) == sorted(jsonl(recs).splitlines())
    assert parts[0] and parts[1]


def _files(tmp_path, sizes):
    """Files of RECORDS slices (some compressed, one empty) in a folder; returns it."""
    d = tmp_path / "in"
    d.mkdir()
    start = 0
    for i, n in enumerate(sizes):
        data = jsonl(RECORDS[start:start + n])
        start += n
        name = d / (f"f{i:02d}.jsonl.zst" if i % 2 else f"f{i:02d}.jsonl")
        name.write_bytes(zst(data) if i % 2 else data)
    return d


def test_file_shards_are_whole_files_and_concatenate_to_the_single_run(tmp_path):
    d = _files(tmp_path, [50, 0, 120, 30, 100, 60, 140])
    whole = llmtk("cat", d, "-q", check=True).stdout
    for n in (1, 2, 3, 5, 9):
        parts = [llmtk("cat", d, "--shard", f"{k}/{n}", "-q", check=True).stdout
                 for k in range(n)]
        assert b"".join(parts) == whole  # in K order: the single run, byte for byte


def test_file_shard_rule_is_contiguous_and_size_balanced():
    from llmtk.io.shard import doc_key, file_tasks

    assert file_tasks([10, 10, 10, 10], 2) == [0, 0, 1, 1]
    assert file_tasks([100, 1, 1, 1], 2) == [0, 1, 1, 1]  # the big file is half the bytes
    assert file_tasks([5] * 3, 5) == [0, 2, 4]  # more tasks than files: some get none
    tasks = file_tasks(list(range(100)), 7)
    assert tasks == sorted(tasks) and set(tasks) == set(range(7))
    assert doc_key(2, 5) > doc_key(1, 10**9) > doc_key(1, 0)


def test_file_shard_task_opens_only_its_files(tmp_path):
    d = _files(tmp_path, [50, 50, 50, 50])
    (d / "f01.jsonl.zst").chmod(0)  # task 1 of 2 never opens task 0's files
    r = llmtk("cat", d, "--shard", "1/2", "-q")
    assert r.returncode == 0, r.stderr
    assert r.stdout == jsonl(RECORDS[100:200])
    if os.geteuid() != 0:  # root reads anything
        assert llmtk("cat", d, "--shard", "0/2", "-q").returncode == 1


def test_finished_task_is_skipped_on_rerun_and_redone_when_inputs_change(tmp_path):
    d = _files(tmp_path, [50, 50, 50])
    out = tmp_path / "out" / "0.jsonl"
    out.parent.mkdir()
    r = llmtk("cat", d, "--shard", "0/2", "-o", out, "--stats", tmp_path / "s.json", "-q")
    assert r.returncode == 0, r.stderr
    marker = json.loads((tmp_path / "out" / "0.jsonl.done").read_text())
    assert marker["tool"] == "cat" and marker["stats"]["records_out"] == 100
    out.write_bytes(b"sentinel\n")  # a skipped task does not touch its output
    r = llmtk("cat", d, "--shard", "0/2", "-o", out, "--stats", tmp_path / "s.json")
    assert r.returncode == 0 and b"skipping" in r.stderr
    assert out.read_bytes() == b"sentinel\n"
    (d / "f00.jsonl").write_bytes(jsonl(RECORDS[:10]))  # its inputs changed: run again
    r = llmtk("cat", d, "--shard", "0/2", "-o", out, "-q")
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == jsonl(RECORDS[:10] + RECORDS[50:100])


def test_killed_task_leaves_no_output_and_its_rerun_equals_the_single_run(tmp_path):
    d = _files(tmp_path, [200, 200])
    fifo = d / "f00.jsonl"
    data = fifo.read_bytes()
    fifo.unlink()
    os.mkfifo(fifo)
    out = tmp_path / "0.jsonl"
    proc = subprocess.Popen([*LLMTK, "cat", str(tmp_path / "in"), "--shard", "0/1", "-o",
                             str(out), "-q"], env=env(), stdin=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    with open(fifo, "wb") as w:
        w.write(data[: len(data) // 2])  # half the file, then the task is killed
        w.flush()
        time.sleep(0.5)
        proc.kill()
        proc.wait()
    assert not out.exists() and not (tmp_path / "0.jsonl.done").exists()
    fifo.unlink()
    fifo.write_bytes(data)
    llmtk("cat", tmp_path / "in", "--shard", "0/1", "-o", out, "-q", check=True)
    assert out.read_bytes() == llmtk("cat", tmp_path / "in", "-q", check=True).stdout
    assert (tmp_path / "0.jsonl.done").exists()


def test_workers_output_is_byte_identical(plain, tmp_path):
    one = llmtk("cat", plain, "--workers", "1", "-q", check=True).stdout
    two = llmtk("cat", plain, "--workers", "2", "-q", check=True).stdout
    assert hashlib.sha256(one).digest() == hashlib.sha256(two).digest()


def test_bad_usage_exits_2(plain):
    assert llmtk("cat", plain, "--shard", "3/3").returncode == 2
    assert llmtk("cat", plain, "--on-error", "maybe").returncode == 2
    assert llmtk("cat", "/no/such/file.jsonl").returncode == 2
    assert llmtk("cat", plain, "--no-such-option").returncode == 2
    r = llmtk("cat", plain, "--on-error", "reject")
    assert r.returncode == 2 and b"--rejects" in r.stderr


def test_debug_env_shows_traceback(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_bytes(b"nope\n")
    assert b"Traceback" not in llmtk("cat", p).stderr
    assert b"Traceback" in llmtk("cat", p, LLMTK_DEBUG="1").stderr


def _run_with_tty(args, tty_fd: str) -> tuple[int, bytes]:
    """Run llmtk with stdin or stdout on a pseudo-terminal; return (status, stderr)."""
    master, slave = pty.openpty()
    try:
        if tty_fd == "stdin":
            kwargs = {"stdin": slave}
        else:
            kwargs = {"stdout": slave, "stdin": subprocess.DEVNULL}
        p = subprocess.run([*LLMTK, *args], stderr=subprocess.PIPE, env=env(), timeout=60, **kwargs)
        return p.returncode, p.stderr
    finally:
        os.close(master)
        os.close(slave)


def test_no_input_on_a_terminal_is_a_hint_not_a_hang():
    status, err = _run_with_tty(["cat"], "stdin")
    assert status == 2 and b"no input" in err


def test_refuses_compressed_bytes_to_a_terminal(plain):
    status, err = _run_with_tty(["cat", str(plain), "--compress", "zstd"], "stdout")
    assert status == 2 and b"terminal" in err


# -- the library, directly ---------------------------------------------------------------


def test_detect_magic():
    assert detect(b"\x28\xb5\x2f\xfd") == "zstd"
    assert detect(b"\x1f\x8b\x08\x00") == "gzip"
    assert detect(b'{"te') == "plain"


def test_sink_abort_leaves_nothing_and_commit_renames(tmp_path):
    target = tmp_path / "o.jsonl.zst"
    s = Sink(str(target))
    s.write(b'{"text": "x"}\n')
    s.abort()
    assert list(tmp_path.iterdir()) == []
    s = Sink(str(target))
    s.write(b'{"text": "x"}\n')
    assert not target.exists()  # nothing at the final name until commit
    s.commit()
    assert zstandard.ZstdDecompressor().decompressobj().decompress(target.read_bytes()) == (
        b'{"text": "x"}\n')


def test_read_docs_positions_and_modified_records(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_bytes(b'{"text": "a", "k": 1}\r\n\n{"text": "b"}\n')
    docs = list(read_docs([str(p)]))
    assert [(d.line, d.index, d.text) for d in docs] == [(1, 0, "a"), (3, 1, "b")]
    assert docs[0].to_bytes() == b'{"text": "a", "k": 1}\n'  # raw bytes kept, CR dropped
    docs[0].annotate(lang="en")
    assert docs[0].to_bytes() == b'{"text":"a","k":1,"llmtk":{"lang":"en"}}\n'
    with pytest.raises(UsageError):
        list(read_docs([str(tmp_path / "missing.jsonl")]))


def test_read_docs_raises_data_error_with_location(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_bytes(b'{"text": "a"}\n{"text": 1}\n')
    with pytest.raises(DataError, match=r"x\.jsonl:2: field 'text' is not a string"):
        list(read_docs([str(p)]))


@pytest.mark.integration
def test_sigterm_removes_the_partial_output(tmp_path):
    out = tmp_path / "o.jsonl.zst"
    proc = subprocess.Popen([*LLMTK, "cat", "-", "-o", str(out), "-q"], stdin=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env())
    proc.stdin.write(jsonl(RECORDS) * 20)  # more than the output buffer, then hold stdin open
    proc.stdin.flush()
    deadline = time.monotonic() + 30
    while not list(tmp_path.glob("o.jsonl.zst.tmp-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(tmp_path.glob("o.jsonl.zst.tmp-*")), "the temporary output was never created"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143
    assert list(tmp_path.iterdir()) == []


@pytest.mark.integration
def test_progress_only_when_stderr_is_a_terminal(tmp_path):
    data = jsonl(RECORDS) * 20
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([*LLMTK, "cat", "-"], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=slave, env=env())
        for _ in range(4):  # a slow producer, so the progress line gets drawn
            proc.stdin.write(data)
            proc.stdin.flush()
            time.sleep(0.4)
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
        os.close(slave)
        slave = None
        seen = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(master)
        if slave is not None:
            os.close(slave)
    assert b"llmtk cat: " in seen and b"MB/s" in seen  # the live line
    assert b"records in" in seen  # then the summary
    # without a terminal: the summary only, no progress line
    r = llmtk("cat", "-", input=data)
    assert b"llmtk cat: " not in r.stderr and b"records in" in r.stderr


def test_stats_merge_adds_counters_and_refuses_other_tools(tmp_path):
    a, b, c = (tmp_path / f"{x}.json" for x in "abc")
    a.write_text(json.dumps({"tool": "clean", "records_in": 3, "dropped": {"x": 1},
                             "seconds": 0.5}))
    b.write_text(json.dumps({"tool": "clean", "records_in": 4, "dropped": {"x": 2, "y": 1},
                             "seconds": 0.25}))
    c.write_text(json.dumps({"tool": "dedup", "records_in": 1}))
    r = llmtk("stats", "merge", a, b, check=True)
    assert json.loads(r.stdout) == {"tool": "clean", "records_in": 7,
                                    "dropped": {"x": 3, "y": 1}, "seconds": 0.75}
    r = llmtk("stats", "merge", a, c)
    assert r.returncode == 2 and b"only stats of the same tool merge" in r.stderr
    (tmp_path / "bad.json").write_text("{")
    r = llmtk("stats", "merge", a, tmp_path / "bad.json")
    assert r.returncode == 1 and r.stderr.startswith(b"llmtk: error: ")
