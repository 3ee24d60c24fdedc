"""History rows from a W&B run file (`run-ID.wandb`, what `wandb offline` leaves behind).

The file is W&B's "datastore": a 7-byte header (`:W&B`, magic 0xBEE1, version 0) and
then LevelDB's log format — 32 KiB blocks of records with a 7-byte header (CRC-32C,
length, type FULL/FIRST/MIDDLE/LAST), a record split across blocks when it does not
fit. Each record is a `wandb_internal.proto` `Record` message; the history ones
(field 2) hold `HistoryItem`s: a key (or nested keys) and a value as a double, an
integer, or JSON. We decode just those fields with a few lines of protobuf wire
format, so reading a run needs neither the `wandb` package nor its Go core.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterator

from llmtk.errors import DataError

HEADER = b":W&B\xe1\xbe"  # ident + magic 0xBEE1 (little-endian); then one version byte
BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def _records(data: bytes, path: str) -> Iterator[bytes]:
    """The payloads of the LevelDB log records, joined across blocks."""
    if not data.startswith(HEADER) or len(data) < 7 or data[6] != 0:
        raise DataError(f"{path}: not a W&B run file (version 0)")
    pos, parts = 7, []
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # the block's tail is padding
            pos += left
            continue
        length, kind = struct.unpack_from("<HB", data, pos + 4)
        if kind == 0 and length == 0:  # zero padding (a preallocated or torn tail)
            pos += left
            continue
        payload = data[pos + 7:pos + 7 + length]
        if len(payload) < length or kind not in (FULL, FIRST, MIDDLE, LAST):
            break  # a torn last record: the run is still writing, or crashed
        pos += 7 + length
        if kind == FULL:
            yield payload
        elif kind == FIRST:
            parts = [payload]
        elif kind == MIDDLE:
            parts.append(payload)
        else:
            yield b"".join(parts + [payload])
            parts = []


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int, object]]:
    """(field number, wire type, value) of a protobuf message: ints, or bytes for
    length-delimited fields and fixed64/fixed32 raw bytes."""
    pos = 0
    while pos < len(buf):
        tag, pos = _varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = _varint(buf, pos)
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"protobuf wire type {wire}")
        yield number, wire, value


def _item(buf: bytes) -> tuple[str, object]:
    key, nested, value = "", [], None
    for number, _, v in _fields(buf):
        if number == 1:
            key = v.decode()
        elif number == 2:
            nested.append(v.decode())
        elif number == 4:
            value = bool(v)
        elif number == 5:  # sint64, zigzag
            value = (v >> 1) ^ -(v & 1)
        elif number == 6:
            value = struct.unpack("<d", v)[0]
        elif number in (7, 8):
            value = v.decode()
        elif number == 16:
            value = _json_value(v.decode())
    return key or "/".join(nested), value


def _json_value(text: str):
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity"):
        return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[value]
    return value


def history_rows(path: str, data: bytes) -> list[dict]:
    """One row per history record: {key: value}, with `_step` from the record's step."""
    rows = []
    try:
        for record in _records(data, path):
            for number, _, value in _fields(record):
                if number != 2:  # Record.history
                    continue
                row: dict = {}
                for n, _, v in _fields(value):
                    if n == 1:
                        key, item = _item(v)
                        row[key] = item
                    elif n == 2:
                        row.setdefault("_step", next((s for k, _, s in _fields(v) if k == 1), 0))
                rows.append(row)
    except (ValueError, IndexError, UnicodeDecodeError, struct.error) as e:
        raise DataError(f"{path}: a damaged W&B run file ({e})") from None
    return rows
