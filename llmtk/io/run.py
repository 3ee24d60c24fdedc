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
committed together (all flushed to disk first, then all renamed into place,
`--stats` among them) and the summary printed; on any error, a full disk
included, no file output is renamed and the temporary files are removed.

Before any input is read, every output path is checked (llmtk.io.paths): not
an input, not another output, its directory writable (missing directories are
created as mkdir -p would, and removed again if the run fails). Commands
name their own inputs and outputs beyond the shared ones (`inputs_also`,
`outputs_also`, `output_dirs`) and open their extra outputs through the run
(`open_output`, `write_json`) so that they are committed with the rest.
"""

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial

import orjson

from llmtk.errors import AlreadyDone, ConfigError, UsageError
from llmtk.io import marker
from llmtk.io.atomic import json_bytes
from llmtk.io.compression import normalise_kind
from llmtk.io.parquet import is_parquet_name
from llmtk.io.paths import check_paths, input_identities, make_parents, remove_made
from llmtk.io.reader import (
    MAX_RECORD_BYTES,
    BadRecord,
    expand_inputs,
    read_docs,
    regular_size,
    warn_skipped,
)
from llmtk.io.record import DUMP_OPTS, Doc
from llmtk.io.shard import RECORD_BITS, assign_files
from llmtk.io.summary import Summary
from llmtk.io.workers import ordered_map
from llmtk.io.writer import BUFFER, Sink, stderr_is_terminal


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
    max_record_bytes: int = MAX_RECORD_BYTES
    # The options that change the output, as {"--flag": value}: a sharded task's completion
    # marker records them, and a rerun with others is refused (llmtk.io.marker).
    settings: dict = field(default_factory=dict)


class StreamRun:
    def __init__(
        self,
        tool: str,
        opts: StreamOptions,
        require_text: bool = True,
        *,
        inputs_also: Iterable[str] = (),
        outputs_also: Iterable[tuple[str, str | None]] = (),
        output_dirs: Iterable[tuple[str, str | None]] = (),
    ) -> None:
        """inputs_also: other files or folders the command reads (--eval, --index);
        outputs_also: (option, path) of its other file outputs (--report, --clusters);
        output_dirs: (option, path) of the folders it writes into."""
        self.tool = tool
        self.opts = opts
        self.require_text = require_text
        self.summary = Summary(tool)
        skipped: list[str] = []  # files of input folders that are not data
        self.paths = expand_inputs(opts.inputs, skipped)
        if "-" in self.paths:
            _check_stdin(tool, alone=self.paths == ["-"])
        self._outputs = [("-o", opts.output), ("--rejects", opts.rejects),
                         ("--stats", opts.stats), *outputs_also]
        output_dirs = list(output_dirs)
        check_paths(input_identities(self.paths, list(inputs_also)), self._outputs,
                    output_dirs)
        # --shard on files: this task's whole files (llmtk.io.shard); on stdin: by record hash.
        self.all_paths = self.paths
        self.file_ordinals = list(range(len(self.paths)))
        self.record_shard = opts.shard
        if opts.shard is not None and "-" not in self.paths:
            self.file_ordinals = assign_files(self.paths, opts.shard)
            self.paths = [self.all_paths[i] for i in self.file_ordinals]
            self.record_shard = None
        self.file_starts: list[int] = []  # filled by read_docs: first index of each file
        self._marker = None
        if opts.shard is not None and opts.output not in (None, "-") and "-" not in self.paths:
            # Where an output goes is checked by the marker (its outputs must exist), not
            # compared as a setting: a new --report path just makes the task run again.
            named = {o for o, _ in (*self._outputs, *output_dirs)}
            settings = {k: v for k, v in opts.settings.items() if k not in named}
            self._marker = marker.fingerprint(tool, self.paths, settings)
            if marker.is_done(opts.output, self._marker, self._output_paths()):
                raise AlreadyDone(f"{opts.output} is done ({marker.marker_path(opts.output)}); "
                                  "skipping this task")
        # Every input file is accounted for: read (files_in) or named and counted as skipped
        # (files_skipped). The skipped ones belong to no task's share, so task 0 of a job
        # array names and counts them (once in the merged stats); so it does the files of
        # a stream that every task reads (record shards).
        first_task = opts.shard is None or opts.shard[0] == 0
        warn_skipped(skipped, tool, say=first_task, fresh=True)
        self.summary.files_skipped = len(skipped) if first_task else 0
        self.summary.files_in = len(self.paths) if first_task or self.record_shard is None \
            else 0
        self.output: Sink | None = None
        self.rejects: Sink | None = None
        self._stats: Sink | None = None
        self._sinks: list[Sink] = []  # every output, committed together
        self._made_dirs: list[str] = []  # missing output folders this run created
        self._progress = None
        self._write_doc = None

    # -- context -------------------------------------------------------------

    def __enter__(self) -> "StreamRun":
        try:
            self._made_dirs = make_parents(self._output_paths())  # mkdir -p, checked already
            if is_parquet_name(self.opts.output):  # columnar output: records, not lines
                if self.opts.compress:
                    raise ConfigError("compress", "a .parquet output is always zstd-compressed")
                from llmtk.io.parquet import ParquetSink

                self.output = ParquetSink(self.opts.output, self.opts.text_field)
                self._sinks.append(self.output)  # committed with the others
                self._write_doc = self.output.write_doc
            else:
                self.output = self._open(self.opts.output, normalise_kind(self.opts.compress))
            if is_parquet_name(self.opts.rejects):
                raise ConfigError("rejects", "write JSONL (rejected records carry varying "
                                  "fields that one Parquet schema cannot hold)")
            if self.opts.rejects:
                self.rejects = self._open(self.opts.rejects)
            if self.opts.stats:
                self._stats = self._open(self.opts.stats, "plain")
        except BaseException:
            self._abort()
            raise
        if not self.opts.quiet and stderr_is_terminal():
            from llmtk.io.progress import Progress

            self._progress = Progress(self.tool, self.summary,
                                      reads_pipe=self.paths == ["-"] and _stdin_is_pipe(),
                                      total_bytes=_bytes_on_disk(self.paths))
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._progress is not None:
            self._progress.stop()
        if exc_type is not None:
            self._abort()
            return
        try:
            for sink in self._sinks:  # phase 1: everything written and on disk
                if sink is not self._stats:
                    sink.finish()
            self.summary.bytes_out = self.output.bytes_written if self.output else 0
            self.summary.finish()
            self._say_if_empty()
            if self._stats is not None:
                self._stats.write(json_bytes(self.summary.as_dict()))
                self._stats.finish()
            for sink in self._sinks:  # phase 2: renamed into place
                sink.publish()
        except BaseException:
            self._abort()
            raise
        if self._marker is not None:  # after every output is in place
            marker.mark_done(self.opts.output, self._marker, self._output_paths(),  # type: ignore[arg-type]
                             self.summary.as_dict())
        if not self.opts.quiet:
            self.summary.print()

    def _say_if_empty(self) -> None:
        """An input without a single record says so (exit status 0 all the same): an
        empty file is often an upstream stage that died or a glob that matched the wrong
        files. Judged on the whole input read through docs() (file_starts ends with its
        number of records, every shard's), so a record shard that kept none is not
        empty; a task of a job array with no files of its own has nothing to say, nor has
        a command that read its inputs another way (mix --count-only) or not to the end."""
        starts = self.file_starts
        if not self.paths or len(starts) != len(self.paths) + 1 or starts[-1] != 0:
            return
        names = ", ".join("<stdin>" if p == "-" else p for p in self.paths[:3])
        more = f" and {len(self.paths) - 3} more files" if len(self.paths) > 3 else ""
        import sys

        sys.stderr.write(f"llmtk {self.tool}: warning: no records in {names}{more}\n")
        sys.stderr.flush()

    def _open(self, path: str | None, compress: str | None = None) -> Sink:
        sink = Sink(path, compress)
        self._sinks.append(sink)
        return sink

    def _abort(self) -> None:
        for sink in self._sinks:
            sink.abort()
        remove_made(self._made_dirs)

    def open_output(self, path: str, compress: str | None = None) -> Sink:
        """Another output of this run (named in outputs_also), committed with the others."""
        if not any(path == p for _, p in self._outputs):
            raise ValueError(f"{path}: not declared in outputs_also")
        return self._open(path, compress)

    def write_json(self, path: str, obj) -> None:
        """A report written with this run's outputs (indented JSON, sorted keys)."""
        self.open_output(path, "plain").write(json_bytes(obj))

    def _output_paths(self) -> list[str]:
        """Every file this task writes (what its completion marker vouches for)."""
        return [p for _, p in self._outputs if p not in (None, "-")]

    # -- reading -------------------------------------------------------------

    def docs(self) -> Iterator[Doc]:
        """Every good record of this shard; bad ones are handled per --on-error."""
        on_bad = None if self.opts.on_error == "fail" else self.bad_record
        on_bytes = self._progress.update if self._progress is not None else None
        self.file_starts.clear()
        return read_docs(self.paths, self.opts.text_field, on_bad, self.record_shard,
                         self.require_text, on_bytes, self.summary,
                         max_record=self.opts.max_record_bytes, file_starts=self.file_starts)

    def doc_keys(self, indexes):
        """(D,) indexes of docs read by `docs()` -> (D,) uint64 identities (llmtk.io.shard):
        file ordinal in the sorted input list << 40 | record ordinal in the file."""
        import numpy as np

        starts = np.asarray(self.file_starts, dtype=np.int64)
        idx = np.asarray(indexes, dtype=np.int64)
        j = np.searchsorted(starts, idx, side="right") - 1
        ordinals = np.asarray(self.file_ordinals, dtype=np.uint64)[j]
        return (ordinals << np.uint64(RECORD_BITS)) | (idx - starts[j]).astype(np.uint64)

    def bad_record(self, bad: BadRecord) -> None:
        """Count a bad input line (and write it to --rejects with --on-error reject)."""
        self.summary.records_in += 1
        self.summary.errors[bad.reason] += 1
        if self.opts.on_error == "reject" and self.rejects is not None:
            self.rejects.write(orjson.dumps(bad.to_reject(), option=DUMP_OPTS))

    # -- writing -------------------------------------------------------------

    def write(self, doc: Doc) -> None:
        raw = doc.raw
        if self._write_doc is not None:  # a columnar output takes the record itself
            self._write_doc(doc)
        elif raw is None:
            self.output.write(doc.to_bytes())  # type: ignore[union-attr]
        elif len(raw) < BUFFER:
            self.output.write(raw + b"\n")  # type: ignore[union-attr]
        else:  # a huge record: no extra copy of it
            self.output.write(raw)  # type: ignore[union-attr]
            self.output.write(b"\n")  # type: ignore[union-attr]
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
        return stat.S_ISFIFO(os.fstat(0).st_mode)
    except OSError:
        return False


def _check_stdin(tool: str, alone: bool) -> None:
    """Stdin must be open (`<&-` closes it) and, as the only input, not a terminal."""
    try:
        os.fstat(0)
    except OSError:
        raise UsageError("stdin is closed: give input files, or pipe records in") from None
    if alone and os.isatty(0):
        raise UsageError(
            f"no input: give files, or pipe records in "
            f"(e.g. zstdcat data.jsonl.zst | llmtk {tool})"
        )


def _bytes_on_disk(paths: list[str]) -> int | None:
    """The inputs' total size on disk, for progress; None if one is not a regular file."""
    sizes = [regular_size(p) for p in paths]
    return None if None in sizes else sum(sizes)  # type: ignore[arg-type]
