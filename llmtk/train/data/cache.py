"""The token cache and the batch sampler.

The cache: the documents `llmtk train --data` names are tokenized once, before step 1,
into token datasets of one task each (llmtk.train.data.tokens: the files, writer and windows
of `llmtk train tokenize`), CACHE/KEY/train/ and CACHE/KEY/val/ (the held-out documents
of --val-data or --val-fraction; empty without them). KEY is a hash of the inputs (paths,
sizes, mtimes), the tokenizer's fingerprint, the text field and the validation split, so
a changed input or tokenizer builds a new cache and an unchanged one is reused by every
run and every rank. train/meta.json records the cache's version and split (`cache`).

Caches before version 3 had files of their own (KEY/meta.json, 64M-token shards) and cut
the windows inside each shard, where a dataset cuts them across its whole stream: the
same windows for a cache of one shard, others past 64M tokens. They are not read any
more (`open_cache` says so); a run begun on one resumes on the version 3 cache of the
same inputs silently when the windows are the same, and is refused when they are not
(`earlier_names`, read by `cache_names` and llmtk.train.data.inputs).

Sampling: the train tokens are cut into fixed windows of seq_len + 1 tokens
(packed across document boundaries). Window order is a seeded permutation per
epoch (`window_order`: an array up to ORDER_IN_MEMORY windows, computed per index
above). The position in the data is one integer, the number of windows the whole
job has consumed; micro-batch g of the job covers windows [g*W*B, (g+1)*W*B) of
the (epoch-permuted) order and rank r takes its B-window slice. So the data
position is exact to save and restore, and a 2-process run sees the same
global batches as a 1-process run with twice the batch size.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import json
import os
import queue
import threading
from typing import TYPE_CHECKING

import numpy as np
import xxhash

from llmtk.errors import ConfigError, DataError
from llmtk.io import expand_inputs, read_docs, write_json_atomically
from llmtk.io.atomic import atomic_dir
from llmtk.io.shard import doc_key
from llmtk.train.data.tokens import (
    PartWriter,
    TokenDataset,
    dataset_meta,
    mark_done,
    part_name,
    read_meta,
    sweep,
    temp_dir,
)
from llmtk.train.data.webpages import WebPageCheck

if TYPE_CHECKING:
    from llmtk.train.data.tokens import Windows

CACHE_VERSION = 3  # 2: document boundaries beside each shard; 3: one-task token datasets
OLD_SHARD_TOKENS = 1 << 26  # tokens per shard file of a cache before version 3


def _input_identity(paths: list[str]) -> list:
    out = []
    for p in paths:
        st = os.stat(p)
        out.append([os.path.abspath(p), st.st_size, st.st_mtime_ns])
    return out


def cache_key(train_paths: list[str], val_paths: list[str], tokenizer_fp: str, text_field: str,
              val_fraction: float, version: int = CACHE_VERSION) -> str:
    spec = {
        "version": version, "train": _input_identity(train_paths),
        "val": _input_identity(val_paths), "tokenizer": tokenizer_fp, "text_field": text_field,
        "val_fraction": val_fraction,
    }
    return hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def _is_val(text: str, fraction: float) -> bool:
    """A stable, content-based split: the same document always lands on the same side."""
    return xxhash.xxh64_intdigest(text.encode("utf-8", "surrogatepass")) < fraction * 2.0**64


def old_caches(cache_root: str) -> list[str]:
    """The cache directories under cache_root written before version 3 (KEY/meta.json)."""
    return [name for name in sorted(os.listdir(cache_root))
            if os.path.isfile(os.path.join(cache_root, name, "meta.json"))]


def build_cache(data: list[str], val_data: list[str], tokenizer, cache_root: str,
                text_field: str = "text", val_fraction: float = 0.0, log=None,
                allow_html: bool = False) -> str:
    """Tokenize the inputs into cache_root/<key>/ unless it is there; return that directory.

    One process tokenizes, under a lock per cache key; the others wait on the lock and then
    reuse the result (on a shared filesystem whose flock works across hosts, once per job;
    otherwise once per node, and the first rename wins). The lock is a file lock, not a
    collective, so the wait is not bounded by the process group's NCCL timeout.
    Inputs that are web pages are refused (llmtk.train.data.webpages) unless allow_html.
    """
    from llmtk.train.lock import DirLock

    train_paths = expand_inputs(data)
    val_paths = expand_inputs(val_data) if val_data else []
    if "-" in train_paths or "-" in val_paths:
        raise ConfigError("data", "training cannot read stdin (the cache and resume need files)")
    key = cache_key(train_paths, val_paths, tokenizer.fingerprint(), text_field, val_fraction)
    final = os.path.join(cache_root, key)
    if os.path.isdir(os.path.join(final, "train")):
        return final
    made_root = not os.path.isdir(cache_root)
    os.makedirs(cache_root, exist_ok=True)
    with DirLock(cache_root, f".lock-{key}") as lock:
        if os.path.isdir(os.path.join(final, "train")):
            return final  # built by the process that held the lock before us
        sweep(cache_root)
        if log and (old := old_caches(cache_root)):
            log(f"note: {cache_root} holds {len(old)} cache(s) of an older version, which "
                f"this llmtk does not read; building a version {CACHE_VERSION} one (the same "
                "tokens); delete the old ones to free the space")
        # Without a cross-host lock, another node may finish the same cache first
        # (exist_ok: its copy is kept, ours dropped).
        try:
            with atomic_dir(final, temp_dir(cache_root, key), exist_ok=True) as tmp:
                _tokenize(train_paths, val_paths, tokenizer, tmp, final, text_field,
                          val_fraction, log, WebPageCheck(allow_html))
        except BaseException:
            # A bad line, empty data or Ctrl-C leaves nothing: atomic_dir removed the partial
            # datasets; no lock file either, and no cache folder if this call made it.
            lock.release(remove=True)
            if made_root:
                with contextlib.suppress(OSError):
                    os.rmdir(cache_root)
            raise
    return final


def _split_writer(tmp: str, split: str, meta: dict) -> PartWriter:
    """The writer of the one part of dataset tmp/split (its meta.json written)."""
    part = os.path.join(tmp, split, part_name(0, 1))
    os.makedirs(part)
    write_json_atomically(os.path.join(tmp, split, "meta.json"), meta)
    return PartWriter(part, 0, 1, meta)


def _tokenize(train_paths, val_paths, tokenizer, tmp, final, text_field, val_fraction,
              log, pages: WebPageCheck) -> None:
    from llmtk.text.tokenizer import encode_batch

    split = {"version": CACHE_VERSION, "val_fraction": val_fraction, "val_inputs": val_paths}
    train = _split_writer(tmp, "train", dataset_meta(tokenizer, text_field, 1, train_paths,
                                                     cache=split))
    # the documents held out of --data keep their ordinals in train's inputs
    val = _split_writer(tmp, "val", dataset_meta(tokenizer, text_field, 1,
                                                 val_paths or train_paths))

    def consume(paths, is_val) -> list[dict]:
        """Tokenize the documents of `paths` into train or val; their files' rows."""
        batch: list = []
        starts: list[int] = []  # each file's first record index (read_docs fills it)

        def drain():
            ids = encode_batch(tokenizer, [d.text for d in batch])
            sides = [is_val(d.text) for d in batch]
            keys = []
            for doc in batch:
                ordinal = bisect.bisect_right(starts, doc.index) - 1
                keys.append(doc_key(ordinal, doc.index - starts[ordinal]))
            for target, side in ((train, False), (val, True)):
                mine = [j for j, s in enumerate(sides) if s == side]
                if mine:
                    target.add([ids[j] for j in mine], np.array([keys[j] for j in mine],
                                                                dtype=np.uint64),
                               [batch[j].id for j in mine], tokenizer.eos_id)
            batch.clear()

        for doc in read_docs(paths, text_field=text_field, file_starts=starts):
            pages.see(doc)
            batch.append(doc)
            if len(batch) >= 1024:
                drain()
        drain()
        return [{"ordinal": i, "path": p, "records": starts[i + 1] - starts[i]}
                for i, p in enumerate(paths)]

    if log:
        log(f"tokenizing {len(train_paths)} file(s) into {final}")
    held_out = not val_paths and val_fraction > 0
    train_files = consume(train_paths, lambda text: held_out and _is_val(text, val_fraction))
    # ordinals of the validation documents count in val_inputs
    val_files = consume(val_paths, lambda text: True) if val_paths else train_files
    pages.finish()
    if train.tokens == 0:
        raise DataError(f"{train_paths[0]}: no training text (0 documents)")
    for writer, files in ((train, train_files), (val, val_files)):
        mark_done(writer.dir, writer.close(files))


