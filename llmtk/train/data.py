"""The token cache and the batch sampler.

Documents are tokenized once into memory-mapped shards of raw token ids
(uint16 when the vocabulary fits, else uint32), EOS after every document, so
training never re-parses JSON. Beside each shard, SHARD.docs holds its documents'
boundaries and identities as (D, 2) uint64 rows: the token offset in the shard
where each ends (EOS included) and file ordinal << 40 | record ordinal (the same
rows as a token dataset's docs.bin), and SHARD.ids their `id` fields as JSON, one
line each (empty: none), so `llmtk train batch` can name a window's documents.
A cache directory is named by a hash of its
inputs (paths, sizes, mtimes), the tokenizer's fingerprint, the text field and
the validation split, so a changed input or tokenizer builds a new cache and
an unchanged one is reused by every run and every rank.

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
import re
import shutil
import socket
import threading
from dataclasses import dataclass, field

import numpy as np
import orjson
import xxhash

from llmtk.errors import ConfigError, DataError
from llmtk.io import expand_inputs, read_docs
from llmtk.io.atomic import atomic_dir, pid_alive
from llmtk.io.shard import RECORD_BITS, RECORD_MASK, doc_key
from llmtk.train.webpages import WebPageCheck

CACHE_VERSION = 2  # 2: document boundaries and identities beside each shard
SHARD_TOKENS = 1 << 26  # 64M tokens per shard file (128 MiB as uint16)


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


class _ShardWriter:
    def __init__(self, directory: str, split: str, dtype):
        self.directory, self.split, self.dtype = directory, split, dtype
        self.shards: list[dict] = []
        self.buf: list[np.ndarray] = []
        self.buf_tokens = 0
        self.docs = 0
        self.index: list[tuple[int, int]] = []  # this shard's (end offset, doc key) rows
        self.ids: list[bytes] = []

    def add(self, ids: list[int], eos: int, key: int = 0, record_id=None) -> None:
        arr = np.empty(len(ids) + 1, dtype=self.dtype)
        arr[:-1] = ids
        arr[-1] = eos
        self.buf.append(arr)
        self.buf_tokens += len(arr)
        self.docs += 1
        self.index.append((self.buf_tokens, key))
        # as a token dataset's ids.bin writes them (orjson: also Parquet's dates)
        self.ids.append(b"" if record_id is None else orjson.dumps(record_id))
        if self.buf_tokens >= SHARD_TOKENS:
            self.flush()

    def flush(self) -> None:
        if not self.buf:
            return
        name = f"{self.split}-{len(self.shards):05d}.bin"
        data = np.concatenate(self.buf)
        index = np.array(self.index, dtype=np.uint64).reshape(-1, 2)
        for path, payload in ((name, data.tobytes()), (name + ".docs", index.tobytes()),
                              (name + ".ids", b"".join(i + b"\n" for i in self.ids))):
            with open(os.path.join(self.directory, path), "wb") as f:
                f.write(payload)
                f.flush()
                os.fsync(f.fileno())
        self.shards.append({"file": name, "tokens": int(len(data)), "docs": len(self.index)})
        self.buf, self.buf_tokens, self.index, self.ids = [], 0, [], []

    @property
    def tokens(self) -> int:
        return sum(s["tokens"] for s in self.shards) + self.buf_tokens


def _is_val(text: str, fraction: float) -> bool:
    """A stable, content-based split: the same document always lands on the same side."""
    return xxhash.xxh64_intdigest(text.encode("utf-8", "surrogatepass")) < fraction * 2.0**64


_TMP = re.compile(r"^\.tmp-[0-9a-f]{16}-(?P<host>.+)-(?P<pid>\d+)$")


def sweep_stale(cache_root: str) -> list[str]:
    """Remove temporary cache directories left by dead processes of this host (a SIGKILL
    mid-tokenization); another host's, or a live process's, are left alone."""
    host, removed = socket.gethostname(), []
    for name in os.listdir(cache_root):
        m = _TMP.match(name)
        if m and m["host"] == host and not pid_alive(int(m["pid"])):
            shutil.rmtree(os.path.join(cache_root, name), ignore_errors=True)
            removed.append(name)
    return removed


def old_caches(cache_root: str) -> list[str]:
    """The cache directories under cache_root written by an older CACHE_VERSION."""
    old = []
    for name in sorted(os.listdir(cache_root)):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            if read_meta(os.path.join(cache_root, name)).get("version") != CACHE_VERSION:
                old.append(name)
    return old


def build_cache(data: list[str], val_data: list[str], tokenizer, cache_root: str,
                text_field: str = "text", val_fraction: float = 0.0, log=None,
                allow_html: bool = False) -> str:
    """Tokenize the inputs into cache_root/<key>/ unless it is there; return that directory.

    One process tokenizes, under a lock per cache key; the others wait on the lock and then
    reuse the result (on a shared filesystem whose flock works across hosts, once per job;
    otherwise once per node, and the first rename wins). The lock is a file lock, not a
    collective, so the wait is not bounded by the process group's NCCL timeout.
    Inputs that are web pages are refused (llmtk.train.webpages) unless allow_html.
    """
    from llmtk.train.lock import DirLock

    train_paths = expand_inputs(data)
    val_paths = expand_inputs(val_data) if val_data else []
    if "-" in train_paths or "-" in val_paths:
        raise ConfigError("data", "training cannot read stdin (the cache and resume need files)")
    key = cache_key(train_paths, val_paths, tokenizer.fingerprint(), text_field, val_fraction)
    final = os.path.join(cache_root, key)
    if os.path.exists(os.path.join(final, "meta.json")):
        return final
    made_root = not os.path.isdir(cache_root)
    os.makedirs(cache_root, exist_ok=True)
    with DirLock(cache_root, f".lock-{key}") as lock:
        if os.path.exists(os.path.join(final, "meta.json")):
            return final  # built by the process that held the lock before us
        sweep_stale(cache_root)
        if log and (old := old_caches(cache_root)):
            log(f"note: {cache_root} holds {len(old)} cache(s) of an older version, without "
                f"the document boundaries `llmtk train batch` needs; building a version "
                f"{CACHE_VERSION} one (the same tokens); delete the old ones to free the space")
        # Without a cross-host lock, another node may finish the same cache first
        # (exist_ok: its copy is kept, ours dropped).
        tmp = os.path.join(cache_root, f".tmp-{key}-{socket.gethostname()}-{os.getpid()}")
        try:
            with atomic_dir(final, tmp, exist_ok=True):
                _tokenize(train_paths, val_paths, tokenizer, tmp, final, text_field,
                          val_fraction, log, WebPageCheck(allow_html))
        except BaseException:
            # A bad line, empty data or Ctrl-C leaves nothing: atomic_dir removed the partial
            # shards; no lock file either, and no cache folder if this call made it.
            lock.release(remove=True)
            if made_root:
                with contextlib.suppress(OSError):
                    os.rmdir(cache_root)
            raise
    return final


def _tokenize(train_paths, val_paths, tokenizer, tmp, final, text_field, val_fraction,
              log, pages: WebPageCheck) -> None:
    dtype = np.uint16 if tokenizer.vocab_size <= 65536 else np.uint32
    train = _ShardWriter(tmp, "train", dtype)
    val = _ShardWriter(tmp, "val", dtype)
    from llmtk.text.tokenizer import encode_batch

    def consume(paths, is_val):
        batch: list = []
        starts: list[int] = []  # each file's first record index (read_docs fills it)

        def drain():
            texts = [d.text for d in batch]
            for doc, ids in zip(batch, encode_batch(tokenizer, texts), strict=True):
                target = val if is_val(doc.text) else train
                ordinal = bisect.bisect_right(starts, doc.index) - 1
                target.add(ids, tokenizer.eos_id, doc_key(ordinal, doc.index - starts[ordinal]),
                           doc.id)
            batch.clear()

        for doc in read_docs(paths, text_field=text_field, file_starts=starts):
            pages.see(doc)
            batch.append(doc)
            if len(batch) >= 1024:
                drain()
        drain()

    if log:
        log(f"tokenizing {len(train_paths)} file(s) into {final}")
    split = not val_paths and val_fraction > 0
    consume(train_paths, lambda text: split and _is_val(text, val_fraction))
    if val_paths:  # ordinals of the validation documents count in val_inputs
        consume(val_paths, lambda text: True)
    pages.finish()
    train.flush()
    val.flush()
    if train.tokens == 0:
        raise DataError(f"{train_paths[0]}: no training text (0 documents)")
    meta = {
        "version": CACHE_VERSION, "dtype": np.dtype(dtype).name,
        "tokenizer": tokenizer.fingerprint(),
        "vocab_size": tokenizer.vocab_size, "eos_id": tokenizer.eos_id, "text_field": text_field,
        "val_fraction": val_fraction, "inputs": train_paths, "val_inputs": val_paths,
        "train": {"docs": train.docs, "tokens": train.tokens, "shards": train.shards},
        "val": {"docs": val.docs, "tokens": val.tokens, "shards": val.shards},
    }
    with open(os.path.join(tmp, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())


def cache_names(cache: str) -> set[str]:
    """The names the same data had: this cache's, and those the same inputs had under every
    earlier CACHE_VERSION (a run resumed after the cache was rebuilt has the same data)."""
    names = {os.path.basename(cache)}
    with contextlib.suppress(OSError, ValueError, KeyError):
        m = read_meta(cache)
        names |= {cache_key(m["inputs"], m["val_inputs"], m["tokenizer"], m["text_field"],
                            m["val_fraction"], version=v) for v in range(1, CACHE_VERSION)}
    return names


def read_meta(cache_dir: str) -> dict:
    with open(os.path.join(cache_dir, "meta.json")) as f:
        return json.load(f)


@dataclass
class Windows:
    """All (seq_len + 1)-token windows of one split, over its memory-mapped shards."""

    shards: list[np.ndarray]
    per_shard: list[int]   # windows in each shard
    seq_len: int
    paths: list[str] = field(default_factory=list)   # each shard's file
    inputs: list[str] = field(default_factory=list)  # the files its documents came from

    @classmethod
    def open(cls, cache_dir: str, split: str, seq_len: int) -> Windows:
        meta = read_meta(cache_dir)
        shards, per, paths = [], [], []
        for s in meta[split]["shards"]:
            path = os.path.join(cache_dir, s["file"])
            arr = np.memmap(path, dtype=meta["dtype"], mode="r")
            n = (len(arr) - 1) // seq_len  # windows overlap by one token (the last target)
            if n > 0:
                shards.append(arr)
                per.append(n)
                paths.append(path)
        inputs = meta["val_inputs"] if split == "val" and meta["val_inputs"] else meta["inputs"]
        return cls(shards, per, seq_len, paths, inputs)

    def __len__(self) -> int:
        return self._n

    def __post_init__(self):
        self._starts = np.cumsum([0, *self.per_shard])  # first window of each shard
        self._n = int(self._starts[-1])  # len(): asked twice per window read
        self._docs: dict[int, tuple] = {}  # shard -> its document rows and ids (documents)

    def get(self, i: int) -> np.ndarray:
        """Window i: (seq_len + 1,) token ids."""
        if not 0 <= i < len(self):
            raise IndexError(i)
        k, start = self._where(i)
        return self.shards[k][start:start + self.seq_len + 1]

    def _where(self, i: int) -> tuple[int, int]:
        """(shard, first token) of window i."""
        k = int(np.searchsorted(self._starts, i, side="right")) - 1  # the shard holding i
        return k, (i - int(self._starts[k])) * self.seq_len

    def _index(self, k: int):
        """Shard k's document rows (memory-mapped) and ids, read once (the cache is the
        small-data path: its ids fit in memory)."""
        if k not in self._docs:
            path = self.paths[k]
            if not os.path.exists(path + ".docs"):
                raise DataError(f"{os.path.dirname(path)}: a token cache of version 1 keeps no "
                                "document boundaries; train again with this llmtk (it builds "
                                "a version 2 cache) or on a dataset of `llmtk train tokenize`")
            with open(path + ".ids", "rb") as f:
                ids = f.read().split(b"\n")
            self._docs[k] = (np.memmap(path + ".docs", dtype=np.uint64, mode="r")
                             .reshape(-1, 2), ids)
        return self._docs[k]

    def documents(self, i: int) -> list[dict]:
        """The documents window i's tokens come from: id, file, file_ordinal, record and
        tokens, the [first, last) span of the document's tokens in the window (EOS counted
        as its last token)."""
        if not 0 <= i < len(self):
            raise IndexError(i)
        k, lo = self._where(i)
        index, ids = self._index(k)
        return documents_in(index, lo, lo + self.seq_len + 1,
                            lambda d: orjson.loads(ids[d]) if ids[d] else None, self.inputs)


def documents_in(index, lo: int, hi: int, record_id, files) -> list[dict]:
    """The documents whose tokens overlap tokens [lo, hi) of a stream, from its (D, 2)
    document rows (end offset, doc key): id (record_id(d)), file (files[file ordinal]),
    file_ordinal, record and tokens, the [first, last) span of the document's tokens taken
    (EOS counted as its last token). Shared by the cache's shards and a dataset's parts."""
    ends, out = index[:, 0], []
    d = int(np.searchsorted(ends, lo, side="right"))
    while d < len(ends) and (start := int(ends[d - 1]) if d else 0) < hi:
        key = int(index[d, 1])
        ordinal = key >> RECORD_BITS
        out.append({"id": record_id(d), "file": files[ordinal], "file_ordinal": ordinal,
                    "record": key & RECORD_MASK,
                    "tokens": [max(lo, start) - start, min(hi, int(ends[d])) - start]})
        d += 1
    return out


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
