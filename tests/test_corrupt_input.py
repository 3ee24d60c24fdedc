"""Damaged compressed streams and over-long records.

Each damage gets `FILE:LINE: ... at byte offset N`; with --on-error skip or
reject the rest of that file is one counted error and the next file is read.
"""

import gzip
import json
import struct
import tracemalloc
import zlib

import orjson
import pytest
import zstandard

from llmtk.io.reader import TOO_LONG, iter_line_batches, read_docs
from tests.util import invoke

RECORDS = [{"id": f"d{i}", "text": f"Document number {i}, some words."} for i in range(50)]
GOOD = b"".join(orjson.dumps(r) + b"\n" for r in RECORDS)
NEXT = b'{"id": "next", "text": "the next file"}\n'


cli = invoke


def zst(data: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=3).compress(data)


def gzip_bad_crc(data: bytes) -> bytes:
    z = bytearray(gzip.compress(data))
    z[-8] ^= 0xFF  # the member's CRC32
    return bytes(z)


# name -> (compressed bytes, byte offset of the damaged frame or member)
DAMAGED = {
    "zstd trailing garbage": (zst(GOOD) + b"this is not zstd", len(zst(GOOD))),
    "zstd garbage between frames": (zst(GOOD) + b"\x00garbage" + zst(NEXT), len(zst(GOOD))),
    "gzip bad crc": (gzip_bad_crc(GOOD), 0),
    "gzip trailing garbage": (gzip.compress(GOOD) + b"garbage!", len(gzip.compress(GOOD))),
}


@pytest.mark.parametrize("name", DAMAGED)
def test_damaged_stream_fails_with_file_and_byte_offset(tmp_path, name):
    data, offset = DAMAGED[name]
    p = tmp_path / "bad.jsonl.x"
    p.write_bytes(data)
    out = tmp_path / "o.jsonl"
    code, msg = cli("cat", p, "-o", out, "-q")
    assert code == 1, msg
    assert msg.startswith(f"llmtk: error: {p}:") and f"at byte offset {offset}" in msg
    assert "\n" not in msg.strip() and not out.exists()


@pytest.mark.parametrize("name", DAMAGED)
@pytest.mark.parametrize("mode", ["skip", "reject"])
def test_on_error_skips_the_rest_of_a_damaged_file(tmp_path, name, mode):
    data, _ = DAMAGED[name]
    bad, nxt = tmp_path / "a.jsonl.x", tmp_path / "b.jsonl"
    bad.write_bytes(data)
    nxt.write_bytes(NEXT)
    out, rej, stats = tmp_path / "o.jsonl", tmp_path / "r.jsonl", tmp_path / "s.json"
    code, msg = cli("cat", bad, nxt, "-o", out, "--on-error", mode, "--rejects", rej,
                    "--stats", stats, "-q")
    assert code == 0, msg
    got = out.read_bytes()
    assert got.endswith(NEXT) and GOOD.startswith(got[: -len(NEXT)])  # nothing invented
    s = json.loads(stats.read_text())
    assert s["errors"] == {"io.corrupt": 1}
    assert s["records_in"] == s["records_out"] + 1
    rejected = rej.read_bytes().splitlines()
    if mode == "reject":
        (r,) = [json.loads(x) for x in rejected]
        assert r["llmtk"]["reason"] == "io.corrupt" and "byte offset" in r["llmtk"]["error"]
    else:
        assert rejected == []


def test_gzip_zero_padding_is_accepted_like_gzip(tmp_path):
    data = gzip.compress(GOOD) + b"\0" * 4096 + gzip.compress(NEXT) + b"\0" * 100
    assert gzip.decompress(data) == GOOD + NEXT  # what gzip itself reads
    p = tmp_path / "padded.jsonl.gz"
    p.write_bytes(data)
    code, msg = cli("cat", p, "-o", tmp_path / "o.jsonl", "-q")
    assert code == 0, msg
    assert (tmp_path / "o.jsonl").read_bytes() == GOOD + NEXT


