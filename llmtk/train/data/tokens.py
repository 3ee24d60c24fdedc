"""Token-shard datasets: `llmtk train tokenize` writes them, `llmtk train --data DIR` reads them.

A dataset is a directory that one or many tasks write into:

    DIR/meta.json                   what every task agrees on: tokenizer fingerprint,
                                    vocabulary, dtype, EOS policy, text field, the
                                    whole input list and the task count N
    DIR/part-KKKKK-of-NNNNN/        task K's own files (a contiguous run of the inputs):
        tokens.bin                  token ids, EOS after every document (uint16 when the
                                    vocabulary fits, else uint32), raw, memory-mappable
        docs.bin                    (D, 2) uint64 per document: the token offset where it
                                    ends (EOS included) and its identity, file ordinal
                                    << 40 | record ordinal (llmtk.io.shard.doc_key)
        ids.bin, ids.end            the `id` field of each document as JSON (empty when it
                                    has none), and the (D,) uint64 byte offsets where each ends
        manifest.json               the task's files, counts and the tokens' xxh64
    DIR/part-KKKKK-of-NNNNN.done    written after the part directory is in place

A task writes into `.tmp-part-K-of-N-HOST-PID/` and renames it when complete, so a
killed task leaves nothing a reader takes (its temporary directory is removed by the
next try of that task on that host: `sweep`). Memory of a task: one batch of documents
and its tokens (BATCH_BYTES of text), whatever the size of its files: every array is
appended to its file as the batch is done.

The dataset's token stream is the parts' streams in K order; since task K owns the
K-th contiguous run of the sorted inputs, it is the same stream, byte for byte, that one
task writes for all the inputs. Training windows are cut from that one stream (`Windows`),
so an N-task dataset trains exactly as a 1-task one. The in-process cache
(llmtk.train.data.cache) is made of one-task datasets written by the same `PartWriter`.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
import xxhash

from llmtk.errors import AlreadyDone, DataError, UsageError
from llmtk.io import write_json_atomically
from llmtk.io.atomic import atomic_dir, pid_alive
from llmtk.io.shard import RECORD_BITS, RECORD_MASK
from llmtk.train.data.webpages import WebPageCheck

if TYPE_CHECKING:
    import numpy as np

    from llmtk.io import StreamRun

KIND = "llmtk.tokens"
VERSION = 1
EOS_POLICY = "after-each-document"
BATCH_BYTES = 1 << 20  # text per encode batch: what bounds a task's memory (with its tokens)
BATCH_DOCS = 1024


def part_name(k: int, n: int) -> str:
    return f"part-{k:05d}-of-{n:05d}"


def dtype_for(vocab_size: int) -> str:
    return "uint16" if vocab_size <= 65536 else "uint32"


def is_dataset(path: str) -> bool:
    """A directory written by `llmtk train tokenize` (its meta.json names the kind)."""
    try:
        with open(os.path.join(path, "meta.json"), "rb") as f:
            return orjson.loads(f.read()).get("kind") == KIND
    except (OSError, orjson.JSONDecodeError, AttributeError):
        return False


# -- writing: one task --------------------------------------------------------------------

def dataset_meta(tok, text_field: str, n: int, files: list[str], **more) -> dict:
    """DIR/meta.json of a dataset of n tasks over `files` (`more`: fields of its own, as
    the cache's)."""
    return {"kind": KIND, "version": VERSION, "tokenizer": tok.fingerprint(),
            "tokenizer_name": getattr(tok, "path", tok.name), "vocab_size": tok.vocab_size,
            "eos_id": tok.eos_id, "eos": EOS_POLICY, "dtype": dtype_for(tok.vocab_size),
            "text_field": text_field, "tasks": n, "files": files, **more}


def _agree_meta(directory: str, meta: dict) -> None:
    """Every task writes the same meta.json; a task with other settings is refused."""
    path = os.path.join(directory, "meta.json")
    if os.path.exists(path):
        saved = read_meta(directory)
        if saved != meta:
            diff = sorted(k for k in meta if saved.get(k) != meta[k])
            raise UsageError(f"-o: {directory} holds a dataset with other {', '.join(diff)} "
                             "(use a new folder, or the same inputs and settings)")
        return
    write_json_atomically(path, meta)


class PartWriter:
    """Appends task k of n's tokens, document index and ids to the files of its part
    directory, batch by batch; `close` writes its manifest. The one writer of token files:
    `llmtk train tokenize`'s tasks and the in-process cache."""

    def __init__(self, directory: str, k: int, n: int, meta: dict):
        import numpy as np

        self.dir, self.k, self.n, self.meta = directory, k, n, meta
        self.dtype = np.dtype(meta["dtype"])
        self.tokens = self.docs = self.id_bytes = 0
        self.hash = xxhash.xxh64()
        self._files = {name: open(os.path.join(directory, name), "wb")
                       for name in ("tokens.bin", "docs.bin", "ids.bin", "ids.end")}

    def add(self, ids_per_doc: list, keys: np.ndarray, record_ids: list, eos: int) -> None:
        import numpy as np

        lengths = np.fromiter((len(t) + 1 for t in ids_per_doc), np.int64, len(ids_per_doc))
        flat = np.empty(int(lengths.sum()), dtype=self.dtype)
        ends = np.cumsum(lengths)
        starts = ends - lengths
        for s, t in zip(starts.tolist(), ids_per_doc, strict=True):
            flat[s:s + len(t)] = t
        flat[ends - 1] = eos
        data = flat.tobytes()
        self._files["tokens.bin"].write(data)
        self.hash.update(data)
        index = np.empty((len(keys), 2), dtype=np.uint64)
        index[:, 0] = ends + self.tokens
        index[:, 1] = keys
        self._files["docs.bin"].write(index.tobytes())
        blobs = [b"" if i is None else orjson.dumps(i) for i in record_ids]
        self._files["ids.bin"].write(b"".join(blobs))
        id_ends = np.cumsum(np.fromiter(map(len, blobs), np.int64, len(blobs))) + self.id_bytes
        self._files["ids.end"].write(id_ends.astype(np.uint64).tobytes())
        self.tokens += len(flat)
        self.docs += len(keys)
        self.id_bytes += sum(map(len, blobs))

    def close(self, files: list[dict]) -> dict:
        """Flush the files to disk and write manifest.json (`files`: the task's inputs,
        each {ordinal, path, records}); return the manifest."""
        for f in self._files.values():
            f.flush()
            os.fsync(f.fileno())
            f.close()
        manifest = {
            "part": part_name(self.k, self.n), "task": self.k, "tasks": self.n,
            "tokenizer": self.meta["tokenizer"], "dtype": self.meta["dtype"], "eos": EOS_POLICY,
            "docs": self.docs, "tokens": self.tokens, "xxh64": self.hash.hexdigest(),
            "files": files,
        }
        write_json_atomically(os.path.join(self.dir, "manifest.json"), manifest)
        return manifest


def mark_done(part_dir: str, manifest: dict) -> None:
    """PART.done beside a part directory that is in place: readers take the part."""
    write_json_atomically(part_dir + ".done", {"docs": manifest["docs"],
                                               "tokens": manifest["tokens"]})


def tokenize_task(run: StreamRun, tok, out_dir: str, allow_html: bool = False) -> dict:
    """Task K of N (run.opts.shard): tokenize its own files into OUT/part-K-of-N/. Files
    that are web pages are refused (llmtk.train.data.webpages) unless allow_html."""
    import numpy as np

    from llmtk.text.tokenizer import encode_batch

    if "-" in run.all_paths:
        raise UsageError("train tokenize: give files, directories or globs, not stdin (a "
                         "document's identity is its file and record)")
    k, n = run.opts.shard or (0, 1)
    os.makedirs(out_dir, exist_ok=True)
    name = part_name(k, n)
    final, done = os.path.join(out_dir, name), os.path.join(out_dir, name + ".done")
    if os.path.exists(done) and os.path.isdir(final):
        raise AlreadyDone(f"{final} is done; skipping this task")
    meta = dataset_meta(tok, run.opts.text_field, n, run.all_paths)
    _agree_meta(out_dir, meta)
    sweep(out_dir, name)
    # Renamed into place only when complete (replacing a part a task killed after its
    # rename wrote, before its marker); removed on any failure.
    with atomic_dir(final, temp_dir(out_dir, name), replace=True) as tmp:
        writer = PartWriter(tmp, k, n, meta)
        batch: list = []
        size = 0

        def flush() -> None:
            keys = run.doc_keys(np.fromiter((d.index for d in batch), np.int64, len(batch)))
            writer.add(encode_batch(tok, [d.text for d in batch]), keys, [d.id for d in batch],
                       tok.eos_id)
            run.summary.records_out += len(batch)
            batch.clear()

        pages = WebPageCheck(allow_html)
        for doc in run.docs():
            pages.see(doc)
            batch.append(doc)
            size += len(doc.text)
            if size >= BATCH_BYTES or len(batch) >= BATCH_DOCS:
                flush()
                size = 0
        pages.finish()
        if batch:
            flush()
        starts = run.file_starts
        manifest = writer.close([{"ordinal": o, "path": run.all_paths[o],
                                  "records": starts[i + 1] - starts[i]}
                                 for i, o in enumerate(run.file_ordinals)])
    run.count("tokens", writer.tokens)
    mark_done(final, manifest)
    return manifest


def temp_dir(directory: str, name: str) -> str:
    """Where DIRECTORY/NAME is written before its rename: `.tmp-NAME-HOST-PID` beside it
    (the host, as a shared filesystem may hold the leftovers of several)."""
    return os.path.join(directory, f".tmp-{name}-{socket.gethostname()}-{os.getpid()}")


def sweep(directory: str, name: str | None = None) -> list[str]:
    """Remove the temporary directories (`temp_dir`) of NAME (any name: None) that dead
    processes of this host left in `directory` (a SIGKILL mid-write); another host's, or
    a live process's, are left alone. Returns the names removed."""
    ours = re.compile(r"\.tmp-(.+)-" + re.escape(socket.gethostname()) + r"-(\d+)")
    removed = []
    for entry in os.listdir(directory):
        m = ours.fullmatch(entry)
        if m and name in (None, m[1]) and not pid_alive(int(m[2])):
            shutil.rmtree(os.path.join(directory, entry), ignore_errors=True)
            removed.append(entry)
    return removed


# -- reading ------------------------------------------------------------------------------

def read_meta(directory: str) -> dict:
    path = os.path.join(directory, "meta.json")
    try:
        with open(path, "rb") as f:
            meta = orjson.loads(f.read())
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e.strerror}") from None
    except orjson.JSONDecodeError as e:
        raise DataError(f"{path}: corrupt ({e})") from None
    if not isinstance(meta, dict) or meta.get("kind") != KIND:
        raise DataError(f"{path}: not a token dataset (written by `llmtk train tokenize`)")
    if meta.get("version") != VERSION:
        raise DataError(f"{path}: token dataset version {meta.get('version')}, this llmtk "
                        f"reads {VERSION}")
    return meta


