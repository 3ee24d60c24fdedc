"""The checkpointer: the one way a run's checkpoints are chosen, saved and loaded.

The trainer, `train export` (through llmtk.train.checkpoint.files's readers) and the tests all
go through here; the on-disk format (layout, manifest, verification, RNG states) is
llmtk.train.checkpoint.files's.

Saving is collective (every rank calls `save`):
  full  rank 0 writes the consolidated model and optimizer state, every rank its RNG;
  dcp   every rank writes its shards with torch.distributed.checkpoint, in a background
        thread unless asked to wait (the state is staged to host memory first, so the next
        update may change the weights); the write is sealed once every rank has finished.
A write that fails (a full disk, no permission) removes its temporary directory, so the
last complete checkpoint stays the newest thing on disk, and becomes a `checkpoint_failed`
event (the file, the OS error, the free space) and one line naming the file and the free
space. Events (rank 0, through `event(name, step, **fields)`): `checkpoint` with its
seconds and bytes, `checkpoint_failed`, `checkpoint_loaded` with its seconds, and with
verify_every N `checkpoint_verified` after every N-th checkpoint (its checksums read back).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable

from llmtk.errors import ConfigError, DataError
from llmtk.io.atomic import set_aside
from llmtk.train.checkpoint import files as C
from llmtk.train.runtime import CollectiveError, Dist, Faults


class Checkpointer:
    """Checkpoints of one run under `root` (OUT/checkpoints), for this process's rank."""

    def __init__(self, root: str, dist: Dist | None = None, *, fmt: str = "full",
                 keep: int = 0, faults: Faults | None = None,
                 say: Callable[[str], None] | None = None,
                 event: Callable[..., None] | None = None, verify_every: int = 0,
                 pause: Callable[[], contextlib.AbstractContextManager] | None = None):
        self.root, self.dist, self.fmt, self.keep = root, dist or Dist(), fmt, keep
        self.faults = faults or Faults()
        self.say = say or (lambda _msg: None)
        self.event = event or (lambda _name, _step, **_fields: None)  # rank 0's event log
        self.verify_every = verify_every    # read back every N-th checkpoint's checksums
        self.pause = pause or contextlib.nullcontext  # time not counted as training
        self.last_step = 0                  # the newest complete checkpoint of this run
        self.pending = None                 # (future, step, t0, blocking_s, reason): async
        self.committed = 0                  # checkpoints sealed by this process
        self.loaded: dict | None = None     # the last load's event fields (report_load)

    # ---------------------------------------------------------------- choosing
    def choose(self, resume: str) -> str | None:
        """Rank 0: the checkpoint to resume from for --resume (auto, never or a path),
        or None for a fresh start."""
        root = self.root
        if os.path.lexists(root) and not os.path.isdir(root):
            raise DataError(f"{root}: is not a directory; the run keeps its checkpoints "
                            f"there: move it away or choose another --out")
        if resume == "never" and os.path.isdir(root) and os.listdir(root):
            # A fresh start must not later auto-resume an earlier run's checkpoints.
            aside = set_aside(root, "old")
            self.say(f"--resume never: moved the earlier checkpoints to {aside}")
        os.makedirs(root, exist_ok=True)
        if resume == "never":
            return None
        if resume == "auto":
            return self.latest(repair=True)
        try:
            path = C.resolve(resume, warn=self.say)
        except C.CheckpointError as e:
            raise ConfigError("resume", str(e), value=resume) from None
        if path is None:
            raise ConfigError("resume", "no complete checkpoint there", value=resume)
        return path

    def latest(self, repair: bool = False) -> str | None:
        """The newest checkpoint that verifies (repair: move corrupt ones aside)."""
        return C.find_latest(self.root, warn=self.say, repair=repair)

    def verify(self, path: str) -> str | None:
        """None if checkpoint `path` is whole, else why not (one phrase naming a file)."""
        return C.verify(path)

    # ---------------------------------------------------------------- saving
    def save(self, step: int, meta: dict, model, opt=None, *, reason: str = "scheduled",
             wait: bool = True) -> None:
        """Write checkpoint `step` of `model` (any wrapper: plain, DDP, FSDP2/DTensor) and
        `opt` (None: an empty optimizer state) with `meta` as state.json. DCP format
        writes in the background unless `wait`; a previous background write is sealed
        first. A failure is one line on every rank, the last complete checkpoint kept."""
        self.wait()
        with self.pause():
            t0 = time.time()
            try:
                if self.fmt == "full":
                    self._save_full(step, meta, model, opt, t0, reason)
                else:
                    self._save_dcp(step, meta, model, opt, t0, reason, wait)
            except C.CheckpointError as e:
                raise self._failed(step, e) from None
        self.last_step = step

    def _failed(self, step: int, e: C.CheckpointError) -> CollectiveError:
        """Rank 0 records the failed write as a `checkpoint_failed` event; every rank gets
        the one line to stop with (the file, the free space, the checkpoint kept)."""
        path = e.path or C.tmp_dir(self.root, step)
        free = free_bytes(self.root)
        shown = "" if free is None else f" ({human_bytes(free)} free on {self.root})"
        if self.dist.rank == 0:
            import errno as errnos

            fields = {"path": self._rel(path), "errno": e.errno,
                      "error": errnos.errorcode.get(e.errno) if e.errno else None,
                      "free_bytes": free, "message": str(e)}
            try:
                self.event("checkpoint_failed", step, **fields)
            except OSError as log_error:  # the metrics log may be on the same full disk
                shown += f" (not recorded in metrics.jsonl: {log_error.strerror or log_error})"
        return CollectiveError(f"{e}{shown}; the last complete checkpoint (step "
                               f"{self.last_step}) is kept")

    def _rel(self, path: str) -> str:
        """`path` relative to the run directory (OUT, the parent of root), as events say."""
        return os.path.relpath(path, os.path.dirname(os.path.abspath(self.root)))

    def _save_full(self, step, meta, model, opt, t0, reason) -> None:
        model_sd, optim_sd = full_states(model, opt)
        rank0 = self.dist.rank == 0
        tmp = self._begin(step)
        with self._every_rank_writes(tmp, step):
            if rank0:
                C.save_torch(model_sd, os.path.join(tmp, "model.pt"))
                C.save_torch(optim_sd, os.path.join(tmp, "optim.pt"))
            C.write_rank_files(tmp, self.dist.rank, meta if rank0 else None)
        self._commit(step, t0, 0.0, reason)

    def _save_dcp(self, step, meta, model, opt, t0, reason, wait) -> None:
        import torch.distributed.checkpoint as dcp

        tmp = self._begin(step)
        with self._every_rank_writes(tmp, step):
            C.write_rank_files(tmp, self.dist.rank, meta if self.dist.rank == 0 else None)
        sd, target = sharded_states(model, opt), os.path.join(tmp, "dcp")
        group = self.dist.groups.get("ckpt")
        if wait:
            with self._every_rank_writes(tmp, step):
                try:
                    dcp.save(sd, checkpoint_id=target, process_group=group)
                except C.CheckpointError:
                    raise
                except Exception as e:  # DCP wraps every rank's failure
                    raise C.CheckpointError(f"{target}: cannot write ({C._first_line(e)})") \
                        from None
            self._commit(step, t0, 0.0, reason)
            return
        future = dcp.async_save(sd, checkpoint_id=target, process_group=group)
        self.pending = (future, step, t0, time.time() - t0, reason)

    def _begin(self, step: int) -> str:
        """Rank 0 creates the temporary directory; every rank learns whether it could
        (the agreement is the barrier: no rank waits for one that failed)."""
        tmp, error = C.tmp_dir(self.root, step), None
        if self.dist.rank == 0:
            try:
                C.begin(self.root, step)
            except C.CheckpointError as e:
                error = e
        self._agree(error, tmp, f"checkpoint step {step}: rank 0 could not create {tmp} "
                    "(its message is above)")
        return tmp

    @contextlib.contextmanager
    def _every_rank_writes(self, tmp: str, step: int):
        """Each rank writes its part of checkpoint `step`; then all agree whether every part
        was written, so a rank whose write failed (a full disk) never leaves the others
        waiting for it at the commit. A failure anywhere removes the temporary directory
        (rank 0 owns it): nothing half-written stays behind."""
        error = None
        try:
            yield
        except C.CheckpointError as e:
            error = e
        self._agree(error, tmp, f"checkpoint step {step}: another rank could not write its "
                    "part (its message is above)")

    def _agree(self, error: C.CheckpointError | None, tmp: str, elsewhere: str) -> None:
        """Raise on every rank if `error` happened on any (one host-side reduction)."""
        (failed,) = self.dist.host_max([1.0 if error is not None else 0.0])
        if not failed:
            return
        if self.dist.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        elif error is not None:  # rank 0 reports the run's error; this rank's cause is here
            print(f"llmtk: rank {self.dist.rank}: {error}", file=sys.stderr, flush=True)
        raise error if error is not None else C.CheckpointError(elsewhere)

    def _commit(self, step: int, t0: float, blocking_s: float, reason: str) -> None:
        """Every rank's files are on disk: rank 0 seals the checkpoint (manifest, COMPLETE,
        rename, latest, prune) and reports it; every rank learns whether that worked."""
        self.dist.barrier()
        error = path = None
        if self.dist.rank == 0:
            try:
                path = C.commit(self.root, step, self.keep,
                                before_complete=lambda: self.faults.before_commit(step))
            except C.CheckpointError as e:
                error = e
        self._agree(error, C.tmp_dir(self.root, step),
                    f"checkpoint step {step}: rank 0 could not seal it (its message is above)")
        if self.dist.rank == 0:
            with open(os.path.join(path, C.MANIFEST)) as f:
                nbytes = sum(v["size"] for v in json.load(f)["files"].values())
            fields = {"blocking_seconds": round(blocking_s, 3)} if blocking_s else {}
            self.event("checkpoint", step, path=self._rel(path),
                       seconds=round(time.time() - t0, 3), bytes=nbytes, reason=reason,
                       format=self.fmt, **fields)
            self.committed += 1
            if self.verify_every and self.committed % self.verify_every == 0:
                self._verify_written(step, path)

    def _verify_written(self, step: int, path: str) -> None:
        """Rank 0, --verify-every: read the checkpoint just sealed back against its
        manifest (what `llmtk train verify` checks first) and record the verdict."""
        t0 = time.time()
        problem = C.verify(path)
        self.event("checkpoint_verified", step, path=self._rel(path), ok=problem is None,
                   problem=problem, seconds=round(time.time() - t0, 3))
        if problem is not None:
            self.say(f"warning: checkpoint {path} does not verify right after it was "
                     f"written ({problem}): check the storage; a resume skips it")

    def poll(self) -> None:
        """Seal a background write once every rank's part is done (agreed by all)."""
        if self.pending is None:
            return
        (busy,) = self.dist.host_max([0.0 if self.pending[0].done() else 1.0])
        if busy == 0.0:
            self.wait()

    def wait(self) -> None:
        """Finish and seal the background write, if any."""
        if self.pending is None:
            return
        future, step, t0, blocking_s, reason = self.pending
        self.pending = None
        try:
            future.result()
        except Exception as e:
            if self.dist.rank == 0:
                shutil.rmtree(C.tmp_dir(self.root, step), ignore_errors=True)
            target = os.path.join(C.tmp_dir(self.root, step), "dcp")
            raise self._failed(step, C.CheckpointError(
                f"checkpoint step {step}: the background write to {target} failed "
                f"({C._first_line(e)})", target, getattr(e, "errno", None))) from None
        with self.pause():
            self._commit(step, t0, blocking_s, reason)

    # ---------------------------------------------------------------- loading
    def load(self, path: str, model, opt, *, sharded: bool) -> dict:
        """Restore weights, optimizer and this rank's RNG states from checkpoint `path`
        (collective); returns its state.json. `sharded`: the model holds DTensor shards,
        so a DCP checkpoint loads each rank's part directly (any layout: DCP reshards)."""
        state = C.load_state(path)
        t0 = time.time()
        try:
            load_states(path, model, opt, sharded=sharded)
        except C.CheckpointError as e:
            raise CollectiveError(str(e)) from None
        except (RuntimeError, KeyError, ValueError) as e:  # e.g. written before vocab padding
            raise CollectiveError(f"{path}: its weights do not fit this model "
                                  f"({C._first_line(e)}); use --resume never", exit_code=2) \
                from None
        rank, world = self.dist.rank, self.dist.world
        rng_file = os.path.join(path, f"rng-{rank:05d}.pt")
        if os.path.exists(rng_file):
            if state["world_size"] == world:
                C.set_rng_state(C.load_tensors(path, os.path.basename(rng_file)))
        elif state["world_size"] == world:
            print(f"warning: {rng_file} is missing: rank {rank}'s random state "
                  "starts fresh (dropout-free training is unaffected; sampling differs)",
                  file=sys.stderr, flush=True)
        self.loaded = {"step": state["step"], "path": self._rel(path),
                       "seconds": round(time.time() - t0, 3)}
        return state

    def report_load(self) -> None:
        """Rank 0, once the metrics log is open: the last load as a `checkpoint_loaded`
        event (the load itself comes before the log is opened on a resume)."""
        if self.loaded is not None:
            fields, self.loaded = dict(self.loaded), None
            self.event("checkpoint_loaded", fields.pop("step"), **fields)

    def init_from(self, source: str, model, *, sharded: bool,
                  check: Callable[[dict, str], None]) -> str:
        """--init-from a run or checkpoint: its weights only (`check(state, path)` first
        refuses another model shape). Returns the checkpoint directory."""
        try:
            src = C.resolve(source, warn=self.say)
        except C.CheckpointError as e:
            raise CollectiveError(f"--init-from {source}: {e}", exit_code=2) from None
        if src is None:
            raise CollectiveError(f"--init-from {source}: no complete checkpoint there",
                                  exit_code=2)
        check(C.load_state(src), src)
        load_states(src, model, None, sharded=sharded)
        return src