def open_cache(directory: str) -> tuple[TokenDataset, TokenDataset]:
    """The train and validation datasets of a cache (FileNotFoundError: it is gone)."""
    os.stat(directory)
    if os.path.isfile(os.path.join(directory, "meta.json")):
        raise DataError(f"{directory}: a token cache written by an older llmtk (before "
                        f"version {CACHE_VERSION}), which this llmtk does not read: use the "
                        f"llmtk that wrote it, or train again (this one builds a version "
                        f"{CACHE_VERSION} cache of the same tokens)")
    return (TokenDataset.open(os.path.join(directory, "train")),
            TokenDataset.open(os.path.join(directory, "val")))


def _one_old_shard(ds: TokenDataset) -> bool:
    """Whether a cache before version 3 held this split in one shard (it closed a shard
    after the first document that brought it to OLD_SHARD_TOKENS), so that it cut the
    windows a dataset cuts."""
    ends = ds.parts[0].index()[:, 0]
    return len(ends) < 2 or int(ends[-2]) < OLD_SHARD_TOKENS


def earlier_names(cache: str) -> dict[str, bool]:
    """{name: same windows} of the caches that the same inputs had under every earlier
    CACHE_VERSION (a run resumed after its cache was rebuilt has the same data; its
    windows too unless a split of it was over one shard)."""
    train, val = open_cache(cache)
    meta = read_meta(train.directory)
    split = meta["cache"]
    same = _one_old_shard(train) and _one_old_shard(val)
    return {cache_key(meta["files"], split["val_inputs"], meta["tokenizer"],
                      meta["text_field"], split["val_fraction"], version=v): same
            for v in range(1, CACHE_VERSION)}


