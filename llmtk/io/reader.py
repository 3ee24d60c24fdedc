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
                raise UsageError(f"{item}: directory holds no .jsonl, .jsonl.zst or .jsonl.gz files")
            paths.extend(sorted(found))
        elif glob.has_magic(item):
            matches = sorted(p for p in glob.glob(item, recursive=True) if os.path.isfile(p))
            if not matches:
                raise UsageError(f"{item}: no files match")
            paths.extend(matches)
        else:
            raise UsageError(f"{item}: no such file or directory")
    return paths


def iter_lines(path: str) -> Iterator[tuple[int, bytes]]:
    """(line number, line bytes without newline) for every line of a (compressed) file.

    Raises TruncatedInput with `.line` set to the line where the stream broke off.
    """
    lineno = 0
    pending = b""
    try:
        with open_binary(path) as f:
            for chunk in iter_decompressed(f):
                if pending:
                    chunk = pending + chunk
                lines = chunk.split(b"\n")
                pending = lines.pop()
                for line in lines:
                    lineno += 1
                    yield lineno, line
    except TruncatedInput as e:
        e.line = lineno + 1  # type: ignore[attr-defined]
        raise
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e.strerror or e}") from None
    if pending:
        yield lineno + 1, pending


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
) -> Iterator[Doc]:
    """Parse every line of every path into a Doc.

    on_bad: called with each bad line; when None a bad line raises DataError.
    shard: (k, n) keeps only the records of shard k (see llmtk.io.shard).
    on_bytes: called with the size of each line read (for the summary).
    """
    loads = orjson.loads
    index = -1
    for path in paths:
        name = "<stdin>" if path == "-" else path
        try:
            for lineno, line in iter_lines(path):
                if on_bytes is not None:
                    on_bytes(len(line) + 1)
                if line.endswith(b"\r"):
                    line = line[:-1]
                if not line.strip():
                    continue  # blank lines are not records
                index += 1
                try:
                    data = loads(line)
                except orjson.JSONDecodeError as e:
                    reason, msg = _classify_json_error(str(e))
                    bad = BadRecord(name, lineno, index, reason, msg, line)
                else:
                    if type(data) is not dict:
                        bad = BadRecord(name, lineno, index, "io.not_object",
                                        f"expected a JSON object, got {type(data).__name__}", line)
                    elif require_text and type(data.get(text_field)) is not str:
                        if text_field not in data:
                            bad = BadRecord(name, lineno, index, "io.missing_text",
                                            f"no {text_field!r} field", line)
                        else:
                            bad = BadRecord(name, lineno, index, "io.text_not_string",
                                            f"field {text_field!r} is not a string", line)
                    else:
                        if shard is None or in_shard(data.get("id"), index, shard):
                            yield Doc(data, line, name, lineno, index, text_field)
                        continue
                if shard is not None and not in_shard(None, index, shard):
                    continue
                if on_bad is None:
                    raise DataError(f"{bad.where()}: {bad.message}")
                on_bad(bad)
        except TruncatedInput as e:
            index += 1
            line_no = getattr(e, "line", 0)
            if shard is not None and not in_shard(None, index, shard):
                continue
            bad = BadRecord(name, line_no, index, "io.truncated", str(e), b"")
            if on_bad is None:
                raise DataError(f"{bad.where()}: {bad.message}") from None
            on_bad(bad)
