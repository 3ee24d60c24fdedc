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
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import signal
import sys
import time
from dataclasses import asdict, dataclass, field

from llmtk.compute.flops import mfu as model_mfu
from llmtk.errors import LlmtkError
from llmtk.io.atomic import set_aside
from llmtk.io.paths import missing_dirs, remove_made
from llmtk.train.checkpoint import QKV_LAYOUT
from llmtk.train.checkpointer import Checkpointer, check_resume, check_shape, set_full_model_state
from llmtk.train.config import TrainConfig
from llmtk.train.parallel import replicas, shards
from llmtk.train.run_shape import model_config
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


@dataclass
class TrainState:
    """Everything about the run's progress; saved in and restored from state.json as is."""

    step: int = 0            # optimizer steps done (including skipped non-finite ones)
    tokens: int = 0          # tokens of the steps kept (a rollback takes its steps back)
    position: int = 0        # windows the job has consumed (never rewound)
    lr_scale: float = 1.0    # halved by each spike rollback
    bad_streak: int = 0      # consecutive non-finite steps
    ema_loss: float | None = None  # running mean of the loss, for spike detection

    @classmethod
    def from_checkpoint(cls, state: dict) -> TrainState:
        if "train_state" in state:
            return cls(**state["train_state"])
        return cls(step=state["step"], tokens=state["tokens"],  # before TrainState existed
                   position=state["data_position"], lr_scale=state["lr_scale"])


@dataclass
class StepResult:
    """One optimizer step's numbers, on the device until settled."""

    step: int                # 1-based
    lr: float
    values: object           # tensor [loss, grad_norm, not_finite]
    sq: object               # tensor (P,): each parameter's squared gradient norm


