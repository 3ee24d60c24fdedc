"""What the data tools read, and what they say about what they do not: every file of an
input folder is read or named (and counted in --stats), xz and bzip2 are read from their
bytes, a compression llmtk does not read is named, a web archive on stdin is refused in
words, and an input without records says so."""

import bz2
import gzip
import json
import lzma
import socket

import orjson
import pytest
import zstandard

from llmtk.io.summary import merge_stats
from tests.util import llmtk

# An lz4 frame as `lz4` writes it (magic, descriptor, one 6-byte block, end mark):
# only its first bytes matter, they name the format.
LZ4_FRAME = bytes.fromhex("04224d1864407006000080" "68656c6c6f0a" "00000000")


def lines(*texts: str) -> bytes:
    return b"".join(orjson.dumps({"text": t}) + b"\n" for t in texts)


def warc_response(text: str) -> bytes:
    """One gzip-per-record WARC response with an HTML page (as Common Crawl writes)."""
    html = f"<html><body><p>{text}</p></body></html>".encode()
    http = b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\r\n" + html
    head = (f"WARC/1.0\r\nWARC-Type: response\r\nWARC-Record-ID: <urn:uuid:1>\r\n"
            f"WARC-Target-URI: http://example.org/\r\nWARC-Date: 2024-01-01T00:00:00Z\r\n"
            f"Content-Type: application/http; msgtype=response\r\n"
            f"Content-Length: {len(http)}\r\n\r\n").encode()
    return gzip.compress(head + http + b"\r\n\r\n")


def texts(stdout: bytes) -> list[str]:
    return [json.loads(x)["text"] for x in stdout.splitlines()]


@pytest.fixture
def mixed(tmp_path):
    """A folder as people have them: data in six spellings, and three files that are not."""
    d = tmp_path / "mixed"
    d.mkdir()
    (d / "a.jsonl").write_bytes(lines("a"))
    (d / "b.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(lines("b")))
    (d / "c.csv").write_bytes(b"id,text\n1,c\n")
    (d / "d.ndjson").write_bytes(lines("d"))
    (d / "e.jsonl.xz").write_bytes(lzma.compress(lines("e")))
    (d / "f.ndjson.bz2").write_bytes(bz2.compress(lines("f")))
    (d / "g.warc.gz").write_bytes(warc_response("g"))
    (d / "h.jsonl.lz4").write_bytes(LZ4_FRAME)
    (d / "notes.txt").write_bytes(b"where the crawl came from\n")
    return d


def test_a_folder_is_read_whole_and_what_is_not_data_is_named_and_counted(mixed, tmp_path):
    stats = tmp_path / "s.json"
    r = llmtk("cat", mixed, "-q", "--stats", stats)
    assert r.returncode == 0, r.stderr
    got = texts(r.stdout)
    assert got[:5] == ["a", "b", "d", "e", "f"] and "g" in got[5]  # WARC: the page's HTML
    err = r.stderr.decode()
    assert err.count("\n") == 1 and "warning: skipped 3 files" in err, err
    for name, why in (("c.csv", "CSV, not JSON Lines"), ("h.jsonl.lz4", "lz4"),
                      ("notes.txt", "not named like data")):
        assert f"{mixed / name} ({why}" in err, (name, err)
    s = json.loads(stats.read_text())
    assert (s["files_in"], s["files_skipped"], s["records_in"]) == (6, 3, 6)


def test_a_dangling_link_or_a_socket_in_a_folder_is_named_and_counted(tmp_path):
    """A folder input passes over nothing in silence: a symbolic link to a deleted file
    (named like data) and a socket are named on stderr and counted in --stats."""
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.jsonl").write_bytes(lines("a"))
    (d / "gone.jsonl").symlink_to(tmp_path / "deleted.jsonl")
    stats = tmp_path / "s.json"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(d / "s.sock"))
        r = llmtk("cat", d, "-q", "--stats", stats)
    assert r.returncode == 0 and texts(r.stdout) == ["a"], r.stderr
    err = r.stderr.decode()
    assert "warning: skipped 2 files" in err, err
    assert f"{d / 'gone.jsonl'} (a dangling symbolic link)" in err, err
    assert f"{d / 's.sock'} (not a regular file)" in err, err
    s = json.loads(stats.read_text())
    assert (s["files_in"], s["files_skipped"], s["records_in"]) == (1, 2, 1)


