"""`StreamRun`: one streaming tool run, from inputs to outputs, with nothing lost.

    with StreamRun("clean", opts) as run:
        for doc in run.docs():
            reason = check(doc)
            if reason:
                run.drop(doc, reason)
            else:
                run.write(doc)

or, with `--workers` and per-document work, `run.apply(fn)` where
`fn(doc) -> reason | None` may modify the doc. On success the outputs are
committed (renamed into place), `--stats` written and the summary printed;
on any error the file outputs are removed.
"""

import os
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial

import orjson

from llmtk.errors import UsageError
from llmtk.io.compression import normalise_kind
from llmtk.io.reader import BadRecord, expand_inputs, read_docs
from llmtk.io.record import DUMP_OPTS, Doc
from llmtk.io.summary import Summary
from llmtk.io.workers import ordered_map
from llmtk.io.writer import Sink, stderr_is_terminal


@dataclass
class StreamOptions:
    inputs: list[str] = field(default_factory=list)
    output: str | None = None
    compress: str | None = None
    rejects: str | None = None
    stats: str | None = None
    text_field: str = "text"
    on_error: str = "fail"  # fail | skip | reject
    shard: tuple[int, int] | None = None
    workers: int = 1
    quiet: bool = False


class StreamRun:
    def __init__(self, tool: str, opts: StreamOptions, require_text: bool = True) -> None:
        self.tool = tool
        self.opts = opts
        self.require_text = require_text
        self.summary = Summary(tool)
        self.paths = expand_inputs(opts.inputs)
        if self.paths == ["-"] and _stdin_is_terminal():
            raise UsageError(
                f"no input: give files, or pipe records in "
                f"(e.g. zstdcat data.jsonl.zst | llmtk {tool})"
            )
        self.output: Sink | None = None
        self.rejects: Sink | None = None
        self._progress = None

    # -- context -------------------------------------------------------------

    def __enter__(self) -> "StreamRun":
        self.output = Sink(self.opts.output, normalise_kind(self.opts.compress))
        try:
            if self.opts.rejects:
                self.rejects = Sink(self.opts.rejects)
        except BaseException:
            self.output.abort()
            raise
        if not self.opts.quiet and stderr_is_terminal():
            from llmtk.io.progress import Progress

            self._progress = Progress(self.tool, self.summary,
                                      reads_pipe=self.paths == ["-"] and _stdin_is_pipe())
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._progress is not None:
            self._progress.stop()
        sinks = [s for s in (self.output, self.rejects) if s is not None]
        if exc_type is not None:
            for sink in sinks:
                sink.abort()
            return
        try:
            for sink in sinks:
                sink.commit()
        except BaseException:
            for sink in sinks:
                sink.abort()
            raise
        self.summary.bytes_out = self.output.bytes_written if self.output else 0
        self.summary.finish()
        if self.opts.stats:
            write_json_atomically(self.opts.stats, self.summary.as_dict())
        if not self.opts.quiet:
            self.summary.print()

    # -- reading -------------------------------------------------------------

    def docs(self) -> Iterator[Doc]:
        """Every good record of this shard; bad ones are handled per --on-error."""
        on_bad = None if self.opts.on_error == "fail" else self.bad_record
        on_bytes = self._progress.update if self._progress is not None else None
        return read_docs(self.paths, self.opts.text_field, on_bad, self.opts.shard,
                         self.require_text, on_bytes, self.summary)

    def bad_record(self, bad: BadRecord) -> None:
        """Count a bad input line (and write it to --rejects with --on-error reject)."""
        self.summary.records_in += 1
        self.summary.errors[bad.reason] += 1
        if self.opts.on_error == "reject" and self.rejects is not None:
            self.rejects.write(orjson.dumps(bad.to_reject(), option=DUMP_OPTS))

    # -- writing -------------------------------------------------------------

    def write(self, doc: Doc) -> None:
        raw = doc.raw
        self.output.write(raw + b"\n" if raw is not None else doc.to_bytes())  # type: ignore[union-attr]
        self.summary.records_out += 1
        if doc.counts:
            self.summary.counts.update(doc.counts)

    def drop(self, doc: Doc, reason: str, **details) -> None:
        """Count a dropped record and send it to --rejects with llmtk.reason."""
        self.summary.dropped[reason] += 1
        if doc.counts:
            self.summary.counts.update(doc.counts)
        if self.rejects is not None:
            record = dict(doc.data)
            record["llmtk"] = {**record.get("llmtk", {}), "reason": reason, **details}
            self.rejects.write(orjson.dumps(record, option=DUMP_OPTS))

    def count(self, key: str, n: int = 1) -> None:
        self.summary.counts[key] += n

    def apply(
        self,
        fn: Callable[[Doc], str | None],
        docs: Iterable[Doc] | None = None,
        chunk_size: int = 256,
    ) -> None:
        """Run `fn` on every doc (in --workers processes) and write or drop each, in order.

        fn returns None to keep the (possibly modified) doc, or a drop reason.
        """
        source = self.docs() if docs is None else docs
        in_flight: deque[Doc] = deque()  # the docs whose results are still to come, in order

        def feed() -> Iterator[Doc]:
            for doc in source:
                in_flight.append(doc)
                yield doc

        for reason, data, counts in ordered_map(partial(_apply_chunk, fn), feed(),
                                                self.opts.workers, chunk_size):
            doc = in_flight.popleft()
            if data is not None:  # changed by fn (in a worker, or in place here)
                doc.data, doc.raw = data, None
            doc.counts = counts
            if reason is None:
                self.write(doc)
            else:
                self.drop(doc, reason)


def _apply_chunk(fn: Callable[[Doc], str | None], chunk: list[Doc]) -> list[tuple]:
    """(reason, new data or None if unchanged, counts) per doc: an unchanged doc's data
    does not travel back from a worker process."""
    out = []
    for doc in chunk:
        reason = fn(doc)
        out.append((reason, None if doc.raw is not None else doc.data, doc.counts))
    return out


def _stdin_is_pipe() -> bool:
    """stdin is a pipe or FIFO: this tool is a later stage of a pipeline."""
    import stat

    try:
        return stat.S_ISFIFO(os.fstat(sys.stdin.fileno()).st_mode)
    except (OSError, ValueError):
        return False


def _stdin_is_terminal() -> bool:
    try:
        return os.isatty(sys.stdin.fileno())
    except (OSError, ValueError):
        return False


def write_json_atomically(path: str, obj) -> None:
    """A report or stats file: indented JSON with sorted keys, written atomically."""
    options = orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE
    write_file_atomically(path, orjson.dumps(obj, option=options))


def write_file_atomically(path: str, data: bytes) -> None:
    """Write a small file via a temporary name and a rename."""
    sink = Sink(path, "plain")
    try:
        sink.write(data)
        sink.commit()
    except BaseException:
        sink.abort()
        raise