@dataclass
class Part:
    directory: str
    manifest: dict
    tokens: Any  # (tokens,) memory map

    def index(self):
        """(D, 2) uint64 memory map: each document's end offset and its identity."""
        import numpy as np

        path = os.path.join(self.directory, "docs.bin")
        return np.memmap(path, dtype=np.uint64, mode="r").reshape(-1, 2) \
            if self.manifest["docs"] else np.zeros((0, 2), np.uint64)

    def record_id(self, d: int):
        """The `id` field of this part's document d (None when it had none)."""
        import numpy as np

        ends = np.memmap(os.path.join(self.directory, "ids.end"), dtype=np.uint64, mode="r")
        start, end = (int(ends[d - 1]) if d else 0), int(ends[d])
        if start == end:
            return None
        with open(os.path.join(self.directory, "ids.bin"), "rb") as f:
            f.seek(start)
            return orjson.loads(f.read(end - start))


@dataclass
class TokenDataset:
    """A token-shard dataset opened for reading: its meta and every part, memory-mapped.

    Opening reads meta.json and one manifest per part, and checks each part's file sizes
    against its manifest: its cost grows with the number of tasks, not of documents."""

    directory: str
    meta: dict
    parts: list[Part]

    @classmethod
    def open(cls, directory: str) -> TokenDataset:
        import numpy as np

        meta = read_meta(directory)
        n, parts = meta["tasks"], []
        itemsize = np.dtype(meta["dtype"]).itemsize
        missing = [k for k in range(n) if not os.path.exists(
            os.path.join(directory, part_name(k, n) + ".done"))]
        if missing:
            shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
            raise DataError(f"{directory}: token dataset lacks finished task(s) {shown} of {n} "
                            "(run them: a rerun of the array skips the finished ones)")
        for k in range(n):
            where = os.path.join(directory, part_name(k, n))
            try:
                with open(os.path.join(where, "manifest.json"), "rb") as f:
                    manifest = orjson.loads(f.read())
                sizes = {name: os.path.getsize(os.path.join(where, name))
                         for name in ("tokens.bin", "docs.bin", "ids.end")}
            except (OSError, orjson.JSONDecodeError) as e:
                raise DataError(f"{where}: missing or corrupt part ({e})") from None
            want = {"tokens.bin": manifest["tokens"] * itemsize,
                    "docs.bin": manifest["docs"] * 16, "ids.end": manifest["docs"] * 8}
            for name, size in want.items():
                if sizes[name] != size:
                    raise DataError(f"{os.path.join(where, name)}: {sizes[name]} bytes, its "
                                    f"manifest says {size} (a corrupt or truncated part)")
            tokens = np.memmap(os.path.join(where, "tokens.bin"), dtype=meta["dtype"],
                               mode="r") if manifest["tokens"] else np.zeros(0, meta["dtype"])
            parts.append(Part(where, manifest, tokens))
        return cls(directory, meta, parts)

    @property
    def tokens(self) -> int:
        return sum(p.manifest["tokens"] for p in self.parts)

    @property
    def docs(self) -> int:
        return sum(p.manifest["docs"] for p in self.parts)

    def check_tokenizer(self, tok) -> None:
        if self.meta["tokenizer"] != tok.fingerprint():
            raise DataError(
                f"{self.directory}: tokenized with {self.meta['tokenizer_name']} "
                f"({self.meta['tokenizer']}), this run's tokenizer is "
                f"{getattr(tok, 'path', tok.name)} ({tok.fingerprint()}): pass the same "
                "--tokenizer, or tokenize again")

    def windows(self, seq_len: int) -> Windows:
        return Windows([p.tokens for p in self.parts if len(p.tokens)], seq_len)

    def documents(self, start: int, stop: int) -> list[dict]:
        """The documents that tokens [start, stop) of the dataset's stream come from: each
        with its file, record, id and the span of its tokens taken ([first, last) offsets
        within the document, EOS counted as its last token)."""
        import numpy as np

        bases = self._bases()
        out, k = [], max(0, int(np.searchsorted(bases, start, side="right")) - 1)
        while k < len(self.parts) and bases[k] < stop:  # the parts [start, stop) overlaps
            part, base, end = self.parts[k], int(bases[k]), int(bases[k + 1])
            if max(start, base) < min(stop, end):
                files = {f["ordinal"]: f["path"] for f in part.manifest["files"]}
                out += documents_in(part.index(), max(start, base) - base,
                                    min(stop, end) - base, part.record_id, files)
            k += 1
        return out

    def _bases(self):
        """(parts + 1,) the stream offset where each part starts, and the total."""
        import numpy as np

        if getattr(self, "_starts", None) is None:
            self._starts = np.cumsum([0, *(int(p.manifest["tokens"]) for p in self.parts)])
        return self._starts


