"""The checkpoint format: crash-safe, verified (torchtitan's discipline, llm.c's exactness).

What a checkpoint holds and how it is sealed, verified, found and read; the Checkpointer
(llmtk.train.checkpoint.checkpointer) is the one writer and loader that uses these pieces.

Layout: OUT/checkpoints/step-NNNNNNN/ holding
  model.pt      full (unsharded) model state_dict, CPU tensors      } "full" format
  optim.pt      optimizer state (same keys as the model's parameters) }
  dcp/          torch.distributed.checkpoint files, one part per rank  "dcp" format (FSDP2)
  state.json    step, tokens, data position, configs, world size, schedule state
  rng-RRRRR.pt  every RNG state of rank R (Python, NumPy, torch CPU, CUDA)
  MANIFEST.json size and xxh64 of every file above
  COMPLETE      written last: the step, the xxh64 of MANIFEST.json and a checksum of the
                line itself, so one changed byte in any file names that file
Writing goes to .tmp-step-NNNNNNN/, every file fsynced, MANIFEST then COMPLETE last, then
the directory is renamed into place and `latest` (a one-line text file naming it) is
replaced atomically. A crash at any point leaves the previous checkpoint untouched and
still named by `latest`.

Resume takes the newest complete checkpoint that *verifies* (every file of the manifest
present with its size and checksum, state.json readable); one that does not is renamed
to step-NNNNNNN.corrupt-K (never deleted) with a one-line warning, and the next older one
is tried. Loading uses torch.load(weights_only=True): no pickled code is ever executed.
"""

from __future__ import annotations

import errno
import json
import os
import random
import re
import shutil
from collections.abc import Callable

import numpy as np
import torch
import xxhash

from llmtk.errors import LlmtkError
from llmtk.io.atomic import publish_dir, set_aside

STEP_DIR = re.compile(r"^step-(\d{7,})$")
# The row order of every wqkv (llmtk.train.model.gpt.group_qkv), recorded in state.json and in
# `export` files as "qkv_layout". Weights without it were written in the older order (all
# q rows, then all k, then all v) and are converted as they are read (upgrade_qkv).
QKV_LAYOUT = "kv-grouped"
MANIFEST = "MANIFEST.json"
COMPLETE = "COMPLETE"


class CheckpointError(LlmtkError):
    """A checkpoint file cannot be written or read; the message names the file. A failed
    write also carries the file (`path`) and the OS error number (`errno`, or None)."""

    def __init__(self, message: str, path: str | None = None, errno: int | None = None):
        super().__init__(message)
        self.path, self.errno = path, errno


