"""Crash-safe checkpoints (torchtitan's discipline, llm.c's exactness).

Layout: OUT/checkpoints/step-NNNNNNN/ holding
  model.pt      full (unsharded) model state_dict, CPU tensors
  optim.pt      optimizer state (same keys as the model's parameters)
  state.json    step, tokens, data position, configs, world size, schedule state
  rng-RRRRR.pt  every RNG state of rank R (Python, NumPy, torch CPU, CUDA)
  COMPLETE      written last
Writing goes to .tmp-step-NNNNNNN/, every file fsynced, COMPLETE last, then the
directory is renamed into place and `latest` (a one-line text file naming it)
is replaced atomically. A crash at any point leaves the previous checkpoint
untouched and still named by `latest`. Loading uses torch.load(weights_only=True):
no arbitrary pickle is ever executed.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import time
from collections.abc import Callable

import numpy as np
import torch

STEP_DIR = re.compile(r"^step-(\d{7,})$")


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _save_torch(obj, path: str) -> None:
    with open(path, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def _write_text(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


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


def step_dirs(root: str) -> list[tuple[int, str]]:
    """(step, path) of every complete checkpoint under root, oldest first."""
    if not os.path.isdir(root):
        return []
    found = []
    for name in os.listdir(root):
        m = STEP_DIR.match(name)
        path = os.path.join(root, name)
        if m and os.path.exists(os.path.join(path, "COMPLETE")):
            found.append((int(m.group(1)), path))
    return sorted(found)


def find_latest(root: str) -> str | None:
    """The newest complete checkpoint: the one `latest` names if it is complete, else the
    highest complete step directory (so a lost `latest` file costs nothing)."""
    latest = os.path.join(root, "latest")
    if os.path.exists(latest):
        with open(latest) as f:
            name = f.read().strip()
        path = os.path.join(root, name)
        if STEP_DIR.match(name) and os.path.exists(os.path.join(path, "COMPLETE")):
            newer = [p for s, p in step_dirs(root) if s > int(STEP_DIR.match(name).group(1))]
            return newer[-1] if newer else path
    found = step_dirs(root)
    return found[-1][1] if found else None


def resolve(path: str) -> str | None:
    """A checkpoint directory from a step dir, a checkpoints dir or a run dir."""
    if os.path.exists(os.path.join(path, "COMPLETE")):
        return path
    for root in (path, os.path.join(path, "checkpoints")):
        found = find_latest(root)
        if found:
            return found
    return None


def save(root: str, step: int, *, rank: int, barrier: Callable[[], None], model_state: dict | None,
         optim_state: dict | None, state: dict, keep: int,
         before_complete: Callable[[], None] | None = None) -> tuple[str, float]:
    """Write checkpoint `step` (collective: every rank calls it). Rank 0 writes model,
    optimizer and state; every rank writes its RNG states. Returns (path, seconds)."""
    t0 = time.time()
    name = f"step-{step:07d}"
    tmp = os.path.join(root, f".tmp-{name}")
    final = os.path.join(root, name)
    if rank == 0:
        os.makedirs(root, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
    barrier()
    if rank == 0:
        _save_torch(model_state, os.path.join(tmp, "model.pt"))
        _save_torch(optim_state, os.path.join(tmp, "optim.pt"))
        _write_text(os.path.join(tmp, "state.json"), json.dumps(state, indent=1, sort_keys=True))
    _save_torch(rng_state(), os.path.join(tmp, f"rng-{rank:05d}.pt"))
    barrier()
    if rank == 0:
        if before_complete is not None:
            before_complete()  # fault injection for tests
        _write_text(os.path.join(tmp, "COMPLETE"), f"{step}\n")
        _fsync_dir(tmp)
        if os.path.exists(final):  # the same step saved again after a resume
            shutil.rmtree(final)
        os.rename(tmp, final)
        _fsync_dir(root)
        _write_text(os.path.join(root, "latest.tmp"), name + "\n")
        os.replace(os.path.join(root, "latest.tmp"), os.path.join(root, "latest"))
        _fsync_dir(root)
        prune(root, keep)
    barrier()
    return final, time.time() - t0


def prune(root: str, keep: int) -> None:
    """Keep the newest `keep` complete checkpoints; drop leftovers of interrupted writes."""
    for name in os.listdir(root):
        if name.startswith(".tmp-step-"):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    if keep > 0:
        for _, path in step_dirs(root)[:-keep]:
            shutil.rmtree(path, ignore_errors=True)


def load_state(path: str) -> dict:
    with open(os.path.join(path, "state.json")) as f:
        return json.load(f)


def load_tensors(path: str, name: str):
    return torch.load(os.path.join(path, name), map_location="cpu", weights_only=True)
