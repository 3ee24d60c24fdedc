"""Reading document streams: input expansion, line splitting, JSON parsing, validation.

A bad line becomes a `BadRecord` with a stable reason (`io.malformed_json`,
`io.not_object`, `io.missing_text`, `io.text_not_string`, `io.invalid_utf8`,
`io.truncated`, `io.corrupt`, `io.record_too_long`) and a `FILE:LINE: what is
wrong` message. The caller decides whether it stops the run or is counted
(`--on-error`). A damaged compressed stream ends its file: the rest of that
file is skipped (one error, records lost unknown) and the next file is read.

Lines are cut in time and memory linear in their length: a line longer than
a read chunk is collected as a list of pieces and joined once, and one longer
than `max_record` bytes is dropped piece by piece, never held in full.
"""

import glob
import os
import re
import stat
from collections.abc import Callable, Iterator

import orjson

from llmtk.errors import DataError, UsageError
from llmtk.io.compression import (
    CHUNK,
    UNREAD_BY_EXTENSION,
    UNSUPPORTED_BY_NAME,
    CorruptInput,
    TruncatedInput,
    UnsupportedCompression,
    iter_decompressed,
    open_binary,
    peek,
)
from llmtk.io.parquet import columnar_kind, columnar_records, hf_dataset_files
from llmtk.io.record import BadRecord, Doc, Invalid, Parsed, Skipped
from llmtk.io.shard import in_shard
from llmtk.io.summary import Summary

# What a directory walk reads: JSON Lines (`.ndjson` is the same format), plain or
# compressed, Parquet and web archives. Arrow files are read as a save_to_disk folder (in
# its state.json's order, one split at a time) or by name, never picked up by a walk: it
# would read a DatasetDict's train and test splits as one. Plain `.json` is left out on
# purpose: in a data folder it is metadata or a report (llmtk's own --stats), while
# `.json.gz`/`.json.zst` are the names of JSON Lines dumps in the wild (C4's
# `c4-train.*.json.gz`). Every other file of a folder is named on stderr and counted
# (`files_skipped`), never passed over in silence.
_COMPRESSED = (".zst", ".zstd", ".gz", ".xz", ".bz2")
INPUT_SUFFIXES = (".jsonl", ".ndjson", *(b + c for b in (".jsonl", ".ndjson", ".json")
                                        for c in _COMPRESSED),
                  ".parquet", ".warc", ".warc.gz", ".arc", ".arc.gz", ".wet",
                  ".wet.gz")
# Why a file of a folder was not read, by its name (the first that matches).
_SKIP_REASONS = (
    ((".csv", ".tsv"), "CSV, not JSON Lines: convert it"),
    ((".json",), "JSON, not JSON Lines: name it to read it as JSON Lines"),
    ((".done",), "an llmtk completion marker"),
    ((".arrow",), "Arrow: name its save_to_disk folder, or the file"),
)
# Compressions and archives llmtk does not read, by extension.
_UNREAD = {**UNREAD_BY_EXTENSION, ".tar": "tar", ".tgz": "tar", ".tar.gz": "tar",
           ".snappy": "snappy"}
_TEMPORARY = re.compile(r"\.tmp-\d+$")  # llmtk.io.atomic's TARGET.tmp-PID
SKIPPED_SHOWN = 5  # skipped files named in the warning; the rest are counted
MAX_RECORD_BYTES = 64 << 20  # default --max-record-bytes


class _TooLong:
    """Stands in, in a batch of lines, for a line longer than max_record (not kept)."""

    def strip(self) -> bytes:
        return b"x"


TOO_LONG = _TooLong()


