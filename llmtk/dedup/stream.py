"""Document-level dedup of a stream: signatures (in --workers processes), decisions here.

The signature pass is pure per-document work, so `ordered_map` spreads it over
worker processes; the query-then-insert decisions need the order of the whole
stream and stay in this process, so the output is the same for any --workers.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from llmtk.dedup.config import DedupConfig
from llmtk.dedup.index import EXACT, MINHASH, DedupIndex
from llmtk.dedup.minhash import Batch, MinHasher
from llmtk.io import Doc, Sink, StreamRun, ordered_map
from llmtk.io.record import DUMP_OPTS

BATCH = 512  # documents per signature batch (and per --workers task)

_HASHERS: dict[DedupConfig, MinHasher] = {}


def hasher_for(config: DedupConfig) -> MinHasher:
    """One MinHasher per process and config (workers build theirs on first use)."""
    if config not in _HASHERS:
        _HASHERS[config] = MinHasher(config)
    return _HASHERS[config]


class SignatureTask:
    """Picklable `fn(texts) -> [Batch]` for ordered_map."""

    def __init__(self, config: DedupConfig) -> None:
        self.config = config

    def __call__(self, texts: list[str]) -> list[Batch]:
        return [hasher_for(self.config).batch(texts)]


def signature_batches(
    docs: Iterable[Doc], config: DedupConfig, workers: int, batch: int = BATCH
) -> Iterator[tuple[list[Doc], Batch]]:
    """(docs, their Batch) in input order; only texts travel to the workers."""
    pending: deque[Doc] = deque()

    def texts() -> Iterator[str]:
        for doc in docs:
            pending.append(doc)
            yield doc.text

    for result in ordered_map(SignatureTask(config), texts(), workers, batch):
        yield [pending.popleft() for _ in range(len(result))], result


@dataclass
class DedupOptions:
    config: DedupConfig
    keep: str = "first"  # first | longest
    annotate: bool = False
    clusters: str | None = None
    index: str | None = None  # load this saved index first
    save_index: str | None = None
    workers: int = 1


class ClusterLog:
    """--clusters FILE: one line per member of a cluster with duplicates.

    {"id": member, "cluster": kept, "reason": ...}; the kept document's own
    line ({"id": kept, "cluster": kept}) comes right before its first duplicate.
    The file is one of the run's outputs: committed with them on success and
    removed on error.
    """

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.heads: set[int] = set()

    def __enter__(self) -> ClusterLog:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        pass  # the run commits or aborts its outputs

    def head(self, head_number: int, head: Any) -> None:
        """The kept document's own line (once per cluster)."""
        if head_number not in self.heads:
            self.heads.add(head_number)
            self.sink.write(orjson.dumps({"id": head, "cluster": head}, option=DUMP_OPTS))

    def add(self, member: Any, head_number: int, head: Any, reason: str) -> None:
        self.head(head_number, head)
        self.sink.write(
            orjson.dumps({"id": member, "cluster": head, "reason": reason}, option=DUMP_OPTS)
        )


def cluster_log(run: StreamRun, path: str | None) -> ClusterLog | contextlib.nullcontext:
    """`with cluster_log(run, path) as log:` gives a ClusterLog, or None without --clusters."""
    return ClusterLog(run.open_output(path)) if path else contextlib.nullcontext()


def settle_duplicate(run: StreamRun, doc: Doc, reason: str, head: Any, annotate: bool,
                     log: ClusterLog | None, member: Any, head_number: int) -> None:
    """A duplicate of `head`: into --clusters, then dropped (or marked with --annotate)."""
    if log is not None:
        log.add(member, head_number, head, reason)
    if annotate:
        doc.annotate(dup_of=head, dup_reason=reason)
        run.write(doc)
        run.count(f"annotated {reason}")
    else:
        run.drop(doc, reason, dup_of=head)


