"""Running a mix: count every source's tokens (a separable first pass), plan, then stream
the chosen documents interleaved.

Counting is per input file: the token count of every record (0 for a bad line),
saved under `--counts DIR` keyed by the file's path, size, mtime, the tokenizer
and the text field, and reused by every later run and every shard. With
`--shard K/N` a task emits only its own files of each source (the whole-file
rule of llmtk.io.shard), so the tasks' outputs together are the single run's
documents; `--count-only --shard K/N` counts only a task's own files.
"""

from __future__ import annotations

import heapq
import os
from array import array
from collections.abc import Iterator

import xxhash

from llmtk.io import Doc, StreamRun, expand_inputs, read_docs, write_file_atomically
from llmtk.io.reader import BadRecord
from llmtk.io.shard import assign_files
from llmtk.mix.plan import Source

COUNT_BATCH = 1024


def own_files(source: Source, shard: tuple[int, int] | None) -> list[int]:
    return assign_files(source.paths, shard) if shard else list(range(len(source.paths)))


def count_tokens(run: StreamRun, source: Source, tokenizer, counts_dir: str | None,
                 only_shard: tuple[int, int] | None = None) -> None:
    """The token count of every document of the source (of that task's files, if given).

    Counts saved in counts_dir are reused; the others are computed (and saved there).
    Bad lines stop the run under --on-error fail; otherwise they count 0 tokens
    (and are counted as bad lines by the emitting pass).
    """
    source.paths = expand_inputs([source.spec])
    only = set(own_files(source, only_shard)) if only_shard else None
    per_file: list[array] = []
    for i, path in enumerate(source.paths):
        if only is not None and i not in only:
            per_file.append(array("I"))
            continue
        cache = _cache_path(counts_dir, path, tokenizer, run.opts.text_field)
        counts = _load(cache) if cache else None
        if counts is None:
            counts = _count_file(run, path, tokenizer)
            if cache:
                _save(cache, counts)
        per_file.append(counts)
    source.file_offsets = [0]
    for counts in per_file:
        source.doc_tokens.extend(counts)
        source.file_offsets.append(len(source.doc_tokens))


def _count_file(run: StreamRun, path: str, tokenizer) -> array:
    from llmtk.text.tokenizer import encode_batch

    counts = array("I")
    batch: list[Doc] = []

    def flush() -> None:
        if not batch:
            return
        if tokenizer.name == "bytes":
            sizes = [len(d.text.encode("utf-8", "surrogatepass")) for d in batch]
        else:
            sizes = [len(ids) for ids in encode_batch(tokenizer, [d.text for d in batch])]
        for doc, size in zip(batch, sizes, strict=True):
            _pad(counts, doc.index)
            counts[doc.index] = size + 1  # + end-of-document token
        batch.clear()

    def on_bad(bad: BadRecord) -> None:
        _pad(counts, bad.index)

    on_bad_arg = None if run.opts.on_error == "fail" else on_bad
    starts: list[int] = []
    for doc in read_docs([path], run.opts.text_field, on_bad_arg, None, True, None, None,
                         max_record=run.opts.max_record_bytes, file_starts=starts):
        batch.append(doc)
        if len(batch) >= COUNT_BATCH:
            flush()
    flush()
    _pad(counts, starts[-1] - 1)  # trailing bad lines
    return counts


def _cache_path(directory: str | None, path: str, tokenizer, text_field: str) -> str | None:
    if directory is None:
        return None
    st = os.stat(path)
    key = "\0".join([os.path.abspath(path), str(st.st_size), str(st.st_mtime_ns),
                     tokenizer.fingerprint(), text_field])
    return os.path.join(directory, f"{xxhash.xxh64_hexdigest(key.encode())}.u32")


def _load(path: str) -> array | None:
    counts = array("I")
    try:
        with open(path, "rb") as f:
            counts.frombytes(f.read())
    except FileNotFoundError:
        return None
    return counts


def _save(path: str, counts: array) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_file_atomically(path, counts.tobytes())


def _pad(counts, index: int) -> None:
    if len(counts) <= index:
        counts.extend([0] * (index + 1 - len(counts)))


def _emission(run: StreamRun, source: Source) -> Iterator[tuple[Doc, int, int]]:
    """(doc, epoch, its number in the source) in the order this source contributes them.

    The first pass also does the accounting of this task's files: records and
    bytes in, and bad lines per --on-error.
    """
    files = own_files(source, run.opts.shard)
    for epoch in range(source.passes()):
        partial = epoch == source.full_epochs  # the last pass, over the subset only
        for f in files:
            offset = source.file_offsets[f]
            on_bad = _ignore if epoch else (None if run.opts.on_error == "fail"
                                             else run.bad_record)
            summary = run.summary if epoch == 0 else None
            for doc in read_docs([source.paths[f]], run.opts.text_field, on_bad, None, True,
                                 None, summary, max_record=run.opts.max_record_bytes):
                number = offset + doc.index
                if partial and not source.subset[number]:
                    if source.full_epochs == 0:
                        run.drop(doc, "mix.not_sampled", source=source.name)
                    continue
                yield doc, epoch, number


def _ignore(bad: BadRecord) -> None:
    """Bad lines were handled (and counted) by the first pass."""


def emit(run: StreamRun, sources: list[Source], annotate: bool) -> dict[str, dict]:
    """Interleave the sources so each stays near its share; returns per-source tallies."""
    tallies = {s.name: {"emitted_docs": 0, "emitted_tokens": 0} for s in sources}
    streams = {s.name: _emission(run, s) for s in sources}
    targets = {s.name: s.target for s in sources}
    counts = {s.name: s.doc_tokens for s in sources}
    order = {s.name: i for i, s in enumerate(sources)}
    # heap of (share of own target emitted so far, source order) -> next source to draw from
    heap = [(0.0, order[s.name], s.name) for s in sources]
    heapq.heapify(heap)
    while heap:
        _, rank, name = heapq.heappop(heap)
        item = next(streams[name], None)
        if item is None:
            continue
        doc, epoch, number = item
        if annotate:
            doc.annotate(source=name, epoch=epoch)
        run.write(doc)
        if epoch > 0:
            run.count("mix.repeated")
        tally = tallies[name]
        tally["emitted_docs"] += 1
        tally["emitted_tokens"] += counts[name][number]
        heapq.heappush(heap, (tally["emitted_tokens"] / targets[name], rank, name))
    return tallies


def report(sources: list[Source], tallies: dict[str, dict], budget: float, tokenizer) -> dict:
    emitted = sum(t["emitted_tokens"] for t in tallies.values()) or 1
    total_weight = sum(s.weight for s in sources)
    rows = {}
    for s in sources:
        t = tallies[s.name]
        rows[s.name] = {
            "paths": s.paths, "weight": s.weight, "share": s.weight / total_weight,
            "docs": s.docs, "tokens": s.tokens, "target_tokens": round(s.target),
            "epochs": round(s.epochs, 4), **t,
            "achieved_share": round(t["emitted_tokens"] / emitted, 6),
        }
    return {"budget_tokens": round(budget), "emitted_tokens": emitted,
            "tokenizer": tokenizer.fingerprint(), "sources": rows}