def expand_inputs(inputs: list[str], skipped: list[str] | None = None) -> list[str]:
    """Files, directories (their data files, recursively) and globs, in sorted order.

    No inputs means stdin ('-'). A named path that is not a directory is read as
    given, so FIFOs, /dev/stdin and process substitution (/dev/fd/N) work. The other
    files of a directory (not data by their names) are appended to `skipped` when it is
    given; otherwise they are named on stderr here (`warn_skipped`).
    """
    if not inputs:
        return ["-"]
    paths: list[str] = []
    passed_over: list[str] = []
    for item in inputs:
        if item == "-":
            paths.append(item)
        elif os.path.isdir(item):
            arrow = hf_dataset_files(item)  # a Hugging Face save_to_disk folder
            if arrow is not None:
                paths.extend(arrow)
                continue
            others: list[str] = []
            found = walk(item, skipped=others)
            if not found:
                held = f"; it holds {describe_skipped(others, 'other file')}" if others \
                    else ""
                raise UsageError(f"{item}: directory holds no data files (JSON Lines, "
                                 f"Parquet or WARC, see docs/io.md#input){held}")
            paths.extend(found)
            passed_over.extend(others)
        elif os.path.exists(item):
            paths.append(item)
        elif glob.has_magic(item):
            hits = sorted(glob.glob(item, recursive=True))
            matches = _once([p for p in hits if os.path.isfile(p)])
            # a link to a deleted file is named with the skipped ones, not dropped
            dangling = [p for p in hits if os.path.islink(p) and not os.path.exists(p)]
            if not matches:
                held = f"; it matches {describe_skipped(dangling)}" if dangling else ""
                raise UsageError(f"{item}: no files match{held}")
            paths.extend(matches)
            passed_over.extend(dangling)
        else:
            raise UsageError(f"{item}: no such file or directory")
    if skipped is None:
        warn_skipped(passed_over)
    else:
        skipped.extend(passed_over)
    return paths


def walk(top: str, suffixes: tuple[str, ...] | None = INPUT_SUFFIXES,
         skipped: list[str] | None = None) -> list[str]:
    """The files under `top` (with one of `suffixes`; None: all), sorted; the other
    files (and FIFOs) are appended to `skipped`, if given.

    The rule: each real directory is entered once, by (device, inode), so a
    symlink loop or two links to one folder cannot repeat files, and each real
    file is listed once (the first name in sorted order). Names starting with a
    dot (files and directories) are skipped without a word, as glob and most tools do.
    """
    seen_dirs: set[tuple[int, int]] = set()
    found: list[str] = []
    others: list[str] = []

    def visit(directory: str) -> None:
        try:
            st = os.stat(directory)
            key = (st.st_dev, st.st_ino)
            if key in seen_dirs:
                return
            seen_dirs.add(key)
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as e:
            raise DataError(f"{directory}: cannot read directory: {e.strerror}") from None
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_dir():
                visit(entry.path)
            elif entry.is_file() or _is_fifo(entry):  # a FIFO named like data is data
                if suffixes is None or entry.name.endswith(suffixes):
                    found.append(entry.path)
                else:
                    others.append(entry.path)
            else:  # a dangling link, a socket, a device: named, never passed over in silence
                others.append(entry.path)

    visit(top)
    if skipped is not None:
        data = set(found)
        # llmtk's own completion markers beside its outputs are no news: not named
        skipped.extend(p for p in _once(sorted(others))
                       if not (p.endswith(".done") and p[:-5] in data))
    return _once(sorted(found))


def skip_reason(path: str) -> str:
    """Why a file of a folder was not read: what it is, else what its name says."""
    if os.path.islink(path) and not os.path.exists(path):
        return "a dangling symbolic link"
    if os.path.exists(path) and not os.path.isfile(path):
        return "not a regular file"
    if _TEMPORARY.search(path):
        return "the temporary file of an llmtk run that was killed"
    for suffixes, reason in _SKIP_REASONS:
        if path.endswith(suffixes):
            return reason
    for suffix, name in _UNREAD.items():
        if path.endswith(suffix):
            return f"{name}: decompress it first"
    return "not named like data"


def describe_skipped(paths: list[str], what: str = "file") -> str:
    """`N files: a.csv (why), b.txt (why), and 3 more`."""
    names = ", ".join(f"{p} ({skip_reason(p)})" for p in paths[:SKIPPED_SHOWN])
    more = f", and {len(paths) - SKIPPED_SHOWN} more" if len(paths) > SKIPPED_SHOWN else ""
    return f"{len(paths)} {what}{'s' if len(paths) != 1 else ''}: {names}{more}"


_warned: set[str] = set()  # skipped files already named by this process