def test_zstd_skippable_frame_first_is_skipped(tmp_path):
    skippable = struct.pack("<II", 0x184D2A53, 6) + b"llmtk!"
    p = tmp_path / "s.jsonl.zst"
    p.write_bytes(skippable + zst(GOOD) + skippable + zst(NEXT))
    code, msg = cli("cat", p, "-o", tmp_path / "o.jsonl", "-q")
    assert code == 0, msg
    assert (tmp_path / "o.jsonl").read_bytes() == GOOD + NEXT


def test_gzip_bad_crc_is_what_zlib_rejects():
    with pytest.raises(zlib.error):
        zlib.decompress(gzip_bad_crc(GOOD), wbits=31)


# -- item 10: long records -------------------------------------------------------------

def test_a_record_longer_than_a_read_chunk_comes_through_intact(tmp_path):
    big = orjson.dumps({"id": "big", "text": "word " * 1_000_000}) + b"\n"  # 5 MB, 5 chunks
    p = tmp_path / "big.jsonl"
    p.write_bytes(GOOD + big + NEXT)
    code, msg = cli("cat", p, "-o", tmp_path / "o.jsonl", "-q")
    assert code == 0, msg
    assert (tmp_path / "o.jsonl").read_bytes() == GOOD + big + NEXT


@pytest.mark.parametrize("size", [3_000_000, 300])  # across chunks, and inside one chunk
def test_max_record_bytes_is_a_bad_record_per_on_error(tmp_path, size):
    long = orjson.dumps({"text": "x" * size}) + b"\n"
    p = tmp_path / "l.jsonl"
    p.write_bytes(GOOD[:200].rsplit(b"\n", 1)[0] + b"\n" + long + NEXT)
    head = GOOD[:200].rsplit(b"\n", 1)[0] + b"\n"
    out, stats = tmp_path / "o.jsonl", tmp_path / "s.json"
    limit = "1Mi" if size > 1e6 else "200"
    line = head.count(b"\n") + 1
    code, msg = cli("cat", p, "-o", out, "--max-record-bytes", limit, "-q")
    assert code == 1
    assert msg.startswith(f"llmtk: error: {p}:{line}: record longer than --max-record-bytes")
    code, msg = cli("cat", p, "-o", out, "--max-record-bytes", limit, "--on-error", "skip",
                    "--stats", stats, "-q")
    assert code == 0, msg
    assert out.read_bytes() == head + NEXT
    assert json.loads(stats.read_text())["errors"] == {"io.record_too_long": 1}


def test_an_over_long_record_is_dropped_without_being_held(tmp_path):
    p = tmp_path / "huge.jsonl"
    with open(p, "wb") as f:
        f.write(b'{"text": "')
        for _ in range(24):
            f.write(b"y" * (1 << 20))  # a 24 MiB line
        f.write(b'"}\n' + NEXT)
    tracemalloc.start()
    try:
        batches = list(iter_line_batches(str(p), max_record=2 << 20))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    lines = [x for _, ls, _ in batches for x in ls]
    assert lines == [TOO_LONG, NEXT.rstrip(b"\n")]
    assert peak < 8 << 20  # a few read chunks, not the 24 MiB line


def test_max_record_bytes_usage(tmp_path):
    code, msg = cli("cat", tmp_path, "--max-record-bytes", "0")
    assert (code, msg) == (2, "llmtk: error: --max-record-bytes: must be > 0, got 0")
    code, msg = cli("cat", tmp_path, "--max-record-bytes", "lots")
    assert code == 2 and msg.startswith("llmtk: error: --max-record-bytes: expected a number")


def test_read_docs_counts_lines_after_a_long_one(tmp_path):
    p = tmp_path / "l.jsonl"
    p.write_bytes(b'{"text": "a"}\n' + b'{"text": "' + b"z" * 3_000_000 + b'"}\n{"text": "b"}\n')
    bad = []
    docs = list(read_docs([str(p)], on_bad=bad.append, max_record=1 << 20))
    assert [(d.text, d.line) for d in docs] == [("a", 1), ("b", 3)]
    assert [(b.reason, b.line) for b in bad] == [("io.record_too_long", 2)]
