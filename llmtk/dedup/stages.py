"""Scale-out: the single-command dedup split into stages over a shared filesystem.

    llmtk dedup signatures IN --shard K/N -o sigs/   # N jobs: sigs/sig-K-of-N.npz
    llmtk dedup index sigs/ --shard K/M -o index/    # M jobs: bands b with b % M == K
    llmtk dedup filter IN --index index/ --shard K/N # N jobs: write kept docs

Documents are numbered by their position in the whole input, in every stage.
For each band, the first document that had a key is the smallest position with
it; a document's band parent is the earliest such first owner before it, its
exact parent the first with the same exact key. Those are exactly the parents
the streaming index finds (see llmtk.dedup.index), so the union of the filter
shards' outputs equals the single-command output. The filter stage reads all
index parts (8-16 bytes per document each) and resolves roots itself.
"""

from __future__ import annotations

import glob
import os
import re
from typing import Any

import orjson

from llmtk.dedup.config import DedupConfig
from llmtk.dedup.index import (
    EXACT,
    MINHASH,
    _write,
    check_same_config,
    read_meta,
    resolve_roots,
    verified,
)
from llmtk.dedup.stream import cluster_log, settle_duplicate, signature_batches
from llmtk.errors import DataError, UsageError
from llmtk.io import StreamRun
from llmtk.io.atomic import atomic_file

SIG_KIND, INDEX_KIND = "llmtk.dedup.signatures", "llmtk.dedup.index-parts"


def _meta(kind: str, config: DedupConfig, **extra: Any) -> bytes:
    meta = {"kind": kind, "version": 1, "config": config.to_dict(), **extra}
    return orjson.dumps(meta, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)


def _parts(directory: str, stem: str, option: str) -> list[str]:
    """All part files of a complete set: stem-K-of-N.npz for every K < N."""
    paths = sorted(glob.glob(os.path.join(directory, f"{stem}-*-of-*.npz")))
    found: dict[int, set[int]] = {}
    for p in paths:
        m = re.search(rf"{stem}-(\d+)-of-(\d+)\.npz$", p)
        if m:
            found.setdefault(int(m.group(2)), set()).add(int(m.group(1)))
    if not found:
        raise UsageError(f"{option}: {directory} holds no {stem}-K-of-N.npz files")
    if len(found) > 1:
        raise UsageError(f"{option}: {directory} mixes part sets of sizes {sorted(found)}")
    (n, ks), = found.items()
    missing = sorted(set(range(n)) - ks)
    if missing:
        raise UsageError(f"{option}: {directory} lacks {stem} part(s) {missing} of {n}")
    return [os.path.join(directory, f"{stem}-{k:05d}-of-{n:05d}.npz") for k in range(n)]


# -- stage 1 -----------------------------------------------------------------

def write_signatures(
    run: StreamRun, config: DedupConfig, out_dir: str, shard: tuple[int, int] | None, workers: int
) -> None:
    import numpy as np

    k, n = shard or (0, 1)
    positions, exact, bands, low, ids = [], [], [], [], []
    for docs, batch in signature_batches(run.docs(), config, workers):
        positions.append(np.fromiter((d.index for d in docs), np.int64, len(docs)))
        exact.append(batch.exact)
        bands.append(batch.bands)
        if batch.low is not None:
            low.append(batch.low)
        ids.extend([d.index, d.id] for d in docs if d.id is not None)
        run.summary.records_out += len(docs)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"sig-{k:05d}-of-{n:05d}.npz")
    nb = config.bands
    with atomic_file(path) as f:
        np.savez(
            f,
            positions=np.concatenate(positions) if positions else np.zeros(0, np.int64),
            exact=np.concatenate(exact) if exact else np.zeros(0, np.uint64),
            bands=np.concatenate(bands) if bands else np.zeros((0, nb), np.uint64),
            ids=np.frombuffer(orjson.dumps(ids), dtype=np.uint8),
            low=np.concatenate(low) if low else np.zeros((0, config.permutations), np.uint8),
        )
    _write(os.path.join(out_dir, "meta.json"), _meta(SIG_KIND, config))


# -- stage 2 -----------------------------------------------------------------

def _first_owner_parent(keys, positions):
    """keys (D,) uint64 (0: none), positions (D,) ascending -> (D,) earlier first owner or -1."""
    import numpy as np

    parent = np.full(len(keys), -1, dtype=np.int64)
    has = keys != 0
    idx = np.flatnonzero(has)
    if idx.size:
        _, first, inverse = np.unique(keys[idx], return_index=True, return_inverse=True)
        owner = positions[idx[first]][inverse]
        parent[idx] = np.where(owner < positions[idx], owner, -1)
    return parent


