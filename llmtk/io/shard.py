"""`--shard K/N`: which part of the input a task handles.

File inputs (files, directories, globs): whole files. The sorted file list is
cut into N contiguous runs balanced by size: file i, whose bytes span
[s_i, e_i) of the list's S bytes (each file counted as size + 1, so empty
files have a place too), goes to task floor(N * (s_i + e_i) / 2 / S). A task
opens only its own files, and concatenating the tasks' outputs in K order
gives the single run's output, byte for byte. `assign_files` is the rule.

Stdin: records by hash. A record belongs to shard `xxh64(key) % N`, where key
is `id:<id>` when the record has a string or integer `id`, and `pos:<index>`
(its 0-based position in the whole input) otherwise. xxh64 with seed 0 is
stable across machines, Python versions and runs (never Python's salted
`hash()`), so the N shards of a job array partition the input exactly.

A document's identity across tasks is (file ordinal in the sorted input list,
record ordinal in its file); its lexicographic order is the single run's input
order. `doc_key` packs it into one uint64 for the dedup stages.
"""

import os
from typing import Any

import xxhash

RECORD_BITS = 40  # doc_key: file ordinal in the high 24 bits, record ordinal in the low 40
RECORD_MASK = (1 << RECORD_BITS) - 1  # a doc_key's record ordinal


def shard_key(record_id: Any, index: int) -> bytes:
    if isinstance(record_id, str | int) and not isinstance(record_id, bool):
        return f"id:{record_id}".encode()
    return f"pos:{index}".encode()


def shard_of(record_id: Any, index: int, n: int) -> int:
    return xxhash.xxh64_intdigest(shard_key(record_id, index)) % n


def in_shard(record_id: Any, index: int, shard: tuple[int, int]) -> bool:
    k, n = shard
    return shard_of(record_id, index, n) == k


def file_tasks(sizes: list[int], n: int) -> list[int]:
    """The task of each file (sizes in list order): contiguous runs balanced by size."""
    weights = [s + 1 for s in sizes]
    total = sum(weights)
    tasks, start = [], 0
    for w in weights:
        # Integer arithmetic: the same answer on every machine.
        tasks.append(min(n - 1, (n * (2 * start + w)) // (2 * total)))
        start += w
    return tasks


def assign_files(paths: list[str], shard: tuple[int, int]) -> list[int]:
    """Ordinals (positions in `paths`) of the files that task K of N owns."""
    k, n = shard
    sizes = [os.stat(p).st_size for p in paths]
    return [i for i, t in enumerate(file_tasks(sizes, n)) if t == k]


def doc_key(file_ordinal: int, record: int) -> int:
    return (file_ordinal << RECORD_BITS) | record
