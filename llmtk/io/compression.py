"""Byte streams in and out: compression detected from magic bytes, not names.

Reading yields decompressed chunks of zstd, gzip, xz or bzip2 (the last two with the
standard library's lzma and bz2). zstd is read across frames (so `cat a.zst b.zst`
is one stream), gzip across members and xz/bzip2 across streams; a stream that ends
inside a frame raises `TruncatedInput` instead of ending quietly, which is what
python-zstandard's own stream reader would do. Any other damage (trailing
garbage, a bad checksum, a bad header) raises `CorruptInput` with the byte
offset of the frame or member where it was found. Zero bytes after a gzip
member are padding and are skipped, as gzip itself does (`gzip -t` accepts
them); a zstd stream may open with a skippable frame. A compression llmtk does not
read (lz4, zip, 7z, ...) raises `UnsupportedCompression` naming it, instead of being
read as text.
"""

import os
import stat
import zlib
from collections.abc import Iterator
from typing import BinaryIO

from llmtk.errors import DataError

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
GZIP_MAGIC = b"\x1f\x8b"
XZ_MAGIC = b"\xfd7zXZ\x00"
BZIP2_MAGIC = b"BZh"  # then the block size, '1'..'9'
# Formats that are recognised only to be named in the error: no JSON line starts so.
# (magic bytes, the file extension, the name, the command that decompresses it)
UNSUPPORTED = (
    (b"\x04\x22\x4d\x18", ".lz4", "lz4", "lz4 -dc"),
    (b"PK\x03\x04", ".zip", "zip", "unzip -p"),
    (b"PK\x05\x06", ".zip", "zip", "unzip -p"),  # an empty zip archive
    (b"7z\xbc\xaf\x27\x1c", ".7z", "7z", "7z x -so"),
    (b"Rar!\x1a\x07", ".rar", "rar", "unrar p -inul"),
    (b"LZIP", ".lz", "lzip", "lzip -dc"),
    (b"\x1f\x9d", ".Z", "compress (.Z)", "uncompress -c"),
    (b"\x5d\x00\x00", ".lzma", "lzma (legacy .lzma)", "xz -dc"),
)
# Compressions without magic bytes, known by the file's name only (when it is not text).
UNSUPPORTED_BY_NAME = {".br": ("brotli", "brotli -dc")}
# Every compression llmtk does not read, by extension: what a folder's walk names.
UNREAD_BY_EXTENSION = {**{ext: name for _, ext, name, _ in UNSUPPORTED},
                       **{ext: name for ext, (name, _) in UNSUPPORTED_BY_NAME.items()}}
PARQUET_MAGIC = b"PAR1"  # files are read by llmtk.io.parquet; only a pipe gets here
CHUNK = 1 << 20


class TruncatedInput(Exception):
    """The compressed stream ended in the middle of a frame."""


class CorruptInput(Exception):
    """The compressed stream is damaged (not just cut short)."""


class UnsupportedCompression(Exception):
    """The stream is compressed (or archived) in a format llmtk does not read."""

    def __init__(self, name: str, tool: str) -> None:
        super().__init__(name)
        self.name, self.tool = name, tool

    def advice(self, path: str) -> str:
        file = "FILE" if path.startswith("<") else path
        return (f"{self.name}-compressed data, which llmtk does not read (it reads zstd, "
                f"gzip, xz and bzip2): decompress it first, e.g. {self.tool} {file} | llmtk ...")


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
    """'zstd', 'gzip', 'xz', 'bzip2', 'parquet' or 'plain' from the first bytes of a
    stream (6 are enough); a format llmtk does not read raises UnsupportedCompression."""
    if head.startswith(ZSTD_MAGIC) or _skippable(head):
        return "zstd"
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(XZ_MAGIC):
        return "xz"
    if head.startswith(BZIP2_MAGIC) and head[3:4].isdigit() and head[3:4] != b"0":
        return "bzip2"
    if head.startswith(PARQUET_MAGIC):
        return "parquet"
    for magic, _, name, tool in UNSUPPORTED:
        if head.startswith(magic):
            raise UnsupportedCompression(name, tool)
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
    kind = detect(f.peek(6)[:6])  # type: ignore[attr-defined]
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
    elif kind == "gzip":
        yield from _frames(f, lambda: zlib.decompressobj(wbits=31), "gzip", zlib.error)
    elif kind == "xz":
        import lzma

        yield from _frames(f, lambda: lzma.LZMADecompressor(lzma.FORMAT_XZ), "xz",
                           lzma.LZMAError)
    else:
        import bz2

        # bz2 reports bad data as OSError ("Invalid data stream")
        yield from _frames(f, bz2.BZ2Decompressor, "bzip2", OSError)


def _frames(f: BinaryIO, new, kind: str, error: type[Exception]) -> Iterator[bytes]:
    """Decompress frame after frame (zstd), member after member (gzip) or stream after
    stream (xz, bzip2: `cat a.xz b.xz` is one stream for xz -dc too)."""
    d = new()
    started = False  # bytes of the current frame have been fed
    offset = 0  # compressed bytes read so far
    frame_start = 0  # offset of the current frame or member
    while chunk := f.read1(CHUNK):  # type: ignore[attr-defined]
        offset += len(chunk)
        while chunk:
            if not started:
                if kind in ("gzip", "xz"):  # zero padding between or after members or
                    # streams, as gzip and xz allow
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
    return {"zstd": "frame", "gzip": "member"}.get(kind, "stream")


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
        elif kind == "xz":
            import lzma

            self._c = lzma.LZMACompressor(lzma.FORMAT_XZ, preset=level)
            self._finish = self._c.flush
        elif kind == "bzip2":
            import bz2

            self._c = bz2.BZ2Compressor(level or 9)
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
    if path.endswith(".xz"):
        return "xz"
    if path.endswith(".bz2"):
        return "bzip2"
    return "plain"


# --compress values (and their short forms) -> compression kind
COMPRESS_NAMES = {"none": "plain", "plain": "plain", "zst": "zstd", "zstd": "zstd",
                  "gz": "gzip", "gzip": "gzip", "xz": "xz", "bz2": "bzip2", "bzip2": "bzip2"}


def normalise_kind(name: str | None) -> str | None:
    return None if name is None else COMPRESS_NAMES[name]