def documents_in(index, lo: int, hi: int, record_id, files) -> list[dict]:
    """The documents whose tokens overlap tokens [lo, hi) of a part, from its (D, 2)
    document rows (end offset, doc key): id (record_id(d)), file (files[file ordinal]),
    file_ordinal, record and tokens, the [first, last) span of the document's tokens taken
    (EOS counted as its last token)."""
    import numpy as np

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


class Windows:
    """All (seq_len + 1)-token windows of one token stream held in several memory maps
    (a dataset's parts, in order): window i is tokens [i * seq_len, i * seq_len + seq_len
    + 1), which may straddle two parts. What llmtk.train.data.cache.Sampler draws from."""

    def __init__(self, arrays: list, seq_len: int):
        import numpy as np

        self.arrays, self.seq_len = arrays, seq_len
        self._starts = np.cumsum([0, *(len(a) for a in arrays)])  # first token of each part
        total = int(self._starts[-1])
        self._n = max(0, (total - 1) // seq_len)

    def __len__(self) -> int:
        return self._n

    def token_range(self, i: int) -> tuple[int, int]:
        return i * self.seq_len, i * self.seq_len + self.seq_len + 1

    def get(self, i: int):
        """Window i: (seq_len + 1,) token ids."""
        import numpy as np

        if not 0 <= i < self._n:
            raise IndexError(i)
        start, stop = self.token_range(i)
        k = int(np.searchsorted(self._starts, start, side="right")) - 1
        lo = start - int(self._starts[k])
        piece = self.arrays[k][lo:lo + (stop - start)]
        if len(piece) == stop - start:
            return piece
        pieces = [piece]
        got = len(piece)
        while got < stop - start:  # the window runs into the next part(s)
            k += 1
            more = self.arrays[k][:stop - start - got]
            pieces.append(more)
            got += len(more)
        return np.concatenate(pieces)

