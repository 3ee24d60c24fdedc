"""Reading document streams: input expansion, line splitting, JSON parsing, validation.

A bad line becomes a `BadRecord` with a stable reason (`io.malformed_json`,
`io.not_object`, `io.missing_text`, `io.text_not_string`, `io.invalid_utf8`,
`io.truncated`) and a `FILE:LINE: what is wrong` message. The caller decides
whether it stops the run or is counted (`--on-error`).
"""

import glob
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import orjson

from llmtk.errors import DataError, UsageError
from llmtk.io.compression import TruncatedInput, iter_decompressed, open_binary
from llmtk.io.record import Doc
from llmtk.io.shard import in_shard
from llmtk.io.summary import Summary

INPUT_PATTERNS = ("*.jsonl", "*.jsonl.zst", "*.jsonl.gz", "*.jsonl.zstd", "*.json.zst", "*.json.gz")


@dataclass
class BadRecord:
    source: str
    line: int
    index: int
    reason: str
    message: str
    raw: bytes

    def where(self) -> str:
        return f"{self.source}:{self.line}"

    def to_reject(self) -> dict:
        return {
            "llmtk": {
                "reason": self.reason,
                "error": self.message,
                "source": self.source,
                "line": self.line,
                "raw": self.raw.decode("utf-8", "replace"),
            }
        }


def expand_inputs(inputs: list[str]) -> list[str]:
    """Files, directories (their .jsonl* files, recursively) and globs, in sorted order.

    No inputs means stdin ('-').
    """
    if not inputs:
        return ["-"]
    paths: list[str] = []
    for item in inputs:
        if item == "-" or os.path.isfile(item):
            paths.append(item)
        elif os.path.isdir(item):
            found = set()
            for pattern in INPUT_PATTERNS:
                found.update(glob.glob(os.path.join(item, "**", pattern), recursive=True))
            if not found:
                raise UsageError(f"{item}: directory holds no .jsonl, .jsonl.zst or .gz files")
            paths.extend(sorted(found))
        elif glob.has_magic(item):
            matches = sorted(p for p in glob.glob(item, recursive=True) if os.path.isfile(p))
            if not matches:
                raise UsageError(f"{item}: no files match")
            paths.extend(matches)
        else:
            raise UsageError(f"{item}: no such file or directory")
    return paths


def iter_line_batches(path: str) -> Iterator[tuple[int, list[bytes], int]]:
    """(number of the line before the batch, lines without newlines, decompressed bytes) per chunk.

    Batches keep the per-line cost of the hot loop down. Raises TruncatedInput
    with `.line` set to the line where the stream broke off.
    """
    lineno = 0
    pending = b""
    try:
        with open_binary(path) as f:
            for chunk in iter_decompressed(f):
                size = len(chunk)
                if pending:
                    chunk = pending + chunk
                lines = chunk.split(b"\n")
                pending = lines.pop()
                yield lineno, lines, size
                lineno += len(lines)
    except TruncatedInput as e:
        e.line = lineno + 1  # type: ignore[attr-defined]
        raise
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e.strerror or e}") from None
    if pending:
        yield lineno, [pending], 0


def _classify_json_error(message: str) -> tuple[str, str]:
    if "UTF-8" in message or "utf-8" in message:
        return "io.invalid_utf8", f"invalid UTF-8 ({message})"
    return "io.malformed_json", f"malformed JSON ({message})"


def read_docs(
    paths: list[str],
    text_field: str = "text",
    on_bad: Callable[[BadRecord], None] | None = None,
    shard: tuple[int, int] | None = None,
    require_text: bool = True,
    on_bytes: Callable[[int], None] | None = None,
    summary: Summary | None = None,
    file_starts: list[int] | None = None,
) -> Iterator[Doc]:
    """Parse every line of every path into a Doc. Blank lines are skipped, not records.

    on_bad: called with each bad line; when None a bad line raises DataError.
    shard: (k, n) keeps only the records of shard k (see llmtk.io.shard).
    on_bytes: called with the number of decompressed bytes of each chunk read.
    summary: its records_in and bytes_in are kept up to date (cheaper than a wrapper).
    file_starts: gets the index of each file's first record as the file is opened, and
    the total number of records at the end, so record ordinal in file = index - start.
    """
    loads = orjson.loads
    decode_error = orjson.JSONDecodeError
    index = -1  # position of the record in the whole input, blank lines excluded
    for path in paths:
        if file_starts is not None:
            file_starts.append(index + 1)
        name = "<stdin>" if path == "-" else path
        try:
            for lineno, lines, size in iter_line_batches(path):
                if summary is not None:
                    summary.bytes_in += size
                if on_bytes is not None:
                    on_bytes(size)
                for line in lines:
                    lineno += 1
                    try:
                        data = loads(line)
                    except decode_error as e:
                        if not line.strip():
                            continue
                        index += 1
                        reason, msg = _classify_json_error(str(e))
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
        except TruncatedInput as e:
            index += 1
            if shard is not None and not in_shard(None, index, shard):
                continue
            bad = BadRecord(name, getattr(e, "line", 0), index, "io.truncated", str(e), b"")
            if on_bad is None:
                raise DataError(f"{bad.where()}: {bad.message}") from None
            on_bad(bad)
    if file_starts is not None:
        file_starts.append(index + 1)


def _invalid_record(data, text_field: str, name: str, lineno: int, index: int, line: bytes):
    if type(data) is not dict:
        return BadRecord(name, lineno, index, "io.not_object",
                         f"expected a JSON object, got {type(data).__name__}", line)
    if text_field not in data:
        return BadRecord(name, lineno, index, "io.missing_text", f"no {text_field!r} field", line)
    return BadRecord(name, lineno, index, "io.text_not_string",
                     f"field {text_field!r} is not a string", line)