def warn_skipped(paths: list[str], tool: str | None = None, say: bool = True,
                 fresh: bool = False) -> None:
    """Name the files of input folders that are not read, on stderr, each once (a
    command that expands its inputs twice, as mix does, says it once). say=False only
    marks them as named (another task of the job array names them); fresh=True forgets
    what earlier runs in this process named (a StreamRun is a new run)."""
    if fresh:
        _warned.clear()
    new = [p for p in paths if p not in _warned]
    _warned.update(new)
    # every process of a torchrun job expands the same --data: its rank 0 speaks for all
    if not new or not say or os.environ.get("RANK", "0") != "0":
        return
    import sys

    who = f"llmtk {tool}" if tool else "llmtk"
    sys.stderr.write(f"{who}: warning: skipped {describe_skipped(new)}; a folder is read for "
                     "its JSON Lines, Parquet and WARC files (docs/io.md#input)\n")
    sys.stderr.flush()


def _is_fifo(entry: os.DirEntry) -> bool:
    try:
        return stat.S_ISFIFO(entry.stat().st_mode)
    except OSError:
        return False


def _once(paths: list[str]) -> list[str]:
    """Keep the first name of each real file (device, inode). A path that cannot be
    stat'ed (a dangling link, a file deleted since the listing) stays: reading it fails
    in words, a skipped one is named; neither vanishes."""
    seen: set[tuple[int, int]] = set()
    out = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            out.append(p)
            continue
        key = (st.st_dev, st.st_ino)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


class ReadPosition:
    """How far into the file on disk a reader is (compressed bytes): for progress."""

    __slots__ = ("offset",)

    def __init__(self) -> None:
        self.offset: int | None = None  # None: not seekable (a pipe)


def iter_line_batches(
    path: str, max_record: int = MAX_RECORD_BYTES, position: ReadPosition | None = None
) -> Iterator[tuple[int, list, int]]:
    """(number of the line before the batch, lines without newlines, decompressed bytes) per chunk.

    Batches keep the per-line cost of the hot loop down. A line longer than
    `max_record` bytes comes as `TOO_LONG`. `position` (if given) is kept at the byte
    offset read so far in the file itself. Raises TruncatedInput / CorruptInput
    with `.line` set to the line where the stream broke off.
    """
    lineno = 0
    parts: list[bytes] = []  # the unfinished last line, in pieces
    held = 0  # bytes in parts
    too_long = False  # the unfinished line is over max_record: its bytes are dropped
    check_each = max_record < CHUNK  # otherwise no complete line inside a chunk can be too long
    try:
        with open_binary(path) as f:
            seekable = position is not None and f.seekable()
            for chunk in iter_decompressed(f):
                size = len(chunk)
                if seekable:
                    position.offset = f.tell()  # type: ignore[union-attr]
                nl = chunk.find(b"\n")
                if nl < 0:  # the whole chunk belongs to the unfinished line
                    if not too_long:
                        parts.append(chunk)
                        held += size
                        if held > max_record:
                            too_long, parts, held = True, [], 0
                    yield lineno, [], size
                    continue
                if parts or too_long:
                    if too_long or held + nl > max_record:
                        first = TOO_LONG
                    else:
                        parts.append(chunk[:nl])
                        first = b"".join(parts)
                    lines = chunk[nl + 1:].split(b"\n")
                    lines.insert(0, first)
                else:
                    lines = chunk.split(b"\n")
                tail = lines.pop()
                too_long = len(tail) > max_record
                parts, held = ([tail], len(tail)) if tail and not too_long else ([], 0)
                if check_each:
                    lines = [TOO_LONG if type(x) is bytes and len(x) > max_record else x
                             for x in lines]
                yield lineno, lines, size
                lineno += len(lines)
    except (TruncatedInput, CorruptInput, UnsupportedCompression) as e:
        e.line = lineno + 1  # type: ignore[attr-defined]
        raise
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e.strerror or e}") from None
    if too_long:
        yield lineno, [TOO_LONG], 0
    elif parts:
        yield lineno, [b"".join(parts)], 0