def build_index(sig_dir: str, out_dir: str, part: tuple[int, int] | None) -> int:
    """Build index part K of M (bands b with b % M == K; part 0 also the exact keys)."""
    import numpy as np

    meta = read_meta(sig_dir, SIG_KIND, "SIGS")
    config = DedupConfig.from_dict(meta["config"])
    k, m = part or (0, 1)
    mine = [b for b in range(config.bands) if b % m == k]
    positions, exact, cols, lows, ids = [], [], [], [], []
    for path in _parts(sig_dir, "sig", "SIGS"):
        with np.load(path) as z:
            positions.append(z["positions"])
            if config.verify:
                lows.append(z["low"])
            if k == 0:
                exact.append(z["exact"])
                ids.extend(orjson.loads(z["ids"].tobytes()))
            cols.append(z["bands"][:, mine])
    pos = np.concatenate(positions)
    order = np.argsort(pos, kind="stable")
    pos = pos[order]
    if len(pos) > 1 and (np.diff(pos) == 0).any():
        raise DataError(f"{sig_dir}: a document is in two signature parts "
                        "(were --shard values reused?)")
    band = np.concatenate(cols)[order]  # (D, len(mine))
    big = np.iinfo(np.int64).max
    band_parent = np.full(len(pos), big, dtype=np.int64)
    low = np.concatenate(lows)[order] if config.verify else None  # (D, P) by position
    for j in range(band.shape[1]):
        p = _first_owner_parent(np.ascontiguousarray(band[:, j]), pos)
        if low is not None:
            p = verified(p[:, None], pos, lambda n: low[np.searchsorted(pos, n)],
                         config.verify_matches)[:, 0]
        band_parent = np.minimum(band_parent, np.where(p >= 0, p, big))
    band_parent[band_parent == big] = -1
    if k == 0:
        exact_parent = _first_owner_parent(np.concatenate(exact)[order], pos)
    else:
        exact_parent = np.full(len(pos), -1, dtype=np.int64)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"index-{k:05d}-of-{m:05d}.npz")
    with atomic_file(path) as f:
        np.savez(f, positions=pos, band_parent=band_parent, exact_parent=exact_parent)
    if k == 0:
        ids.sort(key=lambda x: x[0])
        _write(os.path.join(out_dir, "ids.json"), orjson.dumps(ids))
    _write(os.path.join(out_dir, "meta.json"), _meta(INDEX_KIND, config))
    return len(pos)


# -- stage 3 -----------------------------------------------------------------

class StageIndex:
    """All index parts combined: roots for every document of the input."""

    def __init__(self, directory: str, config: DedupConfig | None = None) -> None:
        import numpy as np

        meta = read_meta(directory, INDEX_KIND, "--index")
        self.config = DedupConfig.from_dict(meta["config"])
        if config is not None:
            check_same_config(self.config, config, directory)
        pos = band = exact = None
        for path in _parts(directory, "index", "--index"):
            with np.load(path) as z:
                if pos is None:
                    pos, band, exact = z["positions"], z["band_parent"], z["exact_parent"]
                    continue
                if not np.array_equal(pos, z["positions"]):
                    raise UsageError(f"--index: {path} was built from other signatures")
                b = z["band_parent"]
                band = np.where((band < 0) | ((b >= 0) & (b < band)), b, band)
                exact = np.maximum(exact, z["exact_parent"])
        assert pos is not None and band is not None and exact is not None
        self.positions = pos
        self.exact = exact >= 0
        parent = np.where(exact >= 0, exact, band)
        self.roots = resolve_roots(parent, pos, lambda r: r) if len(pos) else parent
        with open(os.path.join(directory, "ids.json"), "rb") as f:
            self.ids = {int(p): i for p, i in orjson.loads(f.read())}

    def row(self, position: int, where: str) -> int:
        import numpy as np

        i = int(np.searchsorted(self.positions, position))
        if i >= len(self.positions) or self.positions[i] != position:
            raise DataError(f"{where}: this record is not in the index (same inputs as the "
                            "signatures stage?)")
        return i


def filter_with_index(
    run: StreamRun, directory: str, annotate: bool, clusters: str | None
) -> None:
    import numpy as np

    index = StageIndex(directory)
    roots, positions = index.roots, index.positions
    with cluster_log(run, clusters) as log:
        # Clusters with duplicates: a kept document's own --clusters line is written by
        # the shard that holds it, so the shards' lines together equal the single run's.
        heads = set(np.unique(roots[roots != positions]).tolist()) if log is not None else set()
        for doc in run.docs():
            i = index.row(doc.index, doc.where())
            root = int(roots[i])
            ref = index.ids.get(doc.index, doc.index)
            if root == doc.index:
                if doc.index in heads:
                    log.head(root, ref)  # type: ignore[union-attr]
                run.write(doc)
                continue
            if log is not None:
                log.heads.add(root)  # its head's line comes from the shard that holds it
            settle_duplicate(run, doc, EXACT if index.exact[i] else MINHASH,
                             index.ids.get(root, root), annotate, log, ref, root)
