"""Running a mix: count every source, plan, then stream the chosen documents interleaved."""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from llmtk.io import Doc, StreamRun, expand_inputs, in_shard, read_docs
from llmtk.io.reader import BadRecord
from llmtk.mix.plan import Source

COUNT_BATCH = 1024


def count_tokens(run: StreamRun, source: Source, tokenizer) -> None:
    """First pass: the token count of every document (bad lines per --on-error)."""
    from llmtk.text.tokenizer import encode_batch

    source.paths = expand_inputs([source.spec])
    shard = run.opts.shard
    counts = source.doc_tokens

    def on_bad(bad: BadRecord) -> None:
        _pad(counts, bad.index)
        if shard is None or in_shard(None, bad.index, shard):
            run.bad_record(bad)

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
            if shard is None or in_shard(doc.id, doc.index, shard):
                run.summary.records_in += 1
        batch.clear()

    def on_bytes(n: int) -> None:
        run.summary.bytes_in += n

    on_bad_arg = None if run.opts.on_error == "fail" else on_bad
    for doc in read_docs(source.paths, run.opts.text_field, on_bad_arg, None, True, on_bytes):
        batch.append(doc)
        if len(batch) >= COUNT_BATCH:
            flush()
    flush()


def _pad(counts, index: int) -> None:
    if len(counts) <= index:
        counts.extend([0] * (index + 1 - len(counts)))


def _emission(run: StreamRun, source: Source) -> Iterator[tuple[Doc, int]]:
    """(doc, epoch) in the order this source contributes them, over all its passes."""
    shard = run.opts.shard
    for epoch in range(source.passes()):
        partial = epoch == source.full_epochs  # the last pass, over the subset only
        for doc in read_docs(source.paths, run.opts.text_field, _ignore, None, True, None, None):
            if shard is not None and not in_shard(doc.id, doc.index, shard):
                continue
            if partial and not source.subset[doc.index]:
                if source.full_epochs == 0:
                    run.drop(doc, "mix.not_sampled", source=source.name)
                continue
            yield doc, epoch


def _ignore(bad: BadRecord) -> None:
    """Bad lines were already handled (and counted) by the counting pass."""


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
        doc, epoch = item
        if annotate:
            doc.annotate(source=name, epoch=epoch)
        run.write(doc)
        if epoch > 0:
            run.count("mix.repeated")
        tally = tallies[name]
        tally["emitted_docs"] += 1
        tally["emitted_tokens"] += counts[name][doc.index]
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