def _refuse_other_format(name: str, first_line: bytes, piped: bool) -> None:
    """A web archive or an Arrow stream that reached the line reader (a pipe, or a
    compression the WARC reader does not take) is one clear error, not a bad line per line;
    so is a file named as a compression without magic bytes (brotli) that is not text."""
    from llmtk.io.warc import warc_kind

    for suffix, (kind, tool) in UNSUPPORTED_BY_NAME.items():
        if name.endswith(suffix):
            e = UnsupportedCompression(kind, tool)
            e.line = 1  # type: ignore[attr-defined]
            raise e

    head = first_line[:64]
    what = {"warc": "a web archive (WARC)", "arc": "a web archive (ARC)"}.get(
        warc_kind(head) or "") or ("Arrow data" if columnar_kind(head) else None)
    if what is None:
        return
    if piped:
        raise DataError(f"{name}: {what} is read from a file, not from stdin or a pipe: "
                        "pass the file name (as for Parquet)")
    raise DataError(f"{name}: {what} compressed other than with gzip: llmtk reads web "
                    "archives plain or gzip-compressed; recompress it (e.g. xz -dc F | gzip "
                    "> F.warc.gz)")


def _classify_json_error(message: str, line: bytes = b"") -> tuple[str, str]:
    if "UTF-8" in message or "utf-8" in message:
        return "io.invalid_utf8", f"invalid UTF-8 ({message})"
    if b"," in line and not line.lstrip().startswith((b"{", b"[")):
        return "io.malformed_json", (
            f"malformed JSON ({message}); this looks like CSV, not JSON Lines: convert it "
            "first, e.g. python3 -c 'import csv, json, sys; [print(json.dumps(r)) for r in "
            "csv.DictReader(sys.stdin)]' < data.csv > data.jsonl")
    return "io.malformed_json", f"malformed JSON ({message})"


def read_docs(
    paths: list[str],
    text_field: str = "text",
    on_bad: Callable[[BadRecord], None] | None = None,
    shard: tuple[int, int] | None = None,
    require_text: bool = True,
    on_bytes: Callable[[int, int | None], None] | None = None,
    summary: Summary | None = None,
    max_record: int = MAX_RECORD_BYTES,
    file_starts: list[int] | None = None,
) -> Iterator[Doc]:
    """Parse every line of every path into a Doc. Blank lines are skipped, not records.

    on_bad: called with each bad line; when None a bad line raises DataError.
    shard: (k, n) keeps only the records of shard k (see llmtk.io.shard).
    on_bytes: called per chunk read with its decompressed size and the on-disk bytes
    read so far across `paths` (None once a path is not a regular file: a pipe).
    summary: its records_in and bytes_in are kept up to date (cheaper than a wrapper).
    max_record: a longer line is a bad record (io.record_too_long).
    file_starts: gets the index of each file's first record as the file is opened, and
    the total number of records at the end, so record ordinal in file = index - start.
    """
    loads = orjson.loads
    decode_error = orjson.JSONDecodeError
    index = -1  # position of the record in the whole input, blank lines excluded
    read_before: int | None = 0  # on-disk bytes of the paths already read
    for path in paths:
        if file_starts is not None:
            file_starts.append(index + 1)
        name = "<stdin>" if path == "-" else path
        records = _record_source(path, text_field, max_record)  # Parquet, Arrow, WARC
        if records is not None:
            disk = regular_size(path)
            read_before = None if read_before is None or disk is None else read_before + disk
            index = yield from _account(name, records, index, text_field, on_bad, shard,
                                        require_text, on_bytes, summary)
            continue
        base, disk = read_before, regular_size(path)
        read_before = None if base is None or disk is None else base + disk
        where = ReadPosition()
        try:
            # the file position only when someone shows progress (a tell() per chunk)
            for lineno, lines, size in iter_line_batches(
                    path, max_record, where if on_bytes is not None else None):
                if summary is not None:
                    summary.bytes_in += size
                if on_bytes is not None:
                    done = None if base is None or where.offset is None \
                        else base + where.offset
                    on_bytes(size, done)
                for line in lines:
                    lineno += 1
                    try:
                        data = loads(line)
                    except decode_error as e:
                        if line is TOO_LONG:
                            index += 1
                            bad = BadRecord(name, lineno, index, "io.record_too_long",
                                            f"record longer than --max-record-bytes "
                                            f"({max_record:,} bytes)", b"")
                        elif not line.strip():
                            continue
                        else:
                            if lineno == 1:  # a whole stream of another format?
                                _refuse_other_format(name, line, disk is None)
                            index += 1
                            reason, msg = _classify_json_error(str(e), line)
                            bad = BadRecord(name, lineno, index, reason, msg, line)
                    else:
                        index += 1
                        if type(data) is dict and (
                            not require_text or type(data.get(text_field)) is str
                        ):
                            if shard is None or in_shard(data.get("id"), index, shard):
                                if line.endswith(b"\r"):
                                    line = line[:-1]
                                if summary is not None:
                                    summary.records_in += 1
                                yield Doc(data, line, name, lineno, index, text_field)
                            continue
                        bad = _invalid_record(data, text_field, name, lineno, index, line)
                    if shard is not None and not in_shard(None, index, shard):
                        continue
                    if on_bad is None:
                        raise DataError(f"{bad.where()}: {bad.message}")
                    on_bad(bad)
        except (TruncatedInput, CorruptInput, UnsupportedCompression) as e:
            index += 1
            if isinstance(e, UnsupportedCompression):
                reason, message = "io.unsupported_compression", e.advice(name)
            elif isinstance(e, TruncatedInput):
                reason, message = "io.truncated", str(e)
            else:
                reason, message = "io.corrupt", f"{e}; the rest of this file is unreadable"
            _report(BadRecord(name, getattr(e, "line", 0), index, reason, message, b""),
                    shard, on_bad)
    if file_starts is not None:
        file_starts.append(index + 1)