def free_bytes(path: str) -> int | None:
    """Free bytes on the file system of `path` (its nearest existing parent), or None."""
    while path and not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    try:
        return shutil.disk_usage(path or ".").free
    except OSError:
        return None


def human_bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


# ---------------------------------------------------------------- state dicts


def full_states(model, opt) -> tuple[dict, dict]:
    """(model, optimizer) consolidated state dicts on the CPU, from any wrapper."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return (get_model_state_dict(model, options=opts),
            get_optimizer_state_dict(model, opt, options=opts) if opt is not None else {})


def sharded_states(model, opt=None, flat: bool = True) -> dict:
    """{"model": ..., "optim": ...}: this rank's shards, as DCP saves and loads them.

    flat: the optimizer's hyperparameters keyed by parameter name (param_groups.FQN.lr),
    as torchtitan saves them, not by group index: pipeline stages hold different
    parameters in their group 0, and DCP would keep one stage's list for all. Checkpoints
    written before (flat=False) still load (dcp_flat tells them apart)."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    sd = {"model": get_model_state_dict(model)}
    if opt is not None:
        sd["optim"] = get_optimizer_state_dict(
            model, opt, options=StateDictOptions(flatten_optimizer_state_dict=flat))
    return sd


def dcp_flat(dcp_dir: str) -> bool:
    """Whether the DCP checkpoint in `dcp_dir` keys its optimizer groups by name."""
    from torch.distributed.checkpoint import FileSystemReader

    keys = FileSystemReader(dcp_dir).read_metadata().state_dict_metadata
    return not any(k.startswith("optim.param_groups.") and k.split(".")[2].isdigit()
                   for k in keys)


