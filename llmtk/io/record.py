"""One document of a stream, with where it came from; or one bad record, with why."""

from dataclasses import dataclass
from typing import Any

import orjson

DUMP_OPTS = orjson.OPT_APPEND_NEWLINE


class Doc:
    """A parsed JSON object plus its original line.

    `raw` is the line as read (without the newline); it is written back
    unchanged unless the record was modified, so pass-through costs no
    re-serialisation and keeps the input's bytes exactly. A change through
    `set_text`/`annotate` drops `raw`; code that edits `data` directly must set
    `raw = None` itself.
    """

    __slots__ = ("data", "raw", "source", "line", "index", "field", "counts")

    def __init__(
        self, data: dict, raw: bytes | None, source: str, line: int, index: int, field: str = "text"
    ) -> None:
        self.data = data
        self.raw = raw
        self.source = source  # file name, or '-' for stdin
        self.line = line  # 1-based line number within source
        self.index = index  # 0-based position in the whole input stream
        self.field = field  # the text field's name
        self.counts: dict[str, int] | None = None  # per-document counters for the summary

    @property
    def text(self) -> str:
        return self.data[self.field]

    @property
    def id(self) -> Any:
        return self.data.get("id")

    def where(self) -> str:
        return f"{self.source}:{self.line}"

    def set_text(self, text: str) -> None:
        if text != self.data[self.field]:
            self.data[self.field] = text
            self.raw = None

    def annotate(self, **values: Any) -> None:
        """Add values under the record's `llmtk` key."""
        self.data.setdefault("llmtk", {}).update(values)
        self.raw = None

    def count(self, key: str, n: int = 1) -> None:
        if self.counts is None:
            self.counts = {}
        self.counts[key] = self.counts.get(key, 0) + n

    def to_bytes(self) -> bytes:
        if self.raw is not None:
            return self.raw + b"\n"
        return orjson.dumps(self.data, option=DUMP_OPTS)

    def __repr__(self) -> str:
        return f"Doc({self.where()}, {self.data!r})"


def repeats_key(raw: bytes, key: str) -> bool:
    """Does the top-level object of this line hold `key` more than once?

    orjson (like every JSON parser here) keeps the last value of a repeated
    key, while the raw line still holds both: a tool that checks or scrubs the
    parsed text must not pass such a line through unchanged. Cheap in the
    usual case (the key's bytes appear once and nothing is escaped); a line
    with the key twice, or with a \\u escape (a key can be spelled with one),
    is parsed again with the pairs kept.
    """
    spelled = orjson.dumps(key)
    n = raw.count(spelled)
    if n > 1:
        return _count_top_level(raw, key) > 1
    if b"\\u" not in raw:
        return False
    return _count_top_level(raw, key) > 1


def _count_top_level(raw: bytes, key: str) -> int:
    import json

    calls: list[list] = []

    def keep_pairs(pairs):
        calls.append(pairs)
        return dict(pairs)

    try:
        json.loads(raw, object_pairs_hook=keep_pairs)
    except ValueError:
        return 0
    return sum(1 for k, _ in calls[-1] if k == key) if calls else 0  # the outer object is last


@dataclass
class BadRecord:
    source: str
    line: int
    index: int
    reason: str
    message: str
    raw: bytes
    offset: int | None = None  # byte offset of a web-archive record (then line is its number)

    def where(self) -> str:
        if self.offset is not None:
            return f"{self.source}: record {self.line} at byte offset {self.offset}"
        return f"{self.source}:{self.line}"

    def to_reject(self) -> dict:
        return {
            "llmtk": {
                "reason": self.reason,
                "error": self.message,
                "source": self.source,
                "line": self.line,
                **({} if self.offset is None else {"offset": self.offset}),
                "raw": self.raw.decode("utf-8", "replace"),
            }
        }


# What a record source other than the JSONL line loop (Parquet, web archives) yields, for
# the one accounting loop in llmtk.io.reader: a parsed record, a bad one, a skipped one
# (counted as dropped with its reason), or an int (bytes read, for the summary).


class Parsed:
    __slots__ = ("data", "line")

    def __init__(self, data: dict, line: int) -> None:
        self.data = data
        self.line = line  # row or record number in the file, 1-based


class Invalid:
    __slots__ = ("line", "reason", "message", "raw", "offset")

    def __init__(self, line: int, reason: str, message: str, raw: bytes = b"",
                 offset: int | None = None) -> None:
        self.line = line
        self.reason = reason
        self.message = message
        self.raw = raw
        self.offset = offset  # byte offset of the record in the file, where known


class Skipped:
    __slots__ = ("line", "reason")

    def __init__(self, line: int, reason: str) -> None:
        self.line = line
        self.reason = reason
