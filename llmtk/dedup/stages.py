"""Scale-out: the single-command dedup as four stages over a shared filesystem.

    llmtk dedup signatures IN --shard K/N -o W/sigs/       # N tasks, one per run of files
    llmtk dedup buckets W/sigs/ --shard K/M -o W/buckets/  # M tasks, any M
    llmtk dedup clusters W/buckets/ -o W/clusters/         # 1 task
    llmtk dedup filter IN --index W/clusters/ --shard K/N -o out/K.jsonl.zst

A document is named by its identity (llmtk.io.shard.doc_key): file ordinal in
the sorted input list << 40 | record ordinal in its file, whose order is the
single run's input order. No task holds anything proportional to the corpus:

1. signatures: MinHash as in the single command; per "band" (the LSH bands,
   then the exact-text key as one more) it writes (key, document) pairs sorted
   by key, one run per RUN_DOCS documents. Memory: one run.
2. buckets: the (band, key range) units, unit u to task u % M. A unit merges
   the runs of all signature tasks window by window (each window a sub-range of
   keys that holds about WINDOW pairs, read from every run by binary search on
   a memory map) and emits only duplicate edges: document -> first owner of the
   key (the smallest document that has it). With --verify an edge is kept only
   if the two signatures' low bytes agree enough. Memory: one window.
3. clusters: per document with edges, parent = its exact owner if any, else
   its earliest band owner; root = root(parent), by pointer jumping over
   these documents only. Those are the single command's parents and roots
   (llmtk.dedup.index). Writes, per signature task, the sorted list of its
   documents to remove, with dup_of (the root's id, or its position in the
   whole input) and whether it is its root's first duplicate (where the single
   run writes the root's --clusters line). Memory: the duplicate edges.
4. filter: a task streams its own files against its own remove list.

Every stage refuses other MinHash settings, other inputs, or an incomplete
set of parts; every task writes its outputs atomically, then a `.done` marker.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import orjson

from llmtk.dedup.config import DedupConfig
from llmtk.dedup.index import EXACT, MINHASH, check_same_config, read_meta
from llmtk.dedup.stream import ClusterLog, settle_duplicate, signature_batches
from llmtk.errors import AlreadyDone, ConfigError, DataError, UsageError
from llmtk.io import StreamRun, write_json_atomically
from llmtk.io.atomic import atomic_dir, atomic_file, write_file_atomically
from llmtk.io.shard import RECORD_BITS, RECORD_MASK

if TYPE_CHECKING:
    import numpy as np

SIG_KIND = "llmtk.dedup.signatures"
BUCKET_KIND = "llmtk.dedup.buckets"
CLUSTER_KIND = "llmtk.dedup.clusters"
VERSION = 2
RUN_DOCS = 1 << 20  # documents per sorted run of a signature task (16 B per key and band)
WINDOW = 1 << 22  # (key, document) pairs per merge window of a bucket unit (~100 MB)
VERIFY_EDGES = 1 << 19  # --verify: edges checked at a time (~150 MB of low bytes)


def _part(k: int, n: int) -> str:
    return f"part-{k:05d}-of-{n:05d}"


def _done(directory: str, name: str) -> str:
    return os.path.join(directory, name + ".done")


def _write_meta(directory: str, kind: str, option: str, **meta: Any) -> None:
    """meta.json of a stage folder: every task writes the same; a different one is refused."""
    meta = {"kind": kind, "version": VERSION, **meta}
    path = os.path.join(directory, "meta.json")
    if os.path.exists(path):
        saved = read_meta(directory, kind, option)
        if saved != orjson.loads(orjson.dumps(meta)):
            diff = sorted(k for k in meta if saved.get(k) != orjson.loads(orjson.dumps(meta[k])))
            raise UsageError(f"{option}: {directory} holds a run with other {', '.join(diff)} "
                             "(use a new folder, or the same inputs and settings)")
        return
    write_json_atomically(path, meta)


def _check_parts(directory: str, n: int, option: str) -> None:
    missing = [k for k in range(n) if not os.path.exists(_done(directory, _part(k, n)))]
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
        raise UsageError(f"{option}: {directory} lacks finished task(s) {shown} of {n}")


def _stage_inputs(run: StreamRun) -> None:
    if "-" in run.all_paths:
        raise UsageError("the dedup stages read their inputs twice (signatures, then filter): "
                         "give files, directories or globs, not stdin")


# -- 1. signatures --------------------------------------------------------------------------

def write_signatures(run: StreamRun, config: DedupConfig, out_dir: str, workers: int) -> None:
    """Task K of N: sorted (key, document) runs per band for its own files."""
    import numpy as np

    _stage_inputs(run)
    k, n = run.opts.shard or (0, 1)
    os.makedirs(out_dir, exist_ok=True)
    name = _part(k, n)
    if os.path.exists(_done(out_dir, name)) and os.path.isdir(os.path.join(out_dir, name)):
        raise AlreadyDone(f"{os.path.join(out_dir, name)} is done; skipping this task")
    _write_meta(out_dir, SIG_KIND, "-o", config=config.to_dict(), tasks=n, files=run.all_paths)
    final = os.path.join(out_dir, name)
    # replace: a task killed after its rename, before its marker, left its folder there
    with atomic_dir(final, os.path.join(out_dir, f".{name}.tmp-{os.getpid()}"),
                    replace=True) as tmp:
        writer = _RunWriter(tmp, config, RUN_DOCS)
        for docs, batch in signature_batches(run.docs(), config, workers):
            keys = run.doc_keys(np.fromiter((d.index for d in docs), np.int64, len(docs)))
            writer.add(keys, batch, [d.id for d in docs])
            run.summary.records_out += len(docs)
        writer.finish()
        starts = run.file_starts
        records = [starts[i + 1] - starts[i] for i in range(len(starts) - 1)]
        write_file_atomically(os.path.join(tmp, "files.json"),
                              orjson.dumps({"ordinals": run.file_ordinals, "records": records,
                                            "runs": writer.runs}))
    write_json_atomically(_done(out_dir, name), {"documents": writer.count})


class _RunWriter:
    """Collects a task's keys and writes them as sorted runs of at most run_docs documents."""

    def __init__(self, directory: str, config: DedupConfig, run_docs: int) -> None:
        self.dir, self.config, self.run_docs = directory, config, run_docs
        self.runs = 0
        self.count = 0
        self._keys: list = []
        self._exact: list = []
        self._bands: list = []
        self._low: list = []
        self._ids: list = []  # (doc key, id) of documents with an id
        self._pending = 0

    def add(self, keys: np.ndarray, batch, ids: list[Any]) -> None:
        self._keys.append(keys)
        self._exact.append(batch.exact)
        self._bands.append(batch.bands)
        if batch.low is not None:
            self._low.append(batch.low)
        self._ids.extend((int(key), i) for key, i in zip(keys.tolist(), ids, strict=True)
                         if i is not None)
        self._pending += len(keys)
        self.count += len(keys)
        if self._pending >= self.run_docs:
            self._flush()

    def _flush(self) -> None:
        import numpy as np

        if not self._pending:
            return
        r = self.runs
        docs = np.concatenate(self._keys)  # (D,) ascending
        cols = np.concatenate(self._bands)  # (D, B)
        exact = np.concatenate(self._exact)
        for b in range(self.config.bands + 1):
            key = exact if b == self.config.bands else np.ascontiguousarray(cols[:, b])
            has = key != 0  # 0: no shingles, no band key
            key, doc = key[has], docs[has]
            order = np.argsort(key, kind="stable")  # equal keys keep document order
            np.save(os.path.join(self.dir, f"b{b:03d}-r{r:05d}.keys.npy"), key[order])
            np.save(os.path.join(self.dir, f"b{b:03d}-r{r:05d}.docs.npy"), doc[order])
        np.save(os.path.join(self.dir, f"r{r:05d}.docs.npy"), docs)
        if self.config.verify:
            np.save(os.path.join(self.dir, f"r{r:05d}.low.npy"), np.concatenate(self._low))
        # Ids of this run: sorted doc keys, offsets into one blob of JSON values.
        id_keys = np.array([k for k, _ in self._ids], dtype=np.uint64)
        blobs = [orjson.dumps(v) for _, v in self._ids]
        offsets = np.cumsum([0, *map(len, blobs)]).astype(np.int64)
        np.save(os.path.join(self.dir, f"r{r:05d}.id-keys.npy"), id_keys)
        np.save(os.path.join(self.dir, f"r{r:05d}.id-offsets.npy"), offsets)
        write_file_atomically(os.path.join(self.dir, f"r{r:05d}.ids.bin"), b"".join(blobs))
        self._keys, self._exact, self._bands, self._low, self._ids = [], [], [], [], []
        self._pending = 0
        self.runs += 1

    def finish(self) -> None:
        self._flush()