def cache_names(cache: str) -> set[str]:
    """The names under which a checkpoint's data_cache is this cache's windows: its own,
    and its earlier names that cut the same windows."""
    names = {os.path.basename(cache)}
    with contextlib.suppress(OSError, DataError, KeyError):
        names |= {name for name, same in earlier_names(cache).items() if same}
    return names


ORDER_IN_MEMORY = 1 << 24  # windows per epoch up to which the order is a permutation array


def window_order(n: int, key: list[int]):
    """The seeded order of n windows for one epoch: order[i] is the i-th window read.

    Up to ORDER_IN_MEMORY windows (128 MiB of int64) a NumPy permutation; above, where an
    array of 8 bytes per window would grow with the corpus (1T tokens at 2,048 per window
    is 3.9 GiB per rank), a keyed Feistel permutation computed per index, in no memory."""
    import numpy as np

    if n <= ORDER_IN_MEMORY:
        return np.random.default_rng(key).permutation(n)
    return FeistelOrder(n, key)


class FeistelOrder:
    """A pseudo-random bijection of range(n): a 4-round balanced Feistel network on the
    smallest even number of bits that covers n, walked again while it lands past n
    (cycle walking: fewer than 4 rounds of it on average, as 2^bits < 4n)."""

    ROUNDS = 4

    def __init__(self, n: int, key: list[int]):
        self.n = n
        self.half = max(1, ((n - 1).bit_length() + 1) // 2)
        self.mask = (1 << self.half) - 1
        seed = xxhash.xxh64_intdigest(json.dumps(list(map(int, key))).encode())
        self.keys = [xxhash.xxh64_intdigest(f"{seed}:{r}".encode()) for r in range(self.ROUNDS)]

    def _round(self, x: int, k: int) -> int:
        # splitmix64 of (x, k): well mixed, the same on every machine
        z = (x * 0x9E3779B97F4A7C15 + k) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        return (z ^ (z >> 31)) & self.mask

    def _permute(self, x: int) -> int:
        left, right = x >> self.half, x & self.mask
        for k in self.keys:
            left, right = right, left ^ self._round(right, k)
        return (left << self.half) | right

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if not 0 <= i < self.n:
            raise IndexError(i)
        x = self._permute(i)
        while x >= self.n:
            x = self._permute(x)
        return x


class Batches:
    """What a sampler derives from its rows(position) of shape (B, T + 1)."""

    B: int
    world: int

    def batch(self, position: int):
        """(x, y) int64 tensors of shape (B, T): inputs and the targets shifted by one."""
        return self.split(self.rows(position))  # type: ignore[attr-defined]

    @staticmethod
    def stack(windows: list) -> np.ndarray:
        """(B, ...) int64 rows from B windows of uint16/uint32 tokens (each (T + 1,), or
        (3, T + 1) for SFT's packed rows), in one copy (not np.stack's, then astype's)."""
        out = np.empty((len(windows), *np.shape(windows[0])), dtype=np.int64)
        for j, w in enumerate(windows):
            out[j] = w
        return out

    @staticmethod
    def split(t):
        """rows (B, T + 1) -> the model's inputs (x, y); SFTSampler adds the example ids."""
        return t[:, :-1], t[:, 1:]

    @property
    def global_batch(self) -> int:
        return self.B * self.world


class Sampler(Batches):
    """Micro-batches for one rank, addressed by the job's global window position."""

    def __init__(self, windows: Windows, micro_batch: int, world: int, rank: int, seed: int,
                 shuffle: bool = True):
        if len(windows) == 0:
            raise DataError(f"not enough tokens for one sequence of {windows.seq_len + 1}")
        self.w, self.B, self.world, self.rank = windows, micro_batch, world, rank
        self.seed, self.shuffle = seed, shuffle
        self._epoch, self._perm = -1, None

    def _index(self, pos: int) -> int:
        n = len(self.w)
        epoch, i = divmod(pos, n)
        if not self.shuffle:
            return i
        if epoch != self._epoch:
            self._perm = window_order(n, [self.seed, epoch])
            self._epoch = epoch
        return int(self._perm[i])

    def locate(self, position: int) -> tuple[int, int]:
        """(0, window index) of the window at job-wide `position` (as BlendSampler.locate,
        whose first number is the source)."""
        return 0, self._index(position)

    def rows(self, position: int):
        """(B, T + 1) int64 tensor: this rank's windows of the job-wide micro-batch starting
        at window `position`."""
        import torch

        start = position + self.rank * self.B
        return torch.from_numpy(self.stack([self.w.get(self._index(start + j))
                                            for j in range(self.B)]))



class Prefetcher:
    """Training micro-batches for positions start, start + stride, ... prepared ahead.

    The data position only ever moves forward by one global micro-batch, so the next
    batches are known in advance: a background thread cuts them from the memory map (into
    pinned memory on CUDA) while the GPU works on the current one, and the copy to the
    device is non_blocking. Asking for another position (a rollback) restarts the thread
    there. On CPU the batches are cut inline (threaded=False): a thread would only compete
    with the math for the same cores.
    """

    def __init__(self, sampler: Sampler, stride: int, device: str, threaded: bool,
                 depth: int = 4):
        self.sampler, self.stride, self.device, self.depth = sampler, stride, device, depth
        self.threaded, self.pin = threaded, device.startswith("cuda")
        self._queue: queue.Queue | None = None
        self._stop: threading.Event | None = None
        self._expect: int | None = None

    def _load(self, position: int):
        t = self.sampler.rows(position)
        return t.pin_memory() if self.pin else t

    def _start(self, position: int) -> None:
        self.close()
        q: queue.Queue = queue.Queue(maxsize=self.depth)
        stop = threading.Event()

        def work(pos: int) -> None:
            try:
                while not stop.is_set():
                    item = (pos, self._load(pos))
                    while not stop.is_set():
                        try:
                            q.put(item, timeout=0.1)
                            break
                        except queue.Full:
                            continue
                    pos += self.stride
            except BaseException as e:  # handed to the consumer, raised there
                q.put((None, e))

        self._queue, self._stop = q, stop
        threading.Thread(target=work, args=(position,), daemon=True,
                         name="llmtk-prefetch").start()

    def get(self, position: int):
        """(x, y) (SFT: (x, y, doc)) on the device for the micro-batch at `position`."""
        if not self.threaded:
            t = self._load(position)
        else:
            if self._expect != position:
                self._start(position)
            got, t = self._queue.get()
            if got is None:
                raise t
            self._expect = position + self.stride
        t = t.to(self.device, non_blocking=True)  # (B, T + 1)
        return self.sampler.split(t)

    def close(self) -> None:
        if self._stop is not None:
            self._stop.set()
        self._queue = self._stop = self._expect = None
