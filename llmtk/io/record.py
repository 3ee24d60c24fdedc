"""One document of a stream, with where it came from."""

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