def set_full_model_state(model, model_sd: dict) -> None:
    """Load a consolidated (unsharded) model state dict, whatever the parallelism."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    if hasattr(model, "holds"):  # a pipeline rank's stages: the entries they hold
        model_sd = {k: v for k, v in model_sd.items() if model.holds(k)}
    set_model_state_dict(model, model_sd, options=StateDictOptions(full_state_dict=True))


def load_states(path: str, model, opt, *, sharded: bool) -> None:
    """Checkpoint weights (and optimizer state, unless opt is None) into `model`, whatever
    the formats: a DCP checkpoint into a sharded model loads each rank's part directly;
    every other combination goes through the consolidated full state dict."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    # An older checkpoint's wqkv rows are reordered on the full tensors (load_full_state):
    # only a current one loads each rank's part directly.
    if C.is_sharded(path) and sharded and not C.needs_qkv_upgrade(C.load_state(path)):
        import torch.distributed.checkpoint as dcp

        try:
            flat = dcp_flat(os.path.join(path, "dcp"))
            sd = sharded_states(model, opt, flat)
            dcp.load(sd, checkpoint_id=os.path.join(path, "dcp"))
        except Exception as e:  # DCP wraps every rank's failure in CheckpointException
            raise C.CheckpointError(f"{path}/dcp: cannot load ({C._first_line(e)})") \
                from None
        set_model_state_dict(model, sd["model"])
        if opt is not None:
            set_optimizer_state_dict(model, opt, sd["optim"],
                                     options=StateDictOptions(flatten_optimizer_state_dict=flat))
        return
    model_sd, optim_sd = C.load_full_state(path, opt is not None)
    set_full_model_state(model, model_sd)
    if opt is not None:
        # A DCP checkpoint's groups keyed by name (sharded_states) come back flat. Only a
        # model of plain tensors (one process, DDP) reads one here, and its local state
        # is the full one (torch 2.13 fails to load a flat dict with full_state_dict).
        flat = "param_groups" not in optim_sd
        set_optimizer_state_dict(model, opt, optim_sd, options=StateDictOptions(
            full_state_dict=not flat, flatten_optimizer_state_dict=flat))