def _record_source(path: str, text_field: str, max_record: int) -> Iterator | None:
    """The events of a file that is not JSON Lines (by content), or None."""
    head = peek(path, 512)  # one read of the first bytes decides the format
    if head is None:
        return None
    kind = columnar_kind(head)
    if kind is not None:
        return columnar_records(path, kind)
    from llmtk.io.warc import read_warc, warc_kind

    kind = warc_kind(head)
    if kind is not None:
        return read_warc(path, kind, max_record, text_field)
    return None


def _account(name: str, events: Iterator, index: int, text_field: str, on_bad, shard,
             require_text: bool, on_bytes, summary: Summary | None):
    """Docs from a record source's events, numbered on from `index`; returns the last index.

    The accounting every format shares: each record (parsed, bad or skipped) takes the
    next index, the shard rule is applied to it, a bad record goes to `on_bad` (or stops
    the run), a skipped one is counted as dropped with its reason; an int is bytes read.
    The JSONL line loop in read_docs keeps the same rules inline (it is the hot path).
    """
    for event in events:
        kind = type(event)
        if kind is int:
            if summary is not None:
                summary.bytes_in += event
            if on_bytes is not None:
                on_bytes(event, None)
            continue
        index += 1
        if kind is Parsed:
            data = event.data
            if not require_text or type(data.get(text_field)) is str:
                if shard is None or in_shard(data.get("id"), index, shard):
                    if summary is not None:
                        summary.records_in += 1
                    yield Doc(data, None, name, event.line, index, text_field)
                continue
            bad = _invalid_record(data, text_field, name, event.line, index,
                                  orjson.dumps(data, default=str))
        elif kind is Skipped:
            if summary is not None and (shard is None or in_shard(None, index, shard)):
                summary.records_in += 1
                summary.dropped[event.reason] += 1
            continue
        else:
            assert kind is Invalid
            bad = BadRecord(name, event.line, index, event.reason, event.message, event.raw,
                            event.offset)
        _report(bad, shard, on_bad)
    return index


def _report(bad: BadRecord, shard, on_bad) -> None:
    """A bad record of this shard goes to on_bad, or stops the run when there is none."""
    if shard is not None and not in_shard(None, bad.index, shard):
        return
    if on_bad is None:
        raise DataError(f"{bad.where()}: {bad.message}") from None
    on_bad(bad)


def regular_size(path: str) -> int | None:
    """Bytes on disk of a regular file; None for stdin, a pipe or an unreadable path."""
    if path == "-":
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def _invalid_record(data, text_field: str, name: str, lineno: int, index: int, line: bytes):
    if type(data) is not dict:
        return BadRecord(name, lineno, index, "io.not_object",
                         f"expected a JSON object, got {type(data).__name__}", line)
    if text_field not in data:
        fields = ", ".join(map(repr, list(data)[:12])) + (", ..." if len(data) > 12 else "")
        return BadRecord(name, lineno, index, "io.missing_text",
                         f"no {text_field!r} field (its fields: {fields or 'none'}); name the "
                         "field that holds the text with --text-field", line)
    return BadRecord(name, lineno, index, "io.text_not_string",
                     f"field {text_field!r} is not a string", line)