# ---------------------------------------------------------------- writing


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path: str, write: Callable) -> None:
    """Create `path`, call write(f), flush and fsync; a full disk is one clear line."""
    try:
        with open(path, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise CheckpointError(f"no space left writing {path}", path, e.errno) from None
        raise CheckpointError(f"cannot write {path}: {e.strerror or e}", path, e.errno) \
            from None
    except RuntimeError as e:  # torch.save wraps the OSError of its zip writer
        if "No space left" in str(e) or "file write failed" in str(e):
            raise CheckpointError(f"no space left writing {path}", path, errno.ENOSPC) \
                from None
        raise


def save_torch(obj, path: str) -> None:
    write_file(path, lambda f: torch.save(obj, f))


def write_text(path: str, text: str) -> None:
    write_file(path, lambda f: f.write(text.encode()))


def file_digest(path: str) -> dict:
    h = xxhash.xxh64()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return {"size": os.path.getsize(path), "xxh64": h.hexdigest()}


def write_manifest(directory: str) -> None:
    """Record size and xxh64 of every file under `directory` (sub-directories too). The
    files are read back (from the page cache, just written): 2.3-2.8 GB/s, 8-10% of the
    wall time torch.save and fsync took for the same bytes (benchmarks/checkpoint_manifest.py,
    docs/train.md)."""
    files = {}
    for base, _dirs, names in os.walk(directory):
        for name in names:
            if name in (MANIFEST, COMPLETE):
                continue
            full = os.path.join(base, name)
            files[os.path.relpath(full, directory)] = file_digest(full)
    write_text(os.path.join(directory, MANIFEST),
               json.dumps({"version": 1, "files": files}, indent=1, sort_keys=True) + "\n")


def rng_state() -> dict:
    """Every RNG this process uses, as tensors and plain values (weights_only-loadable)."""
    py_version, py_internal, py_gauss = random.getstate()
    np_state = np.random.get_state()
    state = {
        "python_version": py_version,
        "python_state": torch.tensor(py_internal, dtype=torch.int64),
        "python_gauss": py_gauss,
        "numpy_keys": torch.from_numpy(np_state[1].astype(np.int64)),
        "numpy_pos": int(np_state[2]),
        "numpy_has_gauss": int(np_state[3]),
        "numpy_gauss": float(np_state[4]),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate((state["python_version"], tuple(state["python_state"].tolist()),
                     state["python_gauss"]))
    np.random.set_state(("MT19937", state["numpy_keys"].numpy().astype(np.uint32),
                         state["numpy_pos"], state["numpy_has_gauss"], state["numpy_gauss"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def tmp_dir(root: str, step: int) -> str:
    return os.path.join(root, f".tmp-step-{step:07d}")


def begin(root: str, step: int) -> str:
    """Rank 0: a fresh temporary directory for checkpoint `step`."""
    tmp = tmp_dir(root, step)
    try:
        os.makedirs(root, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
    except OSError as e:  # a checkpoints folder the run may not write in, a full disk
        raise CheckpointError(f"cannot create {e.filename or tmp}: {e.strerror or e}",
                              e.filename or tmp, e.errno) from None
    return tmp


def write_rank_files(tmp: str, rank: int, state: dict | None) -> None:
    """Every rank: its RNG states; rank 0 also state.json."""
    save_torch(rng_state(), os.path.join(tmp, f"rng-{rank:05d}.pt"))
    if state is not None:
        write_text(os.path.join(tmp, "state.json"), json.dumps(state, indent=1, sort_keys=True))


def commit(root: str, step: int, keep: int,
           before_complete: Callable[[], None] | None = None) -> str:
    """Rank 0, once every rank's files are written: manifest, COMPLETE, rename, `latest`,
    prune. Returns the final directory."""
    name = f"step-{step:07d}"
    tmp, final = tmp_dir(root, step), os.path.join(root, name)
    try:
        write_manifest(tmp)
        if before_complete is not None:
            before_complete()
        write_text(os.path.join(tmp, COMPLETE), complete_line(step, tmp))
        _fsync_dir(tmp)
        publish_dir(tmp, final)  # the same step saved again after a resume: replaced
        _fsync_dir(root)
    except OSError as e:  # reading the files back, the rename (CheckpointError: writing)
        raise CheckpointError(f"cannot seal {tmp}: {e.strerror or e}", e.filename or tmp,
                              e.errno) from None
    set_latest(root, name)
    _fsync_dir(root)
    prune(root, keep)
    return final


def complete_line(step: int, directory: str) -> str:
    """COMPLETE's text: `STEP MANIFEST_XXH64 CHECK`, CHECK the xxh64 of what precedes it."""
    head = f"{step} {file_digest(os.path.join(directory, MANIFEST))['xxh64']}"
    return f"{head} {xxhash.xxh64(head.encode()).hexdigest()}\n"


def check_complete(path: str) -> tuple[str | None, str | None]:
    """(why COMPLETE is damaged or None, the xxh64 it records for MANIFEST.json or None).
    A bare `STEP` line is an older checkpoint's marker: nothing recorded to compare."""
    try:
        with open(os.path.join(path, COMPLETE), "rb") as f:
            text = f.read()
    except OSError as e:
        return f"{COMPLETE} is unreadable ({e.strerror or e})", None
    if re.fullmatch(rb"\d+\n", text):
        return None, None
    parts = text.split(b" ")
    if len(parts) == 3 and text.endswith(b"\n"):
        head = b" ".join(parts[:2])
        if xxhash.xxh64(head).hexdigest().encode() == parts[2].rstrip(b"\n"):
            return None, parts[1].decode()
    return f"{COMPLETE} does not match its own checksum", None


def seal(path: str, step: int) -> None:
    """Rewrite the manifest and COMPLETE of checkpoint `path` after its files were changed
    on purpose (tests, repairs): it then verifies with the files as they are now."""
    write_manifest(path)
    write_text(os.path.join(path, COMPLETE), complete_line(step, path))


def set_latest(root: str, name: str) -> None:
    """Point `latest` at checkpoint directory `name`, atomically."""
    from llmtk.io.atomic import atomic_file

    try:
        with atomic_file(os.path.join(root, "latest")) as f:
            f.write(f"{name}\n".encode())
    except LlmtkError as e:
        raise CheckpointError(str(e)) from None
    except OSError as e:  # the buffered write's flush on close (a full disk)
        raise CheckpointError(f"cannot write {root}/latest: {e.strerror or e}") from None


def prune(root: str, keep: int) -> None:
    """Keep the newest `keep` complete checkpoints; drop leftovers of interrupted writes."""
    for name in os.listdir(root):
        if name.startswith(".tmp-step-"):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    if keep > 0:
        for _, path in step_dirs(root)[:-keep]:
            shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------- finding and verifying


def step_dirs(root: str) -> list[tuple[int, str]]:
    """(step, path) of every checkpoint under root with a COMPLETE marker, oldest first."""
    if not os.path.isdir(root):
        return []
    found = []
    for name in os.listdir(root):
        m = STEP_DIR.match(name)
        path = os.path.join(root, name)
        if m and os.path.exists(os.path.join(path, COMPLETE)):
            found.append((int(m.group(1)), path))
    return sorted(found)


def verify(path: str) -> str | None:
    """None if the checkpoint at `path` is whole, else why not (one phrase naming a file)."""
    if not os.path.exists(os.path.join(path, COMPLETE)):
        return "no COMPLETE marker"
    damaged, manifest_xxh64 = check_complete(path)
    if damaged:
        return damaged
    manifest = os.path.join(path, MANIFEST)
    if manifest_xxh64 is not None and (
            not os.path.isfile(manifest) or file_digest(manifest)["xxh64"] != manifest_xxh64):
        return f"{MANIFEST} does not match its checksum (recorded in {COMPLETE})"
    try:
        with open(manifest) as f:
            files = json.load(f)["files"]
    except FileNotFoundError:
        files = None  # written before manifests existed: check what can be checked
    except (OSError, ValueError, KeyError, TypeError):
        return f"{MANIFEST} is unreadable"
    if files is not None:
        for rel, want in sorted(files.items()):
            full = os.path.join(path, rel)
            if not os.path.isfile(full):
                return f"{rel} is missing"
            size = os.path.getsize(full)
            if size != want["size"]:
                return f"{rel} has {size} bytes, {want['size']} were written"
            if file_digest(full)["xxh64"] != want["xxh64"]:
                return f"{rel} does not match its checksum"
    elif not (os.path.isfile(os.path.join(path, "model.pt"))
              or os.path.isdir(os.path.join(path, "dcp"))):
        return "model.pt is missing"
    try:
        load_state(path)
    except CheckpointError as e:
        return str(e).removeprefix(path + "/")
    return None


def move_aside(path: str) -> str:
    """Rename a bad checkpoint to PATH.corrupt-K (never delete: it may hold the only copy)."""
    return set_aside(path, "corrupt")


def find_latest(root: str, warn: Callable[[str], None] | None = None,
                repair: bool = False) -> str | None:
    """The newest checkpoint under root that verifies, or None.

    Newer complete directories than `latest` names win (a crash between the rename and
    the `latest` update costs nothing). With repair=True (rank 0 on resume) a checkpoint
    that fails verification is moved aside; `warn` gets one line per problem.
    """
    say = warn or (lambda _msg: None)
    latest = os.path.join(root, "latest")
    if os.path.exists(latest):
        with open(latest) as f:
            name = f.read().strip()
        if not (STEP_DIR.match(name) and os.path.isdir(os.path.join(root, name))):
            say(f"warning: {latest} names {name!r}, which is not a checkpoint directory; "
                "using the newest one that verifies")
    for _step, path in reversed(step_dirs(root)):
        problem = verify(path)
        if problem is None:
            return path
        if repair:
            aside = move_aside(path)
            say(f"warning: checkpoint {path} is corrupt ({problem}); moved it to {aside} "
                "and trying the previous one")
        else:
            say(f"warning: checkpoint {path} is corrupt ({problem}); skipping it")
    return None


def resolve(path: str, warn: Callable[[str], None] | None = None) -> str | None:
    """A checkpoint directory from a step dir, a checkpoints dir or a run dir."""
    if os.path.exists(os.path.join(path, COMPLETE)):
        problem = verify(path)
        if problem is not None:
            raise CheckpointError(f"checkpoint {path} is corrupt ({problem})")
        return path
    for root in (path, os.path.join(path, "checkpoints")):
        found = find_latest(root, warn)
        if found:
            return found
    return None


# ---------------------------------------------------------------- reading


def load_state(path: str) -> dict:
    file = os.path.join(path, "state.json")
    try:
        with open(file) as f:
            state = json.load(f)
    except FileNotFoundError:
        raise CheckpointError(f"{file} is missing") from None
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{file} is not valid JSON ({e})") from None
    if not isinstance(state, dict) or not isinstance(state.get("step"), int):
        raise CheckpointError(f"{file} has no step number")
    return state


def load_tensors(path: str, name: str):
    """torch.load of a checkpoint file, weights only; every failure is one line."""
    import pickle

    file = os.path.join(path, name)
    try:
        return torch.load(file, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{file} is missing") from None
    except pickle.UnpicklingError as e:
        if "Weights only load failed" in str(e):
            raise CheckpointError(f"refused to load {file}: it contains code objects; "
                                  "llmtk loads weights only") from None
        raise CheckpointError(f"{file} is not a valid checkpoint file ({_first_line(e)})") \
            from None
    except (RuntimeError, EOFError, OSError, ValueError) as e:
        raise CheckpointError(f"{file} is not a valid checkpoint file ({_first_line(e)})") \
            from None


def _first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:200]


def is_sharded(path: str) -> bool:
    return os.path.isdir(os.path.join(path, "dcp"))


def needs_qkv_upgrade(meta: dict) -> bool:
    """The weights of this state.json (or export header) hold wqkv in the older order."""
    return meta.get("qkv_layout") != QKV_LAYOUT


def upgrade_qkv(model_sd: dict, optim_sd: dict | None, model_config: dict) -> None:
    """Reorder, in place, the rows of every wqkv weight and bias, and of their optimizer
    moments, from the older [q; k; v] order to the grouped one (full state dicts)."""
    from llmtk.train.model.gpt import ModelConfig, group_qkv

    cfg = ModelConfig(**model_config)
    qkv = lambda k: k.endswith(("attn.wqkv.weight", "attn.wqkv.bias"))  # noqa: E731
    for k in [k for k in model_sd if qkv(k)]:
        model_sd[k] = group_qkv(model_sd[k], cfg)
    for k, moments in (optim_sd or {}).get("state", {}).items():
        if qkv(k):  # exp_avg, exp_avg_sq: shaped as the parameter; step: a scalar
            for name, t in moments.items():
                if isinstance(t, torch.Tensor) and t.dim() > 0:
                    moments[name] = group_qkv(t, cfg)


def load_full_state(path: str, with_optim: bool = True) -> tuple[dict, dict | None]:
    """(model state dict, optimizer state dict or None) as full CPU tensors in the current
    wqkv layout, from either format: model.pt/optim.pt, or the DCP shards consolidated in
    this process."""
    model_sd, optim_sd = _read_full_state(path, with_optim)
    meta = load_state(path)
    if needs_qkv_upgrade(meta):
        upgrade_qkv(model_sd, optim_sd, meta["model_config"])
    return model_sd, optim_sd


def _read_full_state(path: str, with_optim: bool) -> tuple[dict, dict | None]:
    if not is_sharded(path):
        return (load_tensors(path, "model.pt"),
                load_tensors(path, "optim.pt") if with_optim else None)
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    sd: dict = {}
    try:
        _load_state_dict(sd, storage_reader=FileSystemReader(os.path.join(path, "dcp")),
                         planner=_EmptyStateDictLoadPlanner(), no_dist=True)
    except Exception as e:  # DCP raises CheckpointException wrapping per-rank errors
        raise CheckpointError(f"{path}/dcp: cannot read the sharded checkpoint "
                              f"({_first_line(e)})") from None
    return sd["model"], (sd.get("optim") if with_optim else None)
