"""The training loop: one process, DDP or FSDP2; resumable bit for bit; never loses work.

One optimizer step (every rank runs the same sequence of collectives):
  1. lr from the schedule (a pure function of the step, so it needs no state to resume);
  2. grad_accum micro-batches: forward, loss / grad_accum, backward (DDP syncs on the last);
  3. one all-reduce of [loss, per-parameter squared gradient norms]: the global grad norm,
     the clip factor and the non-finite verdict are computed from it on the device;
  4. the fused AdamW step, skipped on the device when the verdict is "not finite"
     (`found_inf`, as AMP's GradScaler does): no host sync is needed to decide it;
  5. the step's numbers stay on the device until the host *settles* them, once per
     logging row (and before a checkpoint, an evaluation or the end): then non-finite steps
     are logged with the parameters whose gradients were bad, a streak of them stops the
     run, and a loss spike rolls back (--on-spike rollback settles every step);
  6. evaluate, sample, checkpoint as scheduled; SIGTERM/SIGUSR1 (agreed over a host-side
     gloo group, no device sync) checkpoint and exit.

The loop calls components that decide their own timing: the model parallelize built for the run
plan (layout/), the optimizer and its schedule (optim.py, steps 1, 3, 4), the run's health
(health.py, step 5), the evaluator (evaluator.py: val loss, tasks, samples), the step log
(steplog.py), the checkpointer (checkpoint/checkpointer.py), the phases each rank marks and the
hang watchdog that reads them (steptime.py, watchdog.py), and the out-of-memory guard (oom.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from dataclasses import asdict, replace
from functools import partial

from llmtk.io.paths import missing_dirs, remove_made
from llmtk.train.checkpoint.checkpointer import (
    Checkpointer,
    check_resume,
    check_shape,
    set_full_model_state,
)
from llmtk.train.checkpoint.files import QKV_LAYOUT
from llmtk.train.config import TrainConfig, section
from llmtk.train.data.batch import doc_masked, rollback_documents
from llmtk.train.evaluator import EvalSpec, Evaluator
from llmtk.train.finetune import SftSpec, setup_sft
from llmtk.train.health import Health, HealthRules
from llmtk.train.layout.parallelize import parallelize
from llmtk.train.layout.plan import RunPlan, run_model
from llmtk.train.layout.whole import whole_model
from llmtk.train.oom import OomGuard
from llmtk.train.optim import Optimizer, OptimSpec
from llmtk.train.run_shape import ModelSpec, model_config
from llmtk.train.runtime import (
    CollectiveError,
    Dist,
    Faults,
    Stopper,
    busy_note,
    ranks,
    set_threads,
    setup_dist,
)
from llmtk.train.state import StepResult, TrainState
from llmtk.train.steplog import StepLog, due
from llmtk.train.watchdog import Watchdog


def train(cfg: TrainConfig, faults: Faults | None = None) -> None:
    """Lock the run directory (rank 0), tokenize (before the process group exists, so its
    timeout does not run while one process tokenizes), then train."""
    from llmtk.text.tokenizer import load_tokenizer
    from llmtk.train.lock import lock_run_dir
    from llmtk.train.model.hf import InitSpec, resolve_init

    cfg = replace(cfg, tokenizer=resolve_init(section(InitSpec, cfg)))  # hf:PATH brings its own
    rank, _world, _local = ranks()
    made = missing_dirs(cfg.out)  # what mkdir -p OUT creates: removed if the start fails
    lock = lock_run_dir(cfg.out) if rank == 0 else None  # before anything touches OUT
    data_ready = False  # until then a failure (empty or bad data) takes back what it made
    try:
        tok = source = None  # --sft: read by the Trainer (train/finetune.py), no token cache
        if not cfg.sft:
            tok = load_tokenizer(cfg.tokenizer)
            say = (lambda m: print(m, file=sys.stderr, flush=True)) \
                if rank == 0 and not cfg.quiet else None
            from llmtk.train.data.inputs import DataSpec, open_source

            source = open_source(section(DataSpec, cfg), tok, log=say)  # documents: the cache
        data_ready = True
        import torch  # only now: a run refused by the lock or the data never waits for it

        threads = torch.get_num_threads()  # --threads changes them; callers get theirs back
        default_dtype = torch.get_default_dtype()
        dist = setup_dist(cfg.device, cfg.nccl_timeout, cfg.out)
        if cfg.dtype == "fp64":  # every tensor the run makes (weights, buffers) in fp64
            torch.set_default_dtype(torch.float64)  # given back in the finally below
        try:
            dist.barrier()  # rank 0 holds the lock: the others may touch OUT from here on
            trainer = Trainer(cfg, dist, tok, source, faults or Faults())
            try:
                with trainer.stopper, trainer.watchdog, trainer.oom:
                    trainer.run()
            except BaseException:
                trainer.log.close_mirrors(ok=False)
                raise
            trainer.log.close_mirrors(ok=True)
        except CollectiveError as e:
            if dist.rank != 0:
                sys.exit(e.exit_code)  # every rank reached the same verdict; rank 0 says it
            raise
        finally:
            dist.close()
            torch.set_num_threads(threads)
            torch.set_default_dtype(default_dtype)
    finally:
        if lock is not None:
            lock.release(remove=not data_ready)
            if not data_ready:
                remove_made(made)  # the folders still empty


class Trainer:
    """One run: the plan resolved, the data opened, the model built for the plan, and the
    components the loop (`run`) calls; every rank builds one and runs it in step."""

    def __init__(self, cfg: TrainConfig, dist: Dist, tok, source, faults: Faults):
        import torch

        from llmtk.train.data import cache as D

        self.cfg, self.dist, self.faults, self.out = cfg, dist, faults, cfg.out
        self.chat, self.val_sets = None, {}  # --sft's chat template; --val-data NAME=DIR
        # --sft: the tokenizer and shape of the --init-from run unless given (finetune.py)
        self.tok, mcfg = run_model(section(ModelSpec, cfg), cfg.sft, tok)
        self.plan = plan = RunPlan.resolve(cfg, dist.world, mcfg, dist.cuda)
        self.log = StepLog(cfg.out, dist, cfg.steps, cfg.quiet, mcfg, plan.bf16)
        # Each data-parallel rank reads its own part of the global batch (a tp group the same).
        dp, dp_rank = plan.layout.dp, plan.layout.dp_rank(dist.rank)
        if cfg.sft:  # instruction data instead of the token cache (train/finetune.py)
            sft = setup_sft(section(SftSpec, cfg), self.tok, mcfg.seq_len, dp, dp_rank,
                            self.log.say, (plan.layout.cp, plan.layout.coords(dist.rank)["cp"]))
            self.chat, self.train_data, self.val_data = sft.chat, sft.train_data, sft.val_data
            self.cache, self.data_meta = sft.cache, sft.data_meta
        else:
            from llmtk.train.data.inputs import DataSpec, epoch_warnings, open_training_data

            data = open_training_data(section(DataSpec, cfg), source, mcfg.seq_len, dp, dp_rank)
            self.train_data, self.val_data, self.val_sets = doc_masked(data, cfg.doc_mask,
                                                                       self.tok.eos_id)
            self.cache, self.data_meta = source.key, data.meta
            for line in epoch_warnings(data, cfg.steps * plan.windows_per_step, cfg.max_epochs):
                self.log.say(line)
        self.batches = D.Prefetcher(self.train_data, self.train_data.global_batch, dist.device,
                                    threaded=dist.cuda)
        self.threads, self.threads_from = set_threads(cfg.threads)  # before the model
        if dist.device == "cpu":
            # Exact resume is tested on CPU; on GPU the fast (non-deterministic) kernels win.
            torch.use_deterministic_algorithms(True, warn_only=True)
        self.built = parallelize(plan, dist)
        self.model, self.pipe = self.built.model, self.built.pipe
        self.phases = self.log.phases  # where each rank is and its time goes (steptime.py)
        if plan.parallel == "ddp" and not plan.compiled:
            self.phases.timed_ddp(self.model)
        self.optim = Optimizer(section(OptimSpec, cfg), self.built, plan, dist, self.log.row_parts)
        self.autocast = (
            (lambda: torch.autocast(device_type=dist.device.split(":")[0], dtype=torch.bfloat16))
            if plan.bf16 else contextlib.nullcontext)
        self.ckpt = Checkpointer(
            os.path.join(cfg.out, "checkpoints"), dist, fmt=plan.ckpt_format,
            keep=cfg.keep_checkpoints, faults=faults, say=self.log.say,
            event=self.log.event, verify_every=cfg.verify_every,
            pause=lambda: self.log.meter.exclude())
        grad_stats = None  # --grad-stats per-layer: rows of per-layer norms, when settled
        if cfg.grad_stats == "per-layer":
            from llmtk.train.grad_stats import GradStats

            grad_stats = GradStats(self.optim.param_names, cfg.grad_stats_every,
                                   cfg.spike_factor)
        self.health = Health(section(HealthRules, cfg), self.log, self.ckpt, restore=self._restore,
                             zero_grad=lambda: self.optim.opt.zero_grad(set_to_none=True),
                             documents=(lambda start, stop: None) if cfg.sft else partial(
                                 rollback_documents, source, self.train_data,
                                 mcfg.seq_len), param_names=self.optim.param_names,
                             grad_stats=grad_stats)
        self.evaluator = Evaluator(section(EvalSpec, cfg), built=self.built,
                                   whole=partial(whole_model, self.built, plan, dist),
                                   dist=dist, autocast=self.autocast,
                                   loss_ranks=self.optim.loss_ranks, val_data=self.val_data,
                                   val_sets=self.val_sets, tok=self.tok, log=self.log)
        self.stopper = Stopper(dist)
        self.watchdog = Watchdog(dist, self.phases, cfg.hang_timeout, cfg.out, self.log.say)
        self.oom = OomGuard(cfg.out, plan, dist, self.phases, self.watchdog)

    # ---------------------------------------------------------------- the loop
    def run(self) -> None:
        """Resume (or start; a run already at cfg.steps stops here), then train to
        cfg.steps: step, settle what the host must know, log, evaluate and sample,
        checkpoint; stop cleanly on SIGTERM/SIGUSR1."""
        st = self._start()
        if st is None:
            return  # the checkpoint already holds cfg.steps steps: nothing to train
        while st.step < self.cfg.steps:
            self.health.pending.append(self._train_step(st))
            self.phases.at("all_reduce (stop signals)", "comm")
            signum = self.stopper.agreed()
            self.phases.at("device sync", "compute")
            if self._due(st, self.cfg.log_every) or signum or self.health.every_step:
                if not self.health.settle(st):
                    continue  # rolled back to the last checkpoint
            self.phases.at("evaluation")
            val, per_source = self.evaluator.val_losses(st)
            if self._due(st, self.cfg.log_every):
                self.log.row(st, self.health.last_row, val, per_source, self.train_data)
            elif val is not None:
                self.log.val_row(st.step, val, per_source)
            self.evaluator.tasks_and_samples(st)
            if signum:
                return self._preempt(st, signum)
            if st.step == self.cfg.steps or self._due(st, self.cfg.checkpoint_every):
                self._checkpoint(st, "final" if st.step == self.cfg.steps else "scheduled")
            self.ckpt.poll()
            self.faults.after_step(st.step)
        self._finish(st)

    def _due(self, st: TrainState, every: int) -> bool:
        return due(st.step, every, self.cfg.steps)

    def _train_step(self, st: TrainState) -> StepResult:
        """One optimizer step without a host sync: micro-steps, the step's one reduction,
        clipping and the (device-side skippable) update. Advances the state."""
        lr = self.optim.set_lr(st.step, st.lr_scale)
        loss_sum = self._pipeline_step(st) if self.pipe is not None else self._micro_steps(st)
        self.phases.step_done(loss_sum, self.cfg.grad_accum)
        values, sq = self.optim.update(loss_sum)
        st.step += 1
        st.position += self.plan.windows_per_step
        st.tokens += self.plan.tokens_per_step
        self.log.count(self.plan.tokens_per_step)
        return StepResult(st.step, lr, values, sq)

    def _micro_steps(self, st: TrainState):
        import torch

        from llmtk.train.model.gpt import wide

        ga = self.cfg.grad_accum
        loss_sum = torch.zeros((), device=self.dist.device)
        scaled = hasattr(self.train_data, "loss_scale")
        for m in range(ga):
            self.phases.at("data", "data", st.step + 1)
            batch = self.batches.get(st.position + m * self.train_data.global_batch)
            self.phases.at("forward-backward", "compute")  # batch: (x, y[, doc for SFT])
            last = m == ga - 1
            with self._gradient_sync(last):
                with self.autocast():
                    _, loss = self.model(*batch)
                if scaled:  # SFT: the mean over the step's trained tokens
                    loss = loss * self.train_data.loss_scale(st.position, m, ga)
                loss = self.faults.loss(st.step, loss)
                (loss / ga).backward()
            self.phases.backward_done()
            loss_sum += wide(loss.detach())
        return loss_sum

    def _gradient_sync(self, last: bool):
        """What a micro-step's backward reduces. DDP all-reduces once, at the step's last.
        FSDP2 reduce-scatters every micro-step: its shards are all a rank keeps (with sync
        off until the last, each block's whole fp32 gradient would be held through the
        step: a 1/dp_shard share become a whole one, 35 GB per GPU for a 70B model at
        tp 8). HSDP all-reduces the shards across its replicas once, at the last. Under --pp
        this is not used: torch's pipeline stage turns sync off itself until the last
        microbatch, so a stage does hold its whole gradients through the step (--dry-run
        counts them as fsdp_held)."""
        if self.plan.parallel == "ddp" and not last:
            return self.model.no_sync()
        if self.plan.parallel == "fsdp" and self.plan.layout.dp_replicate > 1:
            self.model.set_requires_all_reduce(last)
        return contextlib.nullcontext()

    def _pipeline_step(self, st: TrainState):
        """The step's micro-batches as the pipeline's microbatches (one schedule run);
        the sum of their losses on a last-stage rank, 0 elsewhere."""
        ga, gb = self.cfg.grad_accum, self.train_data.global_batch
        self.phases.at("data", "data", st.step + 1)
        batches = [self.batches.get(st.position + m * gb) for m in range(ga)]
        self.phases.at("forward-backward (pipeline schedule)", "compute")
        scales = ([self.train_data.loss_scale(st.position, m, ga) for m in range(ga)]
                  if hasattr(self.train_data, "loss_scale") else None)
        self.pipe.loss_hook = lambda loss: self.faults.loss(st.step, loss)
        with self.autocast():
            loss_sum = self.pipe.step(batches, scales)
        self.pipe.sync_tied()
        return loss_sum

    # ---------------------------------------------------------------- start and finish
    def _start(self) -> TrainState | None:
        """Choose the checkpoint (rank 0, past corrupt ones), load it everywhere, open the
        metrics log and write the resolved configuration. None: the run is complete."""
        from llmtk.train.checkpoint import files as C
        from llmtk.train.model import hf

        cfg, say = self.cfg, self.log.say
        path = self.dist.broadcast(self.ckpt.choose(cfg.resume)
                                   if self.dist.rank == 0 else None)
        if path is not None and TrainState.from_checkpoint(C.load_state(path)).step == cfg.steps:
            # Touch nothing (metrics, config.json, the event log) and say so.
            self.batches.close()
            say(f"already complete: {cfg.steps} steps ({self.out})")
            return None
        st, t0 = TrainState(), time.perf_counter()
        if path is not None:
            st = self._restore(path, resume=True)
            self.log.load_s = time.perf_counter() - t0  # the resume event's `seconds`
        elif hf.is_hf_spec(cfg.init_from):
            set_full_model_state(self.model, hf.init_weights(cfg.init_from, self.plan.mcfg))
            say(f"initialised weights from {cfg.init_from} (fresh optimizer and schedule)")
        elif cfg.init_from:
            src = self.ckpt.init_from(cfg.init_from, self.model, sharded=self.plan.sharded,
                                      check=lambda state, p: self._compat(state, p, True))
            say(f"initialised weights from {src} (fresh optimizer and schedule)")
        self.ckpt.last_step = st.step
        if self.dist.rank == 0:
            self.log.open_run(st.step, path, cfg, self.plan, {
                "params": self.built.n_params, "world_size": self.dist.world,
                "device": self.dist.device, "threads": self.threads,
                "tokenizer": self.tok.fingerprint(), "data": self.data_meta,
                "cache": self.cache}, validates=self.evaluator.validates,
                busy=busy_note(self.threads, self.threads_from, self.dist.device))
            self.ckpt.report_load()  # a `checkpoint_loaded` event with its seconds
        if cfg.eval_tasks:  # --eval-tasks: task files are read (and checked) before training
            self.evaluator.open_tasks(cfg.eval_tasks, chat=self.chat, run_dir=self.out,
                                      n_bad=cfg.eval_bad_cases,
                                      max_new_tokens=cfg.eval_max_new_tokens)
        self.model.train()
        self.log.restart_clock()
        return st

    def _restore(self, path: str, resume: bool = False) -> TrainState:
        """Restore weights, optimizer, RNG and TrainState from checkpoint `path` (collective)."""
        from llmtk.train.checkpoint import files as C

        self._compat(state := C.load_state(path), path)
        saved = TrainState.from_checkpoint(state)
        if resume:
            check_resume(state, saved.step, path, self.cfg.to_dict(), self.log.say)
        self.ckpt.load(path, self.model, self.optim.opt, sharded=self.plan.sharded)
        return saved

    def _compat(self, state: dict, path: str, for_init: bool = False) -> None:
        check_shape(state, path, self.plan.mcfg, say=self.log.say, for_init=for_init,
                    windows_per_step=self.plan.windows_per_step, world=self.dist.world,
                    cache=self.cache)

    def _finish(self, st: TrainState, how: str = "done") -> None:
        self.ckpt.wait()
        self.batches.close()
        self.log.close()
        self.log.say(f"{how}: {st.step} steps, {st.tokens} tokens -> {self.out}")

    # ---------------------------------------------------------------- checkpoints
    def _checkpoint_meta(self, st: TrainState) -> dict:
        plan = self.plan
        return {
            "step": st.step, "train_state": asdict(st), "world_size": self.dist.world,
            "windows_per_step": plan.windows_per_step, "seq_len": plan.mcfg.seq_len,
            "model_config": plan.mcfg.to_dict(), "train_config": self.cfg.to_dict(),
            "data_cache": os.path.basename(self.cache), "tokenizer": self.tok.fingerprint(),
            "format": plan.ckpt_format, "parallel": plan.parallel,
            "qkv_layout": QKV_LAYOUT,  # wqkv grouped by kv head (model.group_qkv)
            # --sft: the template itself, which `llmtk eval` puts questions through
            "chat_template": self.chat.record() if self.chat is not None else None,
            # read by tools that predate TrainState
            "tokens": st.tokens, "data_position": st.position, "lr_scale": st.lr_scale,
        }

    def _checkpoint(self, st: TrainState, reason: str, wait: bool = False) -> None:
        """Checkpoint st.step (DCP: in the background unless wait or
        --no-async-checkpoint)."""
        self.health.settle(st)
        self.phases.at(f"checkpoint ({reason})")
        self.ckpt.save(st.step, self._checkpoint_meta(st), self.model, self.optim.opt,
                       reason=reason, wait=wait or not self.cfg.async_checkpoint)

    def _preempt(self, st: TrainState, signum: int) -> None:
        name, say = signal.Signals(signum).name, self.log.say
        again = " (Ctrl-C again: stop now)" if signum == signal.SIGINT else ""
        before = f"step {self.ckpt.last_step}'s" if self.ckpt.last_step else "no checkpoint"
        say(f"{name}: writing a checkpoint at step {st.step}{again}; until it is complete, a "
            f"resume starts from {before}")
        self._checkpoint(st, reason=name, wait=True)
        self.log.event("preempt", step=st.step, signal=name)
        say(f"{name}: checkpoint written at step {st.step}; the same command resumes from it; "
            "exiting")
        self._finish(st, "stopped")
        if signum == signal.SIGINT:
            raise KeyboardInterrupt  # interrupted, not done: exit status 130


__all__ = ["StepResult", "TrainState", "Trainer", "model_config", "train"]