@dataclass
class Meter:
    """Throughput of the training work since the last row (evaluation, sampling and
    checkpoints are excluded)."""

    t: float = field(default_factory=time.perf_counter)
    tokens: int = 0
    steps: int = 0
    data_s: float = 0.0
    excluded: float = 0.0

    @contextlib.contextmanager
    def exclude(self):
        t0 = time.perf_counter()
        yield
        self.excluded += time.perf_counter() - t0

    def elapsed(self) -> float:
        return max(time.perf_counter() - self.t - self.excluded, 1e-9)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning rate for the 0-based step: linear warmup, then cosine / WSD / constant."""
    min_lr = cfg.lr / 10 if cfg.min_lr is None else cfg.min_lr
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    if cfg.schedule == "constant":
        return cfg.lr
    if cfg.schedule == "wsd":  # warmup, stable, then a linear decay over the last fraction
        decay_start = cfg.steps - max(1, int(cfg.decay_fraction * cfg.steps))
        if step < decay_start:
            return cfg.lr
        frac = (step - decay_start + 1) / (cfg.steps - decay_start)
        return cfg.lr + frac * (min_lr - cfg.lr)
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0))) * (cfg.lr - min_lr)


def warmup_warning(cfg: TrainConfig) -> str:
    """What a run whose warmup is not shorter than the run does (it is allowed: a short
    smoke test may want it, but it is never what a long run meant)."""
    last = lr_at(cfg.steps - 1, cfg)
    return (f"warning: --warmup {cfg.warmup} >= --steps {cfg.steps}: the whole run warms up "
            f"(lr rises linearly to {last:.3g} at the last step, peak --lr {cfg.lr:g}) and "
            f"never decays; lower --warmup to use the {cfg.schedule} schedule")


def _mem_gb(device: str) -> float:
    """Peak memory of this process: CUDA allocator peak on GPU, peak RSS on CPU."""
    import torch

    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 1e9
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # Linux: KiB


def train(cfg: TrainConfig, faults: Faults | None = None) -> None:
    """Lock the run directory (rank 0), tokenize (before the process group exists, so its
    timeout does not run while one process tokenizes), then train."""
    from llmtk.text.tokenizer import load_tokenizer
    from llmtk.train import data as D
    from llmtk.train.hf import resolve_init
    from llmtk.train.lock import lock_run_dir

    cfg = resolve_init(cfg)  # --init-from hf:PATH brings its tokenizer
    rank, _world, _local = ranks()
    made = missing_dirs(cfg.out)  # what mkdir -p OUT creates: removed if the start fails
    lock = lock_run_dir(cfg.out) if rank == 0 else None  # before anything touches OUT
    data_ready = False  # until then a failure (empty or bad data) takes back what it made
    try:
        tok = cache = None  # --sft: read by the Trainer (train/finetune.py), no token cache
        if not cfg.sft:
            tok = load_tokenizer(cfg.tokenizer)
            say = (lambda m: print(m, file=sys.stderr, flush=True)) \
                if rank == 0 and not cfg.quiet else None
            from llmtk.train.inputs import data_key

            cache = data_key(cfg, tok) or D.build_cache(  # token datasets need no cache
                cfg.data, cfg.val_data, tok, cfg.cache_dir or os.path.join(cfg.out, "cache"),
                cfg.text_field, cfg.val_fraction, log=say, allow_html=cfg.allow_html)
        data_ready = True
        import torch  # only now: a run refused by the lock or the data never waits for it

        threads = torch.get_num_threads()  # --threads changes them; callers get theirs back
        default_dtype = torch.get_default_dtype()
        dist = setup_dist(cfg.device, cfg.nccl_timeout)
        if cfg.dtype == "fp64":  # every tensor the run makes (weights, buffers) in fp64
            torch.set_default_dtype(torch.float64)  # given back in the finally below
        try:
            dist.barrier()  # rank 0 holds the lock: the others may touch OUT from here on
            trainer = Trainer(cfg, dist, tok, cache, faults or Faults())
            try:
                with trainer.stopper:
                    trainer.run()
            except BaseException:
                trainer.close_mirrors(ok=False)
                raise
            trainer.close_mirrors(ok=True)
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
    def __init__(self, cfg: TrainConfig, dist: Dist, tok, cache: str, faults: Faults):
        from llmtk.train import data as D
        from llmtk.train.plan import RunPlan, run_model

        self.cfg, self.dist, self.tok, self.cache, self.faults = cfg, dist, tok, cache, faults
        self.out = cfg.out
        self.chat = None  # --sft: the chat template (train/chat.py)
        # --sft: the tokenizer and shape of the --init-from run unless given (finetune.py)
        self.tok, mcfg = run_model(cfg) if cfg.sft else (tok, model_config(cfg, tok.vocab_size))
        self.plan = plan = RunPlan.resolve(cfg, dist.world, mcfg, dist.cuda)
        self.parallel, self.layout, self.mcfg = plan.parallel, plan.layout, plan.mcfg
        self.windows_per_step, self.tokens_per_step = plan.windows_per_step, \
            plan.tokens_per_step
        self.ckpt_format, self.compiled = plan.ckpt_format, plan.compiled
        # Each data-parallel rank reads its own part of the global batch (a tp group the same).
        dp, dp_rank = self.layout.dp, self.layout.dp_rank(dist.rank)
        self.val_sets: dict = {}  # --val-data NAME=DIR: name -> Sampler
        if cfg.sft:  # instruction data instead of the token cache (train/finetune.py)
            from llmtk.train.finetune import setup_sft

            sft = setup_sft(cfg, self.tok, mcfg.seq_len, dp, dp_rank, self._say)
            self.chat, self.train_data, self.val_data = sft.chat, sft.train_data, sft.val_data
            self.cache, self.data_meta = sft.cache, sft.data_meta
        else:
            from llmtk.train.inputs import epoch_warnings, open_training_data

            data = open_training_data(cfg, cache, mcfg.seq_len, dp, dp_rank)
            self.train_data, self.val_data, self.val_sets = data.train, data.val, data.val_sets
            self.data_meta = data.meta
            for line in epoch_warnings(data, cfg.steps * self.windows_per_step, cfg.max_epochs):
                self._say(line)
        self.batches = D.Prefetcher(self.train_data, self.train_data.global_batch, dist.device,
                                    threaded=dist.cuda)
        self.threads, self.threads_from = set_threads(cfg.threads)  # before the model
        self._build_model()
        self.pending: list[StepResult] = []   # steps not yet settled by the host
        self.last_row = None                  # (step, [loss, norm, not_finite], lr) settled
        self.metrics = None                   # rank 0's MetricsWriter, opened in run()
        self.ckpt = Checkpointer(
            os.path.join(cfg.out, "checkpoints"), dist, fmt=self.ckpt_format,
            keep=cfg.keep_checkpoints, faults=faults, say=self._say,
            on_commit=lambda step, path, **f: self._event(
                "checkpoint", step, path=os.path.relpath(path, self.out), **f),
            pause=lambda: self.meter.exclude())
        self.stopper = Stopper(dist)
        self.meter = Meter()
        self.t_start = time.perf_counter()    # reset when training starts (_start)
        self.mirrors = None                   # --log-to backends (rank 0), opened in run()
        self.task_eval = None                 # --eval-tasks (finetune.TaskEvaluator)

    # ---------------------------------------------------------------- model
    def _build_model(self) -> None:
        import torch

        from llmtk.train.parallelize import parallelize

        cfg, dist = self.cfg, self.dist
        if dist.device == "cpu":
            # Exact resume is tested on CPU; on GPU the fast (non-deterministic) kernels win.
            torch.use_deterministic_algorithms(True, warn_only=True)
        built = parallelize(self.plan, dist)
        self.built = built
        self.model, self.raw, self.pipe = built.model, built.raw, built.pipe
        model = self.raw
        # Only what trains (LoRA freezes the base): clipped, updated, checked for NaN.
        self.params = [p for p in model.parameters() if p.requires_grad]
        names = [n for n, p in model.named_parameters() if p.requires_grad]
        # The squared-norm vector the step all-reduces spans the whole model's trainable
        # parameters (param_names), so one reduction serves every layout: a pipeline
        # stage puts its own at their `slots` and leaves zeros for the other stages'.
        self.param_names, self.slots = names, None
        # How many ranks hold each gradient element: the all-reduced squares are divided by
        # it, so a replicated shard (HSDP, DDP; a tied embedding's two pipeline copies)
        # counts once in the global norm.
        self.replicas = torch.tensor([float(replicas(p, dist.world)) for p in self.params],
                                     device=dist.device)
        self.loss_ranks = dist.world  # ranks whose losses are averaged: the last stage's
        if self.pipe is not None:
            self._pipeline_norms(names, built.trainable)
        self.n_params = built.n_params

        # AdamW, decoupled weight decay on matrices only (not norms), nanoGPT's grouping.
        # Fused: one kernel for all parameters, and it honours `found_inf` (the device-side
        # skip of a non-finite step), on CPU, CUDA, DDP and FSDP2's DTensors alike.
        decay = [p for p in self.params if p.dim() >= 2]
        no_decay = [p for p in self.params if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": cfg.weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
        self.opt = torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                                     fused=True)
        self.autocast = (
            (lambda: torch.autocast(device_type=dist.device.split(":")[0], dtype=torch.bfloat16))
            if self._bf16() else contextlib.nullcontext)

        # MFU: `llmtk estimate`'s formula (causal attention, model FLOPs only) and the peak
        # of the dtype the matmuls run in.
        from llmtk.compute.flops import flops_per_token_for_config
        from llmtk.compute.hardware import device_peak_flops

        self.flops_per_token = flops_per_token_for_config(self.mcfg, causal=True)
        self.peak = (device_peak_flops(torch.cuda.get_device_name(dist.local_rank),
                                       "bf16-mixed" if self._bf16() else "fp32")
                     if dist.cuda else None)
        self.grad_stats = None  # --grad-stats per-layer: rows of per-layer norms, in _settle
        if cfg.grad_stats == "per-layer":
            from llmtk.train.grad_stats import GradStats

            self.grad_stats = GradStats(self.param_names, cfg.grad_stats_every, cfg.spike_factor)

    def _pipeline_norms(self, names: list[str], whole_names: list[str]) -> None:
        """Under pp: param_names become the whole model's, slots where this rank's go, and
        replicas count the holders of each element over all stages (one all-reduce each
        of the holders and of the shards, once)."""
        import torch
        import torch.distributed as tdist

        self.param_names = whole_names
        index = {n: i for i, n in enumerate(self.param_names)}
        dev = self.dist.device
        self.slots = torch.tensor([index[n] for n in names], dtype=torch.long, device=dev)
        holders = torch.zeros(len(self.param_names), device=dev)
        pieces = torch.zeros(len(self.param_names), device=dev)
        holders[self.slots] = 1.0
        pieces[self.slots] = torch.tensor([float(shards(p)) for p in self.params],
                                          device=dev)
        tdist.all_reduce(holders)  # ranks holding some piece of each parameter
        tdist.all_reduce(pieces, op=tdist.ReduceOp.MAX)
        self.replicas = holders / pieces
        self.loss_ranks = self.dist.world // self.layout.pp

    def _bf16(self) -> bool:
        """bf16 autocast: on GPU by default, on request anywhere."""
        return self.plan.bf16

    # ---------------------------------------------------------------- the loop
    def run(self) -> None:
        """Resume (or start; a run already at cfg.steps stops here), then train to
        cfg.steps: step, settle what the host must know, log, evaluate and sample,
        checkpoint; stop cleanly on SIGTERM/SIGUSR1."""
        st = self._start()
        if st is None:
            return  # the checkpoint already holds cfg.steps steps: nothing to train
        while st.step < self.cfg.steps:
            self.pending.append(self._train_step(st))
            signum = self.stopper.agreed()
            if self._due(st, self.cfg.log_every) or signum or self.cfg.on_spike == "rollback":
                if not self._settle(st):
                    continue  # rolled back to the last checkpoint
            self._evaluate_log_sample(st)
            if signum:
                return self._preempt(st, signum)
            if st.step == self.cfg.steps or self._due(st, self.cfg.checkpoint_every):
                self._checkpoint(st, "final" if st.step == self.cfg.steps else "scheduled")
            self.ckpt.poll()
            self.faults.after_step(st.step)
        self._finish(st)

    def _due(self, st: TrainState, every: int) -> bool:
        return bool(every) and st.step % every == 0 or st.step == self.cfg.steps

    def _train_step(self, st: TrainState) -> StepResult:
        """One optimizer step without a host sync: micro-steps, the step's one reduction,
        clipping and the (device-side skippable) update. Advances the state."""
        lr = lr_at(st.step, self.cfg) * st.lr_scale
        for group in self.opt.param_groups:
            group["lr"] = lr
        loss_sum = self._micro_steps(st)
        values, sq = self._reduce_clip_update(loss_sum)
        st.step += 1
        st.position += self.windows_per_step
        st.tokens += self.tokens_per_step
        self.meter.tokens += self.tokens_per_step
        self.meter.steps += 1
        return StepResult(st.step, lr, values, sq)

    def _micro_steps(self, st: TrainState):
        import torch

        from llmtk.train.model import wide

        if self.pipe is not None:
            return self._pipeline_step(st)
        ga = self.cfg.grad_accum
        loss_sum = torch.zeros((), device=self.dist.device)
        scaled = hasattr(self.train_data, "loss_scale")
        for m in range(ga):
            t0 = time.perf_counter()
            batch = self.batches.get(st.position + m * self.train_data.global_batch)
            # batch: (x, y), or (x, y, doc) for SFT
            self.meter.data_s += time.perf_counter() - t0
            last = m == ga - 1
            with self._gradient_sync(last):
                with self.autocast():
                    _, loss = self.model(*batch)
                if scaled:  # SFT: the mean over the step's trained tokens
                    loss = loss * self.train_data.loss_scale(st.position, m, ga)
                loss = self.faults.loss(st.step, loss)
                (loss / ga).backward()
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
        if self.parallel == "ddp" and not last:
            return self.model.no_sync()
        if self.parallel == "fsdp" and self.layout.dp_replicate > 1:
            self.model.set_requires_all_reduce(last)
        return contextlib.nullcontext()

    def _pipeline_step(self, st: TrainState):
        """The step's micro-batches as the pipeline's microbatches (one schedule run);
        the sum of their losses on a last-stage rank, 0 elsewhere."""
        ga, gb = self.cfg.grad_accum, self.train_data.global_batch
        t0 = time.perf_counter()
        batches = [self.batches.get(st.position + m * gb) for m in range(ga)]
        self.meter.data_s += time.perf_counter() - t0
        scales = ([self.train_data.loss_scale(st.position, m, ga) for m in range(ga)]
                  if hasattr(self.train_data, "loss_scale") else None)
        self.pipe.loss_hook = lambda loss: self.faults.loss(st.step, loss)
        with self.autocast():
            loss_sum = self.pipe.step(batches, scales)
        self.pipe.sync_tied()
        return loss_sum

    def _reduce_clip_update(self, loss_sum):
        """The step's one collective, then clip and step on the device. Returns the step's
        [loss, grad_norm, not_finite] and the per-parameter squared norms (device)."""
        import torch

        from llmtk.train.model import wide

        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        local = [g.to_local() if hasattr(g, "to_local") else g for g in grads]
        sq = wide(torch.stack(torch._foreach_norm(local))) ** 2  # (P,)
        if self.slots is not None:  # pp: this stage's among the whole model's (P_all,)
            sq = torch.zeros(len(self.param_names), device=sq.device).index_copy_(
                0, self.slots, sq)
        vec = torch.cat([(loss_sum / self.cfg.grad_accum).view(1), sq])
        if self.dist.distributed:
            import torch.distributed as tdist

            reduced = vec.clone()
            tdist.all_reduce(reduced)
            # FSDP: each rank holds a shard of every gradient, so the squares add up; HSDP:
            # each shard is held by dp_replicate ranks; DDP: every rank holds the same full
            # gradients, the local norms are the global ones (kept as they are: exact).
            vec = torch.cat([reduced[:1] / self.loss_ranks,
                             reduced[1:] / self.replicas if self.parallel == "fsdp" else sq])
        loss, sq = vec[0], vec[1:]
        norm = sq.sum().sqrt()
        not_finite = (~(torch.isfinite(norm) & torch.isfinite(loss))).float()
        if self.cfg.grad_clip > 0:  # clip_grad_norm_'s rule, without its host sync
            torch._foreach_mul_(local, (self.cfg.grad_clip / (norm + 1e-6)).clamp(max=1.0))
        self.opt.found_inf = not_finite  # the fused kernel skips the update when it is 1
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return torch.stack([loss, norm, not_finite]), sq

    def _settle(self, st: TrainState) -> bool:
        """Bring the host up to date with the pending steps (one device read): log
        non-finite steps, stop after too many, detect spikes. False if it rolled back."""
        import torch

        if not self.pending:
            return True
        pending, self.pending = self.pending, []
        rows = torch.stack([torch.cat([r.values, r.sq]) for r in pending])
        values = rows.tolist()  # the one device -> host read
        for r, (loss, norm, not_finite, *sq) in zip(pending, values, strict=True):
            if self.grad_stats and (row := self.grad_stats.row(r.step, loss, norm, sq)):
                self._event("grad_stats", r.step, **row)
            if not_finite:
                self._non_finite(st, r.step, loss, norm, [not math.isfinite(v) for v in sq])
            elif self._is_spike(st, loss):
                self._rollback(st, r.step, loss)
                return False
            else:
                st.bad_streak = 0
                st.ema_loss = loss if st.ema_loss is None else 0.95 * st.ema_loss + 0.05 * loss
        self.last_row = (pending[-1].step, values[-1][:3], pending[-1].lr)
        return True

    def _non_finite(self, st: TrainState, step: int, loss: float, norm: float, bad) -> None:
        cfg = self.cfg
        st.bad_streak += 1
        names = [n for n, b in zip(self.param_names, bad, strict=True) if b]
        stop = cfg.on_nan == "stop" or st.bad_streak >= cfg.max_bad_steps
        self._event("nan", step=step, loss=loss, grad_norm=norm, bad_params=names,
                    action="stop" if stop else "skip", consecutive=st.bad_streak)
        self._say(f"step {step}: non-finite loss/gradients (loss {loss}, grad norm {norm}); "
                  f"skipped the update; bad gradients in: "
                  f"{', '.join(names[:8]) or 'none (loss only)'}")
        if stop:
            if self.metrics is not None:
                self.metrics.sync()
            why = ("--on-nan stop" if cfg.on_nan == "stop"
                   else f"{st.bad_streak} consecutive non-finite steps")
            raise CollectiveError(
                f"stopped at step {step}: {why}; first bad parameters: "
                f"{', '.join(names[:5]) or 'none (the loss itself)'}. Lower --lr, raise "
                f"--warmup or lower --grad-clip; the last checkpoint is kept")

    def _is_spike(self, st: TrainState, loss: float) -> bool:
        return (self.cfg.on_spike == "rollback" and st.ema_loss is not None
                and st.step > self.cfg.warmup and loss > self.cfg.spike_factor * st.ema_loss
                and self.ckpt.last_step > 0)

    def _rollback(self, st: TrainState, step: int, loss: float) -> None:
        """PaLM-style: back to the last checkpoint, half the learning rate, and skip the
        batches that led to the spike (the data position is not rewound)."""
        from llmtk.io.metrics import MetricsWriter, truncate_after

        self.ckpt.wait()
        saved = self._load_checkpoint(self.ckpt.latest())
        self.opt.zero_grad(set_to_none=True)
        if self.metrics is not None:
            # Rows after the checkpoint describe steps that are being redone: drop them.
            self.metrics.close()
            truncate_after(self.metrics.path, saved.step)
            self.metrics = MetricsWriter(self.metrics.path, mirror=self.metrics.mirror)
        self._event("rollback", step=step - 1, loss=loss, ema_loss=st.ema_loss, from_step=step,
                    to_step=saved.step, skipped_windows=st.position - saved.position,
                    position=saved.position, documents=self._documents(saved.position,
                                                                       st.position))
        self._say(f"step {step - 1}: loss spike {loss:.3f} (avg {st.ema_loss:.3f}); rolled "
                  f"back to step {saved.step} with half the learning rate")
        st.step, st.tokens, st.ema_loss = saved.step, saved.tokens, saved.ema_loss
        st.bad_streak = saved.bad_streak
        st.lr_scale *= 0.5
        self.meter = Meter()
        if st.lr_scale < 1 / 16:
            raise CollectiveError(f"loss spikes persist after 4 rollbacks (now step {st.step}, "
                                  "lr x 1/32); lower --lr or check the data near this position")

    def _documents(self, start: int, stop: int) -> list[dict] | None:
        """The documents (id, file, record) of windows [start, stop), for a rollback's event;
        `llmtk train batch RUN --skipped` lists them all, with their text."""
        if self.metrics is None or self.cfg.sft:  # rank 0 writes the events
            return None
        from llmtk.train.batch import SKIPPED_DOCS, DocumentFinder

        return DocumentFinder(self.cfg, self.cache, self.train_data,
                              self.mcfg.seq_len).span(start, stop, SKIPPED_DOCS)

    # ---------------------------------------------------------------- start and finish
    def _start(self) -> TrainState | None:
        """Choose the checkpoint (rank 0, past corrupt ones), load it everywhere, open the
        metrics log and write the resolved configuration. None: the run is complete."""
        from llmtk.io.metrics import MetricsWriter, truncate_after
        from llmtk.train import checkpoint as C
        from llmtk.train import hf

        path = self.dist.broadcast(self.ckpt.choose(self.cfg.resume)
                                   if self.dist.rank == 0 else None)
        if path is not None and \
                TrainState.from_checkpoint(C.load_state(path)).step == self.cfg.steps:
            # Touch nothing (metrics, config.json, the event log) and say so.
            self.batches.close()
            self._say(f"already complete: {self.cfg.steps} steps ({self.out})")
            return None
        st = TrainState()
        if path is not None:
            st = self._load_checkpoint(path, resume=True)
        elif hf.is_hf_spec(self.cfg.init_from):
            set_full_model_state(self.model, hf.init_weights(self.cfg, self.mcfg))
            self._say(f"initialised weights from {self.cfg.init_from} (fresh optimizer and "
                      "schedule)")
        elif self.cfg.init_from:
            src = self.ckpt.init_from(self.cfg.init_from, self.model, sharded=self._sharded(),
                                      check=lambda state, p: self._compat(state, p, True))
            self._say(f"initialised weights from {src} (fresh optimizer and schedule)")
        self.ckpt.last_step = st.step
        if self.dist.rank == 0:
            metrics_path = os.path.join(self.out, "metrics.jsonl")
            if path is not None:
                truncate_after(metrics_path, st.step)
            elif os.path.exists(metrics_path):
                set_aside(metrics_path, "old", numbered=False)
            self.metrics = MetricsWriter(metrics_path)
            resolved = self._write_config()
            if self.cfg.warmup >= self.cfg.steps:
                self._say(warmup_warning(self.cfg))
            if self.cfg.eval_every and self.val_data is None and not self.val_sets \
                    and not self.cfg.eval_tasks:
                self._say(f"warning: --eval-every {self.cfg.eval_every} evaluates nothing: "
                          f"there is no validation data (give --val-data, or hold some of "
                          f"--data out with --val-fraction) and no --eval-tasks")
            note = busy_note(self.threads, self.threads_from, self.dist.device)
            if note:
                self._say(note)
            from llmtk.train.loggers import open_mirrors

            self.mirrors = open_mirrors(self.cfg.log_to, self.out, resolved, st.step)
            self.metrics.mirror = self.mirrors.log if self.mirrors else None
            if path is not None:
                self._event("resume", step=st.step, path=os.path.relpath(path, self.out))
                self._say(f"resumed from {path} at step {st.step}")
        if self.cfg.eval_tasks:  # --eval-tasks: task files are read (and checked) before training
            from llmtk.train.finetune import TaskEvaluator

            self.task_eval = TaskEvaluator(
                self.cfg.eval_tasks, whole=self._whole, tok=self.tok, chat=self.chat,
                autocast=self.autocast, run_dir=self.out, rank0=self.dist.rank == 0,
                n_bad=self.cfg.eval_bad_cases, max_new_tokens=self.cfg.eval_max_new_tokens,
                log=lambda: self.metrics.write if self.metrics is not None else None,
                say=self._say)
        self.model.train()
        self.meter = Meter()
        self.t_start = time.perf_counter()  # the step line's elapsed time (this process)
        return st

    def _load_checkpoint(self, path: str, resume: bool = False) -> TrainState:
        """Restore weights, optimizer, RNG and TrainState from checkpoint `path` (collective)."""
        from llmtk.train import checkpoint as C

        state = C.load_state(path)
        self._compat(state, path)
        saved = TrainState.from_checkpoint(state)
        if resume:
            check_resume(state, saved.step, path, self.cfg, self._say)
        self.ckpt.load(path, self.model, self.opt, sharded=self._sharded())
        return saved

    def _compat(self, state: dict, path: str, for_init: bool = False) -> None:
        check_shape(state, path, self.mcfg, say=self._say, for_init=for_init,
                    windows_per_step=self.windows_per_step, world=self.dist.world,
                    cache=self.cache)

    def _sharded(self) -> bool:
        """The model's parameters are DTensor shards (DCP checkpoints load per rank)."""
        return self.plan.sharded

    def _finish(self, st: TrainState, how: str = "done") -> None:
        self.ckpt.wait()
        self.batches.close()
        if self.metrics is not None:
            self.metrics.close()
        self._say(f"{how}: {st.step} steps, {st.tokens} tokens -> {self.out}")

    def _write_config(self) -> dict:
        resolved = {"train": self.cfg.to_dict(), "model": self.mcfg.to_dict(),
                    "params": self.n_params,
                    "world_size": self.dist.world, "parallel": self.parallel,
                    "layout": self.layout.to_dict(),
                    "compiled": self.compiled, "checkpoint_format": self.ckpt_format,
                    "device": self.dist.device, "threads": self.threads,
                    "tokenizer": self.tok.fingerprint(),
                    "data": self.data_meta, "cache": self.cache}
        from llmtk.io.atomic import atomic_file

        with atomic_file(os.path.join(self.out, "config.json")) as f:
            f.write((json.dumps(resolved, indent=1, sort_keys=True) + "\n").encode())
        from llmtk.train.report import start_lines

        m = self.mcfg
        for line in start_lines(
                model=self.cfg.model if not self.cfg.init_from else self.cfg.init_from,
                shape=f"{m.n_layer}x{m.d_model}", params=resolved["params"],
                steps=self.cfg.steps, batch=self.cfg.batch_size, procs=self.dist.world,
                grad_accum=self.cfg.grad_accum, seq_len=m.seq_len, lr=self.cfg.lr,
                schedule=self.cfg.schedule, warmup=self.cfg.warmup, device=self.dist.device,
                dtype="bf16" if self._bf16() else "fp32", compiled=self.compiled,
                threads=self.threads, config_path=os.path.join(self.out, "config.json")):
            self._say(line)
        return resolved

    def close_mirrors(self, ok: bool) -> None:
        if self.mirrors is not None:
            self.mirrors.close(ok)
            self.mirrors = None

    # ---------------------------------------------------------------- checkpoints
    def _checkpoint_meta(self, st: TrainState) -> dict:
        return {
            "step": st.step, "train_state": asdict(st), "world_size": self.dist.world,
            "windows_per_step": self.windows_per_step, "seq_len": self.mcfg.seq_len,
            "model_config": self.mcfg.to_dict(), "train_config": self.cfg.to_dict(),
            "data_cache": os.path.basename(self.cache), "tokenizer": self.tok.fingerprint(),
            "format": self.ckpt_format, "parallel": self.parallel,
            "qkv_layout": QKV_LAYOUT,  # wqkv grouped by kv head (model.group_qkv)
            # --sft: the template itself, which `llmtk eval` puts questions through
            "chat_template": self.chat.record() if self.chat is not None else None,
            # read by tools that predate TrainState
            "tokens": st.tokens, "data_position": st.position, "lr_scale": st.lr_scale,
        }

    def _checkpoint(self, st: TrainState, reason: str, wait: bool = False) -> None:
        """Checkpoint st.step (DCP: in the background unless wait or
        --no-async-checkpoint)."""
        self._settle(st)
        self.ckpt.save(st.step, self._checkpoint_meta(st), self.model, self.opt,
                       reason=reason, wait=wait or not self.cfg.async_checkpoint)

    def _preempt(self, st: TrainState, signum: int) -> None:
        name = signal.Signals(signum).name
        again = " (Ctrl-C again: stop now)" if signum == signal.SIGINT else ""
        before = f"step {self.ckpt.last_step}'s" if self.ckpt.last_step else "no checkpoint"
        self._say(f"{name}: writing a checkpoint at step {st.step}{again}; until it is "
                  f"complete, a resume starts from {before}")
        self._checkpoint(st, reason=name, wait=True)
        self._event("preempt", step=st.step, signal=name)
        self._say(f"{name}: checkpoint written at step {st.step}; the same command resumes "
                  f"from it; exiting")
        self._finish(st, "stopped")
        if signum == signal.SIGINT:
            raise KeyboardInterrupt  # interrupted, not done: exit status 130

    # ---------------------------------------------------------------- logging
    def _say(self, msg: str) -> None:
        if self.dist.rank == 0 and not self.cfg.quiet:
            print(msg, file=sys.stderr, flush=True)

    def _event(self, name: str, step: int, **fields) -> None:
        if self.metrics is not None:
            self.metrics.write({"step": step, "event": name, **fields, "time": time.time()})

    def _evaluate_log_sample(self, st: TrainState) -> None:
        cfg, last = self.cfg, st.step == self.cfg.steps
        val, per_source = None, {}
        if (self.val_data is not None or self.val_sets) and \
                (self._due(st, cfg.eval_every) if cfg.eval_every else last):
            with self.meter.exclude():
                # --val-data NAME=DIR: val/NAME/loss each; val_loss is their mean
                per_source = {f"val/{n}/loss": self._evaluate(s)
                              for n, s in self.val_sets.items()}
                val = self._evaluate(self.val_data) if self.val_data is not None else \
                    sum(per_source.values()) / len(per_source)
        if self._due(st, cfg.log_every):
            self._log_row(st, val, per_source)
        elif val is not None and self.metrics is not None:
            self.metrics.write({"step": st.step, "val_loss": val, **per_source,
                                "time": time.time()})
            self._say(f"step {st.step}: val_loss {val:.4f}")
        if self.task_eval is not None and (self._due(st, cfg.eval_every) if cfg.eval_every
                                           else last):  # --eval-tasks
            with self.meter.exclude():
                self.task_eval(st.step)
        if cfg.sample_every and self._due(st, cfg.sample_every):
            with self.meter.exclude():
                self._sample(st)

    def _log_row(self, st: TrainState, val_loss: float | None, extra: dict | None = None
                 ) -> None:
        step, (loss, grad_norm, not_finite), lr = self.last_row
        elapsed = self.meter.elapsed()
        (mem,) = self.dist.host_max([_mem_gb(self.dist.device)])
        tps = self.meter.tokens / elapsed
        # tps: the global batch's tokens (each once, whatever tp/pp split them), per second
        mfu = model_mfu(self.flops_per_token, tps, self.dist.world, self.peak) \
            if self.peak else None
        meter, self.meter = self.meter, Meter()
        if self.metrics is None or not_finite or step != st.step:
            return  # a skipped step has its `nan` event instead of a row
        row = {"step": step, "loss": loss, "lr": lr, "grad_norm": grad_norm,
               "tokens": st.tokens, "tokens_per_s": round(tps, 1),
               "mfu": None if mfu is None else round(mfu, 4), "mem_gb": round(mem, 3),
               "data_s": round(meter.data_s, 4),
               "step_s": round(elapsed / max(1, meter.steps), 4), "time": time.time()}
        if val_loss is not None:
            row["val_loss"] = val_loss
        row.update(extra or {})
        if hasattr(self.train_data, "source_tokens"):  # a blend: tokens/NAME
            row.update(self.train_data.source_tokens(st.position))
        if hasattr(self.train_data, "trained_tokens"):  # SFT: the loss-carrying tokens
            row["trained_tokens"] = self.train_data.trained_tokens(st.position)
        self.metrics.write(row)
        if not self.cfg.quiet:
            from llmtk.io.console import stderr_console
            from llmtk.train.report import step_line

            wall_per_step = (time.perf_counter() - meter.t) / max(1, meter.steps)  # all of it
            stderr_console().print(step_line(
                step, self.cfg.steps, loss, lr, tps, time.perf_counter() - self.t_start,
                (self.cfg.steps - step) * wall_per_step, val_loss=val_loss,
                grad_norm=grad_norm, mfu=mfu, mem_gb=row["mem_gb"],
                step_ms=row["step_s"] * 1000), markup=False, soft_wrap=True)

    # ---------------------------------------------------------------- eval / sample
    def _evaluate(self, sampler) -> float:
        import torch

        self.model.eval()
        total = torch.zeros((), dtype=torch.float64, device=self.dist.device)
        with torch.no_grad():
            for g in range(self.cfg.eval_batches):
                batch = [t.to(self.dist.device)  # (x, y), or (x, y, doc) for SFT
                         for t in sampler.batch(g * sampler.global_batch)]
                with self.autocast():
                    if self.pipe is not None:  # through every stage; the last has the loss
                        loss = self.pipe.forward_only(*batch)
                    else:
                        _, loss = self.model(*batch)
                if loss is not None:
                    total += loss.double()
        self.model.train()
        if self.dist.distributed:
            import torch.distributed as tdist

            tdist.all_reduce(total)
        return total.item() / (self.cfg.eval_batches * self.loss_ranks)

    def _whole(self):
        from llmtk.train.whole import whole_model

        return whole_model(self.built, self.plan, self.dist)

    def _sample(self, st: TrainState) -> None:
        import torch

        # rank 0 (every rank under FSDP2 alone): the whole model, any layout (whole.py);
        # only rank 0 logs (_event, _say)
        with self._whole() as model:
            if model is None:
                return  # another rank: waits until rank 0 has sampled
            ids = self.tok.encode(self.cfg.prompt) or [self.tok.eos_id]
            gen = torch.Generator(device=self.dist.device).manual_seed(self.cfg.seed + st.step)
            # Eager: prompts of growing length must not recompile (or evict) the training
            # graphs.
            with torch.compiler.set_stance("force_eager"), self.autocast():
                out = model.generate(torch.tensor([ids], device=self.dist.device),
                                     self.cfg.sample_tokens, temperature=0.8, top_k=50,
                                     generator=gen)
            text = self.tok.decode(out[0, len(ids):].tolist())
            self._event("sample", step=st.step, prompt=self.cfg.prompt, text=text)
            self._say(f"sample @ {st.step}: {self.cfg.prompt!r} -> {text!r}")


__all__ = ["LlmtkError", "StepResult", "TrainState", "Trainer", "lr_at", "model_config",
           "train"]