class Signatures:
    """A finished signatures folder: its settings, parts and runs (memory-mapped on use)."""

    def __init__(self, directory: str, option: str = "SIGS") -> None:
        meta = read_meta(directory, SIG_KIND, option)
        self.dir = directory
        self.config = DedupConfig.from_dict(meta["config"])
        self.tasks = int(meta["tasks"])
        self.files: list[str] = meta["files"]
        _check_parts(directory, self.tasks, option)
        self.parts = []  # per task: {"dir", "ordinals", "records", "runs"}
        for k in range(self.tasks):
            d = os.path.join(directory, _part(k, self.tasks))
            with open(os.path.join(d, "files.json"), "rb") as f:
                self.parts.append({"dir": d, **orjson.loads(f.read())})

    def runs(self) -> Iterator[str]:
        """The path prefix of every run (part directory / rNNNNN)."""
        for p in self.parts:
            for r in range(p["runs"]):
                yield os.path.join(p["dir"], f"r{r:05d}")

    def band_runs(self, band: int) -> list[str]:
        """The path stem of each sorted run of one band (STEM.keys.npy, STEM.docs.npy)."""
        return [os.path.join(p["dir"], f"b{band:03d}-r{r:05d}")
                for p in self.parts for r in range(p["runs"])]

    def record_counts(self) -> list[int]:
        """Records of every input file, by file ordinal."""
        counts = [0] * len(self.files)
        for p in self.parts:
            for o, c in zip(p["ordinals"], p["records"], strict=True):
                counts[o] = c
        return counts

    def lookup(self, keys: np.ndarray, what: str) -> list:
        """Per document key (ascending): its low bytes row ('low') or its id ('id', or None)."""
        import numpy as np

        out: list = [None] * len(keys)
        rows = np.empty((len(keys), self.config.permutations), np.uint8) if what == "low" else None
        for stem in self.runs():
            docs = np.load(stem + (".docs.npy" if what == "low" else ".id-keys.npy"),
                           mmap_mode="r")
            if not len(docs):
                continue
            lo = int(np.searchsorted(keys, docs[0], side="left"))
            hi = int(np.searchsorted(keys, docs[-1], side="right"))
            if hi <= lo:
                continue
            want = keys[lo:hi]
            pos = np.searchsorted(docs, want)
            pos[pos >= len(docs)] = 0
            hit = np.asarray(docs[pos]) == want
            if what == "low":
                low = np.load(stem + ".low.npy", mmap_mode="r")
                rows[lo:hi][hit] = low[pos[hit]]  # type: ignore[index]
                continue
            offsets = np.load(stem + ".id-offsets.npy", mmap_mode="r")
            with open(stem + ".ids.bin", "rb") as f:
                for i, j in zip(np.flatnonzero(hit).tolist(), pos[hit].tolist(), strict=True):
                    f.seek(int(offsets[j]))
                    out[lo + i] = orjson.loads(f.read(int(offsets[j + 1] - offsets[j])))
        return rows if what == "low" else out  # type: ignore[return-value]


