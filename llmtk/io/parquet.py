"""Columnar files in and out: Parquet, and Hugging Face `datasets` folders (Arrow IPC).

Reading. A file is columnar by its content, never its name: Parquet starts with
`PAR1`; an Arrow IPC stream (what `datasets.Dataset.save_to_disk` writes as
`data-00000-of-00001.arrow`) starts with the continuation marker `ff ff ff ff`; an
Arrow IPC file starts with `ARROW1`. None of these can start a UTF-8 JSON line.
Parquet is read one record batch at a time (`iter_batches` over row groups), Arrow
IPC through a memory map, so memory stays bounded by a row group, never a file.
Every column becomes a record field (the text column is `--text-field`); a row
whose text is missing or null is a bad record exactly as in JSONL
(`io.missing_text` / `io.text_not_string`), with `FILE:ROW` (1-based) as its place.

Writing (`-o out.parquet`). Records are buffered into row groups of at most
ROW_GROUP_ROWS rows or ROW_GROUP_BYTES of record text, zstd-compressed. The schema is
inferred from the first row group and then fixed; later records must fit it: a field
that is missing is null, an integer in a float column becomes a float, and anything
else (a new field, a string where the schema has a number, a nested object with other
keys) is an error naming the record, never a silent cast. The file is written to
`FILE.tmp-PID` and renamed into place by `commit()`.

pyarrow is imported only here, and only when a columnar file is read or written.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator

import orjson

from llmtk.errors import DataError, LlmtkError, UsageError

PARQUET_MAGIC = b"PAR1"
ARROW_STREAM_MAGIC = b"\xff\xff\xff\xff"
ARROW_FILE_MAGIC = b"ARROW1"
ROW_GROUP_ROWS = 16384
ROW_GROUP_BYTES = 64 << 20
BATCH_ROWS = 4096  # rows per record batch read (a row group is read a batch at a time)


def columnar_kind(head: bytes) -> str | None:
    """'parquet', 'arrow-stream' or 'arrow-file' from a regular file's first bytes (see
    compression.peek: Parquet needs seeking anyway, so only regular files can be one)."""
    if head.startswith(PARQUET_MAGIC):
        return "parquet"
    if head.startswith(ARROW_STREAM_MAGIC):
        return "arrow-stream"
    if head.startswith(ARROW_FILE_MAGIC):
        return "arrow-file"
    return None


def is_parquet_name(path: str | None) -> bool:
    return bool(path) and path != "-" and path.endswith(".parquet")


# ------------------------------------------------------------------ HF datasets folders


def hf_dataset_files(folder: str) -> list[str] | None:
    """The Arrow files of a `save_to_disk` folder in their order, or None if it is not one.

    A Dataset folder has state.json naming its `_data_files`; a DatasetDict folder has
    dataset_dict.json naming its splits, each a Dataset folder: the split is chosen by
    naming its folder, so train and test never mix by accident.
    """
    state = os.path.join(folder, "state.json")
    if os.path.isfile(os.path.join(folder, "dataset_dict.json")):
        try:
            with open(os.path.join(folder, "dataset_dict.json")) as f:
                splits = json.load(f).get("splits", [])
        except (OSError, ValueError):
            splits = []
        raise UsageError(f"{folder}: a Hugging Face DatasetDict; name one split's folder "
                         f"({', '.join(os.path.join(folder, s) for s in splits) or 'e.g. train'})")
    if not os.path.isfile(state):
        return None
    try:
        with open(state) as f:
            files = [d["filename"] for d in json.load(f)["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(f"{state}: not a datasets state file ({e})") from None
    paths = [os.path.join(folder, name) for name in files]
    for p in paths:
        if not os.path.isfile(p):
            raise DataError(f"{state}: names {p}, which does not exist")
    return paths


# ------------------------------------------------------------------ reading


def _batches(path: str, kind: str):
    """Record batches of a columnar file, a bounded amount at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if kind == "parquet":
        f = pq.ParquetFile(path, memory_map=True)
        yield from f.iter_batches(batch_size=BATCH_ROWS)
        return
    source = pa.memory_map(path, "r")
    reader = pa.ipc.open_stream(source) if kind == "arrow-stream" else pa.ipc.open_file(source)
    if kind == "arrow-stream":
        yield from reader
    else:
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)