# ---------------------------------------------------------------- what may be resumed


def check_shape(state: dict, path: str, mcfg, *, say: Callable[[str], None], for_init: bool,
                windows_per_step: int, world: int, cache: str) -> None:
    """Refuse a checkpoint of another model shape (or, to resume, another global batch)."""
    from llmtk.train.model.config import ModelConfig

    mine = mcfg.to_dict()
    # fields added later (qkv_bias) take their defaults
    theirs = ModelConfig(**state["model_config"]).to_dict() if "model_config" in state \
        else {}
    if for_init and theirs and theirs["seq_len"] != mine["seq_len"]:
        # No weight depends on it (RoPE; the rotary tables are rebuilt, not loaded):
        # fine-tuning at a shorter or longer context than pre-training is allowed.
        say(f"--init-from: sequence length {theirs['seq_len']} -> "
            f"{mine['seq_len']} (the weights do not depend on it)")
        theirs["seq_len"] = mine["seq_len"]
    if theirs != mine:
        diff = ", ".join(f"{k}: {theirs.get(k)} -> {v}" for k, v in mine.items()
                         if theirs.get(k) != v)
        what = "--init-from" if for_init else "resume"
        raise CollectiveError(f"{what}: {path} has a different model shape ({diff}); "
                              "use the same model flags" + ("" if for_init else
                                                            " or --resume never"),
                              exit_code=2)
    if for_init:
        return
    if state["seq_len"] != mcfg.seq_len or state["windows_per_step"] != windows_per_step:
        raise CollectiveError(
            f"resume: {path} was written with global batch {state['windows_per_step']} x "
            f"{state['seq_len']} tokens (world size {state['world_size']}); this run has "
            f"{windows_per_step} x {mcfg.seq_len} (world size {world}). "
            "Keep batch-size x processes x grad-accum unchanged, or use --resume never",
            exit_code=2)
    from llmtk.train.data.cache import cache_names

    if state["data_cache"] not in cache_names(cache):
        say(f"warning: resuming {path} on different data (the data position is kept)")