# -- 2. buckets -----------------------------------------------------------------------------

def ranges_for(tasks: int, bands: int) -> int:
    """Key ranges per band so that the (bands + 1) x ranges units keep `tasks` tasks busy."""
    return max(1, -(-tasks // (bands + 1)))


def build_buckets(sig_dir: str, out_dir: str, part: tuple[int, int] | None) -> int:
    """Task K of M: the duplicate edges of the units u (band, key range) with u % M == K."""

    sigs = Signatures(sig_dir)
    config = sigs.config
    k, m = part or (0, 1)
    name = _part(k, m)
    os.makedirs(out_dir, exist_ok=True)
    if os.path.exists(_done(out_dir, name)):
        raise AlreadyDone(f"{os.path.join(out_dir, name)} is done; skipping this task")
    ranges = ranges_for(m, config.bands)
    _write_meta(out_dir, BUCKET_KIND, "-o", config=config.to_dict(), tasks=m, ranges=ranges,
                signatures=os.path.abspath(sig_dir), files=sigs.files)
    edges = 0
    units = (config.bands + 1) * ranges
    for u in range(k, units, m):
        band, r = divmod(u, ranges)
        verify = config.verify and band < config.bands
        with _EdgeFile(os.path.join(
                out_dir, f"edges-b{band:03d}-r{r:05d}-of-{ranges:05d}.npz")) as out:
            for child, owner in _unit_edges(sigs, band, r, ranges, WINDOW):
                if verify:
                    child, owner = _verified(sigs, child, owner)
                out.add(child, owner)
        edges += out.count
    write_json_atomically(_done(out_dir, name), {"edges": edges})
    return edges


class _EdgeFile:
    """A unit's edges, appended a window at a time and published as one .npz at the end.

    Each window's edges go straight to two raw files, so a unit's memory is one window
    however many edges it has. On a clean exit they are copied behind .npy headers into
    the .npz (what np.savez writes: stored, zip64) and renamed into place; on an error
    nothing is published and the temporaries are removed.
    """

    NAMES = ("child", "owner")

    def __init__(self, path: str) -> None:
        self.path = path
        self.count = 0
        self._tmp = f"{path}.tmp-{os.getpid()}"
        self._raw = {name: open(f"{self._tmp}.{name}", "wb") for name in self.NAMES}

    def __enter__(self) -> _EdgeFile:
        return self

    def add(self, child: np.ndarray, owner: np.ndarray) -> None:
        import numpy as np

        for name, values in zip(self.NAMES, (child, owner), strict=True):
            np.ascontiguousarray(values, "<u8").tofile(self._raw[name])
        self.count += len(child)

    def __exit__(self, kind, value, traceback) -> None:
        try:
            for f in self._raw.values():
                f.close()
            if kind is None:
                self._publish()
        finally:
            for name in self.NAMES:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(f"{self._tmp}.{name}")

    def _publish(self) -> None:
        import zipfile

        import numpy as np

        header = {"descr": "<u8", "fortran_order": False, "shape": (self.count,)}
        with atomic_file(self.path) as f, \
                zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
            for name in self.NAMES:
                with z.open(f"{name}.npy", "w", force_zip64=True) as entry, \
                        open(f"{self._tmp}.{name}", "rb") as raw:
                    np.lib.format.write_array_header_1_0(entry, header)
                    shutil.copyfileobj(raw, entry, 1 << 20)


def _unit_edges(sigs: Signatures, band: int, r: int, ranges: int, window: int):
    """Yields (child, owner) uint64, window by window, for one band's key range r of `ranges`.

    The window boundaries are found by binary search in each run's memory map (a few
    pages, unmapped at once); the windows' pairs are read with plain reads, so the
    memory is one window whatever the corpus size.
    """
    import numpy as np

    lo, hi = (r << 64) // ranges, ((r + 1) << 64) // ranges  # keys in [lo, hi)
    runs = [_RunFile(stem) for stem in sigs.band_runs(band)]
    total = sum(int(np.diff(run.cuts([lo, hi]))[0]) for run in runs)
    windows = max(1, -(-total // window))
    bounds = [lo + (hi - lo) * w // windows for w in range(windows + 1)]
    cuts = [run.cuts(bounds) for run in runs]  # (windows + 1,) positions per run
    for w in range(windows):
        ks, ds = [], []
        for run, c in zip(runs, cuts, strict=True):
            ks.append(run.read("keys", c[w], c[w + 1]))
            ds.append(run.read("docs", c[w], c[w + 1]))
        key, doc = np.concatenate(ks), np.concatenate(ds)
        del ks, ds
        if not len(key):
            continue
        order = np.lexsort((doc, key))  # by key, then document
        key, doc = key[order], doc[order]
        del order
        first = np.r_[True, key[1:] != key[:-1]]
        del key
        owner = doc[first][np.cumsum(first) - 1]  # each key's first document
        child, owner = doc[~first], owner[~first]
        del doc, first  # the caller's --verify runs while this frame waits: hold only edges
        yield child, owner


class _RunFile:
    """One sorted run of a band: binary search and slices, without keeping it mapped."""

    def __init__(self, stem: str) -> None:
        self.stem = stem
        self._offset: dict[str, int] = {}

    def cuts(self, bounds: list[int]):
        """Position of the first key >= each bound (a bound of 2**64: the end)."""
        import numpy as np

        keys = np.load(self.stem + ".keys.npy", mmap_mode="r")
        top = [b >= 1 << 64 for b in bounds]
        q = np.array([0 if t else b for b, t in zip(bounds, top, strict=True)], np.uint64)
        pos = np.searchsorted(keys, q, side="left")
        pos[np.array(top, bool)] = len(keys)
        del keys
        return pos.tolist()

    def read(self, what: str, a: int, b: int):
        import numpy as np

        path = f"{self.stem}.{what}.npy"
        if what not in self._offset:
            with open(path, "rb") as f:
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    np.lib.format.read_array_header_1_0(f)
                else:
                    np.lib.format.read_array_header_2_0(f)
                self._offset[what] = f.tell()
        return np.fromfile(path, dtype=np.uint64, count=b - a, offset=self._offset[what] + 8 * a)


def _verified(sigs: Signatures, child: np.ndarray, owner: np.ndarray):
    """--verify: keep the edges whose two signatures agree on enough low bytes.

    VERIFY_EDGES edges at a time: the low bytes of a unit's edges grow with the corpus
    per bucket task (112 bytes per document and per side), a slice of them does not.
    """
    import numpy as np

    keep = np.zeros(len(child), bool)
    for a in range(0, len(child), VERIFY_EDGES):
        c, o = child[a:a + VERIFY_EDGES], owner[a:a + VERIFY_EDGES]
        docs = np.unique(np.concatenate([c, o]))
        low = sigs.lookup(docs, "low")
        equal = (low[np.searchsorted(docs, c)] == low[np.searchsorted(docs, o)]).sum(axis=1)
        keep[a:a + VERIFY_EDGES] = equal >= sigs.config.verify_matches
    return child[keep], owner[keep]


# -- 3. clusters ----------------------------------------------------------------------------

def build_clusters(bucket_dir: str, out_dir: str) -> int:
    """Roots of every document with a duplicate edge; a remove list per signature task."""
    import numpy as np

    meta = read_meta(bucket_dir, BUCKET_KIND, "BUCKETS")
    _check_parts(bucket_dir, int(meta["tasks"]), "BUCKETS")
    sigs = Signatures(meta["signatures"], "BUCKETS (its signatures folder)")
    config = sigs.config
    check_same_config(config, DedupConfig.from_dict(meta["config"]), bucket_dir)
    os.makedirs(out_dir, exist_ok=True)
    if os.path.exists(_done(out_dir, "clusters")):
        raise AlreadyDone(f"{out_dir} is done; skipping this task")
    ranges = int(meta["ranges"])
    # A document's parent is its exact owner if it has one, else its earliest band owner.
    # The exact key first, then one band at a time merged into the running (docs,
    # parent, exact), sorted by document: memory ~ the duplicates plus one band's edges.
    docs = np.zeros(0, np.uint64)
    parent = np.zeros(0, np.uint64)
    exact = np.zeros(0, bool)
    for band in (config.bands, *range(config.bands)):
        child, owner = _band_edges(bucket_dir, band, ranges)
        docs, parent, exact = _merge_parents(docs, parent, exact, child, owner,
                                             band == config.bands)
        del child, owner
    roots = _roots(docs, parent)  # in place: parent is roots now
    del parent
    # uroots: the distinct roots; first_dup: where the single run writes a root's
    # --clusters line (before its first duplicate); root_at: each document's root row.
    uroots, first_dup, root_at = np.unique(roots, return_index=True, return_inverse=True)
    head_first = np.zeros(len(docs), bool)
    head_first[first_dup] = True
    del first_dup
    counts = sigs.record_counts()
    offsets = np.cumsum([0, *counts]).astype(np.int64)
    ids = sigs.lookup(uroots, "id")  # None where the root has no id
    has_id = np.fromiter((i is not None for i in ids), bool, len(ids))
    # dup_of: the root's id, or its position in the whole input.
    position = (offsets[(roots >> np.uint64(RECORD_BITS)).astype(np.int64)]
                + (roots & np.uint64(RECORD_MASK)).astype(np.int64))
    for k, p in enumerate(sigs.parts):
        if p["ordinals"]:  # a task's files are a contiguous run of ordinals
            lo, hi = (np.uint64(o << RECORD_BITS) for o in (p["ordinals"][0],
                                                           p["ordinals"][-1] + 1))
            a, b = np.searchsorted(docs, [lo, hi])
        else:
            a = b = 0
        rows = root_at[a:b]
        named = has_id[rows]
        dup_ids = orjson.dumps([ids[i] for i in rows[named].tolist()])
        path = os.path.join(out_dir, f"remove-{_part(k, sigs.tasks)}.npz")
        with atomic_file(path) as f:
            np.savez(f, docs=docs[a:b], exact=exact[a:b], head_first=head_first[a:b],
                     root_position=position[a:b], root_named=named,
                     root_ids=np.frombuffer(dup_ids, np.uint8))
    _write_meta(out_dir, CLUSTER_KIND, "-o", config=config.to_dict(), tasks=sigs.tasks,
                files=sigs.files, records=counts, ordinals=[p["ordinals"] for p in sigs.parts])
    write_json_atomically(_done(out_dir, "clusters"), {"duplicates": int(len(docs))})
    return int(len(docs))


def _band_edges(bucket_dir: str, band: int, ranges: int):
    """One band's edges from all its key ranges: (child, owner), one per child (its
    earliest owner), sorted by child."""
    import numpy as np

    child, owner = [], []
    for r in range(ranges):
        with np.load(os.path.join(
                bucket_dir, f"edges-b{band:03d}-r{r:05d}-of-{ranges:05d}.npz")) as z:
            child.append(z["child"])
            owner.append(z["owner"])
    c, o = np.concatenate(child), np.concatenate(owner)
    del child, owner
    order = np.lexsort((o, c))
    c, o = c[order], o[order]
    del order
    first = np.r_[True, c[1:] != c[:-1]] if len(c) else np.zeros(0, bool)
    return c[first], o[first]


def _merge_parents(docs, parent, exact, child, owner, is_exact: bool):
    """Merge one band's edges (sorted, one per child) into the sorted parents so far.

    A document seen before keeps an exact parent, else takes the earlier owner; a new
    one is inserted in order. No sort of the merged arrays: the duplicates so far
    plus one band's edges is all the memory.
    """
    import numpy as np

    pos = np.searchsorted(docs, child)
    seen = np.zeros(len(child), bool)
    inside = pos < len(docs)
    seen[inside] = docs[pos[inside]] == child[inside]
    at = pos[seen]
    earlier = ~exact[at] & (owner[seen] < parent[at])
    parent[at[earlier]] = owner[seen][earlier]
    del at, earlier
    new = ~seen
    where = pos[new]
    docs = np.insert(docs, where, child[new])
    parent = np.insert(parent, where, owner[new])
    exact = np.insert(exact, where, is_exact)
    return docs, parent, exact


def _roots(docs: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Pointer jumping, in place over parent: follow parents (always earlier documents)
    until one has none."""
    import numpy as np

    root = parent
    if not len(docs):
        return root
    while True:
        pos = np.searchsorted(docs, root)
        pos[pos >= len(docs)] = 0
        has = docs[pos] == root  # the root so far has a parent itself
        if not has.any():
            return root
        root[has] = root[pos[has]]


# -- 4. filter ------------------------------------------------------------------------------

def filter_with_clusters(run: StreamRun, directory: str, annotate: bool,
                         clusters: str | None) -> None:
    """Write this task's documents that are not duplicates; drop (or mark) the others."""
    import numpy as np

    _stage_inputs(run)
    meta = read_meta(directory, CLUSTER_KIND, "--index")
    if not os.path.exists(_done(directory, "clusters")):
        raise ConfigError("index", "is not finished (no clusters.done)", value=directory)
    if meta["files"] != run.all_paths:
        raise ConfigError("index", "was built from other input files "
                          f"({len(meta['files'])} files, these are {len(run.all_paths)})",
                          value=directory)
    mine = set(run.file_ordinals)
    offsets = np.cumsum([0, *meta["records"]]).astype(np.int64)
    docs, dup_of, exact, head_first = [], [], [], []
    for k, ordinals in enumerate(meta["ordinals"]):
        if not mine.intersection(ordinals):
            continue
        with np.load(os.path.join(directory, f"remove-{_part(k, meta['tasks'])}.npz")) as z:
            keep = np.isin((z["docs"] >> np.uint64(RECORD_BITS)).astype(np.int64),
                           np.asarray(sorted(mine), dtype=np.int64))
            docs.append(z["docs"][keep])
            exact.append(z["exact"][keep])
            head_first.append(z["head_first"][keep])
            named_ids = iter(orjson.loads(z["root_ids"].tobytes()))
            refs = [next(named_ids) if named else pos for pos, named in
                    zip(z["root_position"].tolist(), z["root_named"].tolist(), strict=True)]
            dup_of.extend(refs[i] for i in np.flatnonzero(keep).tolist())
    remove = np.concatenate(docs).tolist() if docs else []
    exact_l = np.concatenate(exact).tolist() if exact else []
    head_l = np.concatenate(head_first).tolist() if head_first else []
    ordinals = run.file_ordinals
    starts = run.file_starts
    next_i = 0
    nxt = remove[0] if remove else -1
    with _StageLog(run.open_output(clusters)) if clusters else contextlib.nullcontext() as log:
        for doc in run.docs():
            j = len(starts) - 1  # the file being read is the last one started
            record = doc.index - starts[j]
            key = (ordinals[j] << RECORD_BITS) | record
            if key != nxt:
                run.write(doc)
                continue
            i = next_i
            next_i += 1
            nxt = remove[next_i] if next_i < len(remove) else -1
            head = dup_of[i]
            if log is not None and head_l[i]:
                log.line({"id": head, "cluster": head})  # before the root's first duplicate
            member = doc.id if doc.id is not None else int(offsets[ordinals[j]]) + record
            settle_duplicate(run, doc, EXACT if exact_l[i] else MINHASH, head, annotate,
                             log, member, -1)
    _check_counts(run, meta["records"])
    if next_i != len(remove):
        raise DataError(f"the cluster index lists {len(remove) - next_i} documents to remove "
                        "that are not in these inputs (same inputs as the signatures stage?)")


class _StageLog(ClusterLog):
    """--clusters in a filter task: the clusters stage says where a root's line goes."""

    def line(self, record: dict) -> None:
        self.sink.write(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))

    def add(self, member: Any, head_number: int, head: Any, reason: str) -> None:
        self.line({"id": member, "cluster": head, "reason": reason})


def _check_counts(run: StreamRun, records: list[int]) -> None:
    starts = run.file_starts
    for j, o in enumerate(run.file_ordinals):
        seen = starts[j + 1] - starts[j]
        if seen != records[o]:
            raise DataError(f"{run.paths[j]}: {seen} records, but the signatures stage saw "
                            f"{records[o]} (the inputs changed since?)")
