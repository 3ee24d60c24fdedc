"""Byte streams in and out: compression detected from magic bytes, not names.

Reading yields decompressed chunks. zstd is read across frames (so
`cat a.zst b.zst` is one stream) and gzip across members; a stream that ends
inside a frame raises `TruncatedInput` instead of ending quietly, which is what
python-zstandard's own stream reader would do. Any other damage (trailing
garbage, a bad checksum, a bad header) raises `CorruptInput` with the byte
offset of the frame or member where it was found. Zero bytes after a gzip
member are padding and are skipped, as gzip itself does (`gzip -t` accepts
them); a zstd stream may open with a skippable frame.
"""

import os
import stat
import zlib
from collections.abc import Iterator
from typing import BinaryIO

from llmtk.errors import DataError

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
GZIP_MAGIC = b"\x1f\x8b"
PARQUET_MAGIC = b"PAR1"  # files are read by llmtk.io.parquet; only a pipe gets here
CHUNK = 1 << 20


class TruncatedInput(Exception):
    """The compressed stream ended in the middle of a frame."""


class CorruptInput(Exception):
    """The compressed stream is damaged (not just cut short)."""


def peek(path: str, n: int) -> bytes | None:
    """The first n bytes of a regular file, else None. Only regular files are peeked: a
    FIFO, /dev/stdin or <(...) can be read once, so those are always line streams; a file
    that cannot be opened is left to the JSONL reader to report."""
    if path == "-":
        return None
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        with open(path, "rb") as f:
            return f.read(n)
    except OSError:
        return None


def detect(head: bytes) -> str:
    """'zstd', 'gzip' or 'plain' from the first bytes of a stream."""
    if head.startswith(ZSTD_MAGIC) or _skippable(head):
        return "zstd"
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(PARQUET_MAGIC):
        return "parquet"
    return "plain"


def _skippable(head: bytes) -> bool:
    """A zstd skippable frame (magic 0x184D2A50..5F, little-endian): zstd skips it."""
    return len(head) >= 4 and head[1:4] == b"\x2a\x4d\x18" and 0x50 <= head[0] <= 0x5F


def open_binary(path: str) -> BinaryIO:
    """A buffered binary reader for a path, or for stdin (fd 0) when path is '-'."""
    if path == "-":
        return os.fdopen(0, "rb", buffering=CHUNK, closefd=False)
    return open(path, "rb", buffering=CHUNK)


def iter_decompressed(f: BinaryIO) -> Iterator[bytes]:
    """Decompressed chunks of a stream whose compression is read off its first bytes.

    Reads use `read1` (one system call each), never `read(n)`: on a pipe,
    BufferedReader.read(n) loops in C until n bytes arrive, so a record could
    wait for a megabyte of later input and a SIGTERM that lands between two of
    its system calls would not be handled until more data came.
    """
    kind = detect(f.peek(4)[:4])  # type: ignore[attr-defined]
    if kind == "parquet":
        raise DataError("Parquet cannot be read from a pipe (its index is at the end of "
                        "the file): pass the file name")
    if kind == "plain":
        while chunk := f.read1(CHUNK):  # type: ignore[attr-defined]
            yield chunk
    elif kind == "zstd":
        import zstandard

        new = zstandard.ZstdDecompressor().decompressobj
        yield from _frames(f, new, "zstd", zstandard.ZstdError)
    else:
        yield from _frames(f, lambda: zlib.decompressobj(wbits=31), "gzip", zlib.error)


def _frames(f: BinaryIO, new, kind: str, error: type[Exception]) -> Iterator[bytes]:
    """Decompress frame after frame (zstd) or member after member (gzip)."""
    d = new()
    started = False  # bytes of the current frame have been fed
    offset = 0  # compressed bytes read so far
    frame_start = 0  # offset of the current frame or member
    while chunk := f.read1(CHUNK):  # type: ignore[attr-defined]
        offset += len(chunk)
        while chunk:
            if not started:
                if kind == "gzip":  # zero padding between or after members, as gzip allows
                    chunk = chunk.lstrip(b"\0")
                    if not chunk:
                        break
                frame_start = offset - len(chunk)
            started = True
            try:
                out = d.decompress(chunk)
            except error as e:
                raise CorruptInput(f"corrupt {kind} data in the {_unit(kind)} at byte offset "
                                   f"{frame_start} ({e})") from None
            if out:
                yield out
            if not d.eof:
                break
            chunk = d.unused_data
            d = new()
            started = False
    if started and not d.eof:
        raise TruncatedInput("compressed stream ends in the middle of a frame (truncated file?)")


def _unit(kind: str) -> str:
    return "frame" if kind == "zstd" else "member"


class Compressor:
    """Incremental compressor with a `compress(bytes) -> bytes` / `finish() -> bytes` API."""

    def __init__(self, kind: str, level: int | None = None) -> None:
        if kind == "zstd":
            import zstandard

            self._c = zstandard.ZstdCompressor(level=level or 3).compressobj()
            self._finish = self._c.flush
        elif kind == "gzip":
            self._c = zlib.compressobj(level or 6, zlib.DEFLATED, 31)
            self._finish = self._c.flush
        else:
            raise ValueError(kind)
        self.compress = self._c.compress

    def finish(self) -> bytes:
        return self._finish()


def kind_from_name(path: str) -> str:
    """Compression chosen by an output file's extension."""
    if path.endswith((".zst", ".zstd")):
        return "zstd"
    if path.endswith(".gz"):
        return "gzip"
    return "plain"


def normalise_kind(name: str | None) -> str | None:
    return {None: None, "none": "plain", "zst": "zstd", "zstd": "zstd", "gz": "gzip",
            "gzip": "gzip", "plain": "plain"}[name]
