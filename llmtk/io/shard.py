"""`--shard K/N`: which records a process handles.

A record belongs to shard `xxh64(key) % N`, where key is `id:<id>` when the
record has a string or integer `id`, and `pos:<index>` (its 0-based position
in the whole input) otherwise. xxh64 with seed 0 is stable across machines,
Python versions and runs (never Python's salted `hash()`), so the N shards of a
job array partition the input exactly.
"""

from typing import Any

import xxhash


def shard_key(record_id: Any, index: int) -> bytes:
    if isinstance(record_id, str | int) and not isinstance(record_id, bool):
        return f"id:{record_id}".encode()
    return f"pos:{index}".encode()


def shard_of(record_id: Any, index: int, n: int) -> int:
    return xxhash.xxh64_intdigest(shard_key(record_id, index)) % n


def in_shard(record_id: Any, index: int, shard: tuple[int, int]) -> bool:
    k, n = shard
    return shard_of(record_id, index, n) == k