def dedup_stream(run: StreamRun, opts: DedupOptions) -> DedupIndex:
    """Write each document that is the first of its cluster; drop (or mark) the rest."""
    import numpy as np

    index = DedupIndex.load(opts.index, opts.config) if opts.index else DedupIndex(opts.config)
    if opts.keep == "longest":
        return _keep_longest(run, opts, index)
    with cluster_log(run, opts.clusters) as log:
        for docs, batch in signature_batches(run.docs(), opts.config, opts.workers):
            positions = np.fromiter((d.index for d in docs), dtype=np.int64, count=len(docs))
            dec = index.add(batch, positions, [d.id for d in docs])
            for doc, number, root, exact in zip(docs, dec.numbers.tolist(), dec.roots.tolist(),
                                                dec.exact.tolist(), strict=True):
                if root == number:
                    run.write(doc)
                else:
                    settle_duplicate(run, doc, EXACT if exact else MINHASH, index.ref(root),
                                     opts.annotate, log, _ref(doc, number), root)
    if opts.save_index:
        index.save(opts.save_index)
    return index


def _ref(doc: Doc, number: int) -> Any:
    """A document's name in dup_of / --clusters: its id, or its number when it has none."""
    doc_id = doc.id
    return number if doc_id is None else doc_id


def _keep_longest(run: StreamRun, opts: DedupOptions, index: DedupIndex) -> DedupIndex:
    """Two passes: find the clusters, then keep each cluster's longest text (ties: first).

    Not streaming: pass 1 spools the records to a temporary file, and nothing is
    written until the whole input has been read. A cluster that reaches back into
    a loaded --index keeps its old (already published) document.
    """
    import numpy as np

    numbers, roots, exact_keys, exact_flags, lengths, refs = [], [], [], [], [], []
    with tempfile.TemporaryFile() as spool:
        for docs, batch in signature_batches(run.docs(), opts.config, opts.workers):
            positions = np.fromiter((d.index for d in docs), dtype=np.int64, count=len(docs))
            dec = index.add(batch, positions)
            numbers.append(dec.numbers)
            roots.append(dec.roots)
            exact_keys.append(batch.exact)
            exact_flags.append(dec.exact)
            lengths.append(np.fromiter((len(d.text) for d in docs), np.int64, len(docs)))
            for doc, number in zip(docs, dec.numbers.tolist(), strict=True):
                refs.append(_ref(doc, number))
                spool.write(doc.to_bytes())
        if not numbers:
            return index
        num, root = np.concatenate(numbers), np.concatenate(roots)
        key, length = np.concatenate(exact_keys), np.concatenate(lengths)
        n = len(num)
        # Per cluster (same root), the longest document, earliest among equals.
        order = np.lexsort((num, -length, root))  # by root, then longest, then first
        first_of_group = np.r_[True, root[order][1:] != root[order][:-1]]
        best = order[first_of_group]  # row of each cluster's keeper
        group = np.cumsum(first_of_group) - 1
        keeper_row = np.empty(n, dtype=np.int64)
        keeper_row[order] = best[group]
        old = root < index.offset  # the cluster started in the loaded index: keep that one
        keeper = np.where(old, root, num[keeper_row])
        # Later runs against --save-index must point at the keepers.
        index._roots[num] = keeper
        for row in np.flatnonzero(~old & (keeper_row == np.arange(n))).tolist():
            index.ids[int(num[row])] = refs[row]
        exact_dup = np.where(old, np.concatenate(exact_flags), key == key[keeper_row])
        spool.seek(0)
        with cluster_log(run, opts.clusters) as log:
            for row, line in enumerate(spool):
                raw = line.rstrip(b"\n")
                doc = Doc(orjson.loads(raw), raw, "<spool>", row + 1, int(num[row]),
                          run.opts.text_field)
                k = int(keeper[row])
                if k == int(num[row]):
                    run.write(doc)
                else:
                    settle_duplicate(run, doc, EXACT if exact_dup[row] else MINHASH,
                                     index.ref(k), opts.annotate, log, refs[row], k)
    if opts.save_index:
        index.save(opts.save_index)
    return index