def columnar_records(path: str, kind: str) -> Iterator:
    """The rows of one columnar file as record events (llmtk.io.record: Parsed, Invalid,
    ints for bytes read) for the reader's accounting loop. A file that cannot be read from
    some row on is one bad record (`io.corrupt`) after the rows read before it."""
    import pyarrow as pa

    from llmtk.io.record import Invalid, Parsed

    row = 0
    what = "Parquet" if kind == "parquet" else "Arrow IPC"
    try:
        for batch in _batches(path, kind):
            yield batch.nbytes
            for data in batch.to_pylist():
                row += 1
                yield Parsed(data, row)
    except (pa.ArrowException, OSError) as e:
        yield Invalid(row + 1, "io.corrupt", f"not a readable {what} file ({e}); the rest of "
                      "this file is unreadable")


# ------------------------------------------------------------------ writing


class ParquetSink:
    """`-o FILE.parquet`: records in row groups, schema from the first group, atomic."""

    to_stdout = False

    def __init__(self, path: str, text_field: str = "text") -> None:
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            raise UsageError(f"{path}: directory {directory} does not exist")
        if os.path.exists(path) and not stat.S_ISREG(os.stat(path).st_mode):
            raise UsageError(f"{path}: a .parquet output must be a regular file")
        from llmtk.io.atomic import Staged

        self.path = path
        self.text_field = text_field
        # the same exclusive temporary file (no planted links, a symlink's target replaced)
        # as every other output
        self._staged = Staged(path)
        self._file = os.fdopen(self._staged.fd, "wb", closefd=False)
        self._writer = None
        self._schema = None
        self._rows: list[dict] = []
        self._where: list[tuple[str, int]] = []
        self._bytes = 0
        self._written_rows = 0
        self.bytes_written = 0  # Arrow bytes of the rows written (uncompressed)
        self._closed = False
        self._finished = False  # finish() done, publish() not yet

    # -- records in --------------------------------------------------------

    def write_doc(self, doc) -> None:
        self._rows.append(doc.data)
        self._where.append((doc.source, doc.line))
        raw = doc.raw
        self._bytes += len(raw) if raw is not None else len(doc.data.get(self.text_field) or "")
        if len(self._rows) >= ROW_GROUP_ROWS or self._bytes >= ROW_GROUP_BYTES:
            self._flush()

    def write(self, data: bytes) -> None:
        """JSON lines (what a byte sink is handed), parsed back into records."""
        for line in data.splitlines():
            if line.strip():
                self._rows.append(orjson.loads(line))
                self._where.append(("<output>", self._written_rows + len(self._rows)))
                self._bytes += len(line)
        if len(self._rows) >= ROW_GROUP_ROWS or self._bytes >= ROW_GROUP_BYTES:
            self._flush()

    # -- row groups --------------------------------------------------------

    def _flush(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows, where = self._rows, self._where
        self._rows, self._where, self._bytes = [], [], 0
        if not rows:
            return
        try:
            # pa.array infers one struct over every row's keys (Table.from_pylist would
            # take the first row's keys and drop the others' silently).
            table = pa.Table.from_struct_array(pa.array(rows))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError,
                OverflowError):
            table = None
        if table is None:  # the records disagree among themselves
            raise self._misfit(rows, where, self._schema or _first_types(rows))
        if self._schema is None:
            self._schema = table.schema
            self._writer = pq.ParquetWriter(self._file, self._schema, compression="zstd")
        elif table.schema != self._schema:
            table = self._conform(table, rows, where)
        self._writer.write_table(table, row_group_size=len(rows))
        self._written_rows += len(rows)
        self.bytes_written += table.nbytes

    def _conform(self, table, rows, where):
        """Bring a batch to the file's schema where that loses nothing, else raise."""
        import pyarrow as pa

        schema = self._schema
        extra = [n for n in table.schema.names if n not in schema.names]
        if extra:
            i = next(i for i, r in enumerate(rows) if extra[0] in r)
            raise DataError(
                f"{_place(where[i])}: field {extra[0]!r} is not in the Parquet schema "
                f"(fixed by the first {self._written_rows} records: "
                f"{', '.join(schema.names)}); write JSONL, or make every record carry it")
        columns = []
        for field in schema:
            if field.name not in table.schema.names:
                columns.append(pa.nulls(len(rows), type=field.type))
                continue
            col = table.column(field.name)
            if col.type != field.type:
                if not _lossless(col.type, field.type):
                    raise self._misfit(rows, where, schema)
                col = col.cast(field.type)
            columns.append(col)
        return pa.Table.from_arrays(columns, schema=schema)

    def _misfit(self, rows, where, schema) -> DataError:
        """The error for the first record whose fields do not fit schema."""
        import pyarrow as pa

        for i, row in enumerate(rows):
            for name, value in row.items():
                if value is None:
                    continue
                if name not in schema.names:
                    return DataError(f"{_place(where[i])}: field {name!r} is not in the "
                                     f"Parquet schema ({', '.join(schema.names)})")
                expected = schema.field(name).type
                try:
                    got = pa.array([value]).type
                except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
                    got = None
                if got is None or not (got == expected or _lossless(got, expected)):
                    return DataError(
                        f"{_place(where[i])}: field {name!r} does not fit the Parquet "
                        f"schema: {type(value).__name__} {_short(value)} where the first "
                        f"records set {expected}; write JSONL, or make the field's type "
                        "the same in every record")
        return DataError(f"{_place(where[0])}: records do not fit one Parquet schema")

    # -- finishing ---------------------------------------------------------

    def finish(self) -> None:
        """Every row group written and the file on disk; not renamed yet (StreamRun
        commits all of a run's outputs together: finish them all, then publish)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self._closed:
            return
        self._flush()
        if self._writer is None:  # no records: a valid, empty file with the text column
            schema = pa.schema([(self.text_field, pa.string())])
            self._writer = pq.ParquetWriter(self._file, schema, compression="zstd")
            self._writer.write_table(schema.empty_table())
        self._closed = True
        try:
            self._writer.close()
            self._file.close()
        except OSError as e:
            self._staged.discard()
            raise LlmtkError(f"{self.path}: cannot finish writing: {e.strerror}") from None
        self._staged.finish()  # fsync; an error removes the temporary file
        self._finished = True

    def publish(self) -> None:
        """Rename the finished file into place."""
        if self._finished:
            self._finished = False
            self._staged.publish()

    def commit(self) -> None:
        self.finish()
        self.publish()

    def abort(self) -> None:
        if self._finished:  # finished, not yet published: drop it
            self._finished = False
            self._staged.discard()
            return
        if self._closed:
            return
        self._closed = True
        try:
            if self._writer is not None:
                self._writer.close()
        except Exception:  # an already broken writer: the file is removed anyway
            pass
        self._file.close()
        self._staged.discard()


def _lossless(got, expected) -> bool:
    """Casts that lose nothing: an all-null column, an integer column into a float one."""
    import pyarrow as pa

    if pa.types.is_null(got):
        return True
    return pa.types.is_integer(got) and pa.types.is_floating(expected)


def _first_types(rows: list[dict]):
    """A schema from each field's first non-null value (to name the record that differs)."""
    import pyarrow as pa

    fields: dict = {}
    for row in rows:
        for name, value in row.items():
            if name not in fields and value is not None:
                try:
                    fields[name] = pa.array([value]).type
                except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
                    continue
    return pa.schema(list(fields.items()))


def _place(where: tuple[str, int]) -> str:
    source, line = where
    return f"{'<stdin>' if source == '-' else source}:{line}"


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