def test_a_glob_names_the_dangling_links_it_matches(tmp_path):
    """A quoted glob passes over nothing in silence either: a link to a deleted file it
    matches is named and counted, and a glob that matches nothing else says so."""
    (tmp_path / "a.jsonl").write_bytes(lines("a"))
    (tmp_path / "b.jsonl").symlink_to(tmp_path / "deleted.jsonl")
    stats = tmp_path / "s.json"
    r = llmtk("cat", tmp_path / "*.jsonl", "-q", "--stats", stats)
    assert r.returncode == 0 and texts(r.stdout) == ["a"], r.stderr
    assert f"skipped 1 file: {tmp_path / 'b.jsonl'} (a dangling symbolic link)" in \
        r.stderr.decode(), r.stderr
    s = json.loads(stats.read_text())
    assert (s["files_in"], s["files_skipped"]) == (1, 1)
    r = llmtk("cat", tmp_path / "b*.jsonl", "-q")
    assert r.returncode == 2 and b"no files match; it matches 1 file: " in r.stderr, r.stderr


def test_skipped_files_are_counted_once_across_the_shards_of_a_job_array(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    for i in range(4):
        (d / f"{i}.jsonl").write_bytes(lines(*(f"{i}-{j}" for j in range(i + 1))))
    (d / "x.csv").write_bytes(b"a,b\n")
    (d / "y.json").write_bytes(b"{}")
    parts, named = [], []
    for k in range(3):
        stats = tmp_path / f"s{k}.json"
        r = llmtk("cat", d, "--shard", f"{k}/3", "-q", "--stats", stats)
        assert r.returncode == 0, r.stderr
        parts.append(json.loads(stats.read_text()))
        named.append(b"x.csv" in r.stderr)
    assert named == [True, False, False]  # task 0 names them, as it counts them
    whole = tmp_path / "s.json"
    assert llmtk("cat", d, "-q", "--stats", whole).returncode == 0
    merged, single = merge_stats(parts), json.loads(whole.read_text())
    for key in ("files_in", "files_skipped", "records_in", "records_out", "bytes_in"):
        assert merged[key] == single[key], key
    assert (single["files_in"], single["files_skipped"]) == (4, 2)


@pytest.mark.parametrize("compress,kind", [(lzma.compress, "xz"), (bz2.compress, "bzip2")],
                         ids=["xz", "bzip2"])
def test_xz_and_bzip2_are_read_from_their_bytes_on_stdin_too(tmp_path, compress, kind):
    # two streams back to back (`cat a.xz b.xz`) are one input, as for `xz -dc`
    data = compress(lines("one", "two")) + compress(lines("three"))
    f = tmp_path / "no-extension"
    f.write_bytes(data)
    for args, stdin in (((f,), None), ((), data)):
        r = llmtk("cat", *args, "-q", input=stdin)
        assert r.returncode == 0 and texts(r.stdout) == ["one", "two", "three"], r.stderr
    cut = tmp_path / "cut"
    cut.write_bytes(data[: len(data) - 30])
    r = llmtk("cat", cut, "-q")
    assert r.returncode == 1 and b"truncated" in r.stderr and b"UTF-8" not in r.stderr
    bad = bytearray(compress(lines(*(f"{i} text" for i in range(200)))))
    bad[len(bad) // 2] ^= 0xFF
    (tmp_path / "bad").write_bytes(bytes(bad))
    r = llmtk("cat", tmp_path / "bad", "-q")
    assert r.returncode == 1 and f"corrupt {kind} data".encode() in r.stderr, r.stderr


@pytest.mark.parametrize("suffix,kind", [("xz", lzma), ("bz2", bz2)])
def test_an_xz_or_bzip2_output_is_written_as_its_name_says(tmp_path, suffix, kind):
    src = tmp_path / "in.jsonl"
    src.write_bytes(lines("a", "b"))
    out = tmp_path / f"out.jsonl.{suffix}"
    assert llmtk("cat", src, "-q", "-o", out).returncode == 0
    assert kind.decompress(out.read_bytes()) == src.read_bytes()
    piped = llmtk("cat", src, "-q", "--compress", suffix)  # stdout too, when asked
    assert piped.returncode == 0 and kind.decompress(piped.stdout) == src.read_bytes()


@pytest.mark.parametrize("data,name", [(LZ4_FRAME, "lz4"), (b"PK\x03\x04" + b"\0" * 40, "zip")],
                         ids=["lz4", "zip"])
def test_a_compression_llmtk_does_not_read_is_named_not_called_bad_utf8(tmp_path, data, name):
    f = tmp_path / "x.jsonl"
    f.write_bytes(data)
    for args, stdin in (((f,), None), ((), data)):
        r = llmtk("cat", *args, "-q", input=stdin)
        err = r.stderr.decode()
        assert r.returncode == 1 and f"{name}-compressed" in err and "UTF-8" not in err, err
        assert err.count("\n") == 1
    r = llmtk("cat", f, "-q", "--on-error", "skip", "--stats", tmp_path / "s.json")
    assert r.returncode == 0
    assert json.loads((tmp_path / "s.json").read_text())["errors"] == {
        "io.unsupported_compression": 1}


def test_a_web_archive_on_stdin_is_refused_in_words(tmp_path):
    warc = warc_response("page")
    for extra in ((), ("--on-error", "skip")):
        r = llmtk("cat", "-q", *extra, input=warc)
        err = r.stderr.decode()
        assert r.returncode == 1 and "WARC" in err and "pass the file name" in err, err
        assert "malformed JSON" not in err
    f = tmp_path / "page.warc.gz"
    f.write_bytes(warc)
    assert llmtk("cat", f, "-q").returncode == 0  # the same bytes as a file are read


@pytest.mark.parametrize("content", [b"", b"\n\n"], ids=["empty", "blank-lines"])
def test_an_input_without_records_says_so_and_exits_0(tmp_path, content):
    f = tmp_path / "empty.jsonl"
    f.write_bytes(content)
    for args, stdin in (((f, "-q"), None), (("-q",), content), ((f,), None)):
        r = llmtk("cat", *args, input=stdin)
        assert r.returncode == 0 and r.stdout == b""
        where = str(f) if f in args else "<stdin>"
        assert f"warning: no records in {where}".encode() in r.stderr, r.stderr
    full = tmp_path / "one.jsonl"
    full.write_bytes(lines("x"))
    assert llmtk("cat", full, "-q").stderr == b""


def test_a_folder_without_data_names_what_it_holds(tmp_path):
    (tmp_path / "a.csv").write_bytes(b"a,b\n")
    r = llmtk("cat", tmp_path, "-q")
    assert r.returncode == 2 and b"a.csv (CSV" in r.stderr, r.stderr


def test_completion_markers_beside_their_outputs_are_not_news(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_bytes(lines("a", "b"))
    out = tmp_path / "out"
    r = llmtk("cat", src, "--shard", "0/1", "-q", "-o", out / "00000.jsonl.zst")
    assert r.returncode == 0 and (out / "00000.jsonl.zst.done").exists()
    r = llmtk("cat", out, "-q")
    assert r.returncode == 0 and texts(r.stdout) == ["a", "b"] and r.stderr == b""


def test_a_record_shard_that_keeps_nothing_is_not_an_empty_input():
    one = lines("only one record")
    said = [b"no records" in llmtk("cat", "--shard", f"{k}/4", "-q", input=one).stderr
            for k in range(4)]
    assert not any(said)
    assert b"no records in <stdin>" in llmtk("cat", "--shard", "1/4", "-q", input=b"").stderr


def test_brotli_has_no_magic_bytes_so_its_name_says_it(tmp_path):
    f = tmp_path / "x.jsonl.br"
    f.write_bytes(bytes([0x1B, 0x9C, 0xE8, 0x90, 0xFF, 0x10]) * 8)  # not text
    r = llmtk("cat", f, "-q")
    err = r.stderr.decode()
    assert r.returncode == 1 and "brotli-compressed" in err and "brotli -dc" in err, err
    assert "UTF-8" not in err