# Settings that do not change what is trained (a moved run directory or cache included);
# a resume with other values is unremarkable.
_NOT_NOTED = {"out", "cache_dir", "resume", "quiet", "seed", "threads", "log_every", "log_to",
              "nccl_timeout", "keep_checkpoints", "async_checkpoint", "dry_run", "gpu",
              "verify_every", "hang_timeout"}


def changed_settings(old: dict, new: dict) -> str:
    """'--lr 0.0003 -> 0.001, --steps 4 -> 8' for the settings a resume changes ('' if
    none). --seed has its own notice; settings the checkpoint predates are not compared."""
    def show(v) -> str:
        text = repr(v)
        return text if len(text) <= 40 else text[:37] + "..."

    return ", ".join(f"--{k.replace('_', '-')} {show(old[k])} -> {show(v)}"
                     for k, v in new.items() if k in old and old[k] != v and k not in _NOT_NOTED)


def check_resume(state: dict, saved_step: int, path: str, settings: dict,
                 say: Callable[[str], None]) -> None:
    """Refuse --steps below the checkpoint's step; note a changed seed and settings
    (`settings`: the run's configuration as a dict, TrainConfig.to_dict)."""
    steps, seed = settings["steps"], settings["seed"]
    if steps < saved_step:
        raise CollectiveError(
            f"--steps {steps} is below the step of the checkpoint to resume, "
            f"{saved_step} ({path}); raise --steps, or start over with --resume never",
            exit_code=2)
    old = state.get("train_config", {})
    old_seed = old.get("seed", seed)
    if old_seed != seed:
        say(f"note: --seed {seed} differs from the checkpoint's {old_seed}: the "
            f"data order from step {saved_step} on follows seed {seed}")
    changed = changed_settings(old, settings)
    if changed:
        say(f"note: resuming {os.path.basename(path)} with changed settings (they "
            f"apply from step {saved_step} on): {changed}")
    if settings["init_from"]:
        say(f"note: resuming {path}; --init-from only applies to a fresh start "
            "(--resume never)")
