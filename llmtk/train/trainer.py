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
from dataclasses import asdict, dataclass, field, replace

from llmtk.errors import ConfigError, LlmtkError, UsageError
from llmtk.train.config import TrainConfig
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
    bad: object              # tensor (P,): 1 where a parameter's gradient is not finite


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


# Settings that do not change what is trained (a moved run directory or cache included);
# a resume with other values is unremarkable.
_NOT_NOTED = {"out", "cache_dir", "resume", "quiet", "seed", "threads", "log_every", "log_to",
              "nccl_timeout", "keep_checkpoints", "async_checkpoint"}


def changed_settings(old: dict, new: dict) -> str:
    """'--lr 0.0003 -> 0.001, --steps 4 -> 8' for the settings a resume changes ('' if
    none). --seed has its own notice; settings the checkpoint predates are not compared."""
    def show(v) -> str:
        text = repr(v)
        return text if len(text) <= 40 else text[:37] + "..."

    return ", ".join(f"--{k.replace('_', '-')} {show(old[k])} -> {show(v)}"
                     for k, v in new.items() if k in old and old[k] != v and k not in _NOT_NOTED)


def model_config(cfg: TrainConfig, vocab_size: int):
    from llmtk.train import hf
    from llmtk.train.model_config import PRESETS, check_model_name

    if hf.is_hf_spec(cfg.init_from):
        return hf.init_model_config(cfg, vocab_size)
    check_model_name(cfg.model)
    mc = replace(PRESETS[cfg.model], vocab_size=vocab_size)
    overrides = {"n_layer": cfg.layers, "d_model": cfg.d_model, "n_head": cfg.heads,
                 "n_kv_head": cfg.kv_heads, "ffn_hidden": cfg.ffn_hidden, "seq_len": cfg.seq_len}
    mc = replace(mc, **{k: v for k, v in overrides.items() if v is not None})
    if cfg.untied:
        mc = replace(mc, tie_embeddings=False)
    if cfg.heads is not None and cfg.kv_heads is None and PRESETS[cfg.model].n_kv_head:
        mc = replace(mc, n_kv_head=None)
    try:
        mc.validate()
    except ValueError as e:
        raise UsageError(f"model shape: {e}") from None
    return mc


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
    lock = lock_run_dir(cfg.out) if rank == 0 else None  # before anything touches OUT
    try:
        tok = cache = None  # --sft: read by the Trainer (train/finetune.py), no token cache
        if not cfg.sft:
            tok = load_tokenizer(cfg.tokenizer)
            say = (lambda m: print(m, file=sys.stderr, flush=True)) \
                if rank == 0 and not cfg.quiet else None
            cache = D.build_cache(cfg.data, cfg.val_data, tok,
                                  cfg.cache_dir or os.path.join(cfg.out, "cache"),
                                  cfg.text_field, cfg.val_fraction, log=say)
        import torch  # only now: a run refused by the lock or the data never waits for it

        threads = torch.get_num_threads()  # --threads changes them; callers get theirs back
        dist = setup_dist(cfg.device, cfg.nccl_timeout)
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
    finally:
        if lock is not None:
            lock.release()


class Trainer:
    def __init__(self, cfg: TrainConfig, dist: Dist, tok, cache: str, faults: Faults):
        from llmtk.train import data as D

        self.cfg, self.dist, self.tok, self.cache, self.faults = cfg, dist, tok, cache, faults
        self.out = cfg.out
        self.ckpt_root = os.path.join(cfg.out, "checkpoints")
        self.chat = None  # --sft: the chat template (train/chat.py)
        if cfg.sft:  # issue 16: instruction data instead of the token cache (train/finetune.py)
            from llmtk.train.finetune import setup_sft

            setup_sft(self)  # tok, mcfg, train_data, val_data, *_per_step, cache, data_meta
        else:
            meta = D.read_meta(cache)
            self.mcfg = model_config(cfg, tok.vocab_size)
            T = self.mcfg.seq_len
            self.train_data = D.Sampler(D.Windows.open(cache, "train", T), cfg.batch_size,
                                        dist.world, dist.rank, cfg.seed)
            val_windows = D.Windows.open(cache, "val", T)
            self.val_data = (D.Sampler(val_windows, cfg.batch_size, dist.world, dist.rank,
                                       cfg.seed, shuffle=False) if len(val_windows) else None)
            self.windows_per_step = cfg.batch_size * dist.world * cfg.grad_accum
            self.tokens_per_step = self.windows_per_step * T
            self.data_meta = {"train_tokens": meta["train"]["tokens"],
                              "val_tokens": meta["val"]["tokens"],
                              "train_docs": meta["train"]["docs"],
                              "val_docs": meta["val"]["docs"]}
        self.batches = D.Prefetcher(self.train_data, self.train_data.global_batch, dist.device,
                                    threaded=dist.cuda)
        self.parallel = cfg.parallel if dist.distributed else "none"
        if self.parallel == "auto":
            self.parallel = "ddp"
        self.ckpt_format = cfg.checkpoint_format if cfg.checkpoint_format != "auto" else (
            "dcp" if self.parallel == "fsdp" else "full")
        self.compiled = cfg.compile if cfg.compile is not None else dist.cuda
        self.threads, self.threads_from = set_threads(cfg.threads)  # before the model
        self._build_model()
        self.pending: list[StepResult] = []   # steps not yet settled by the host
        self.last_row = None                  # (step, [loss, norm, not_finite], lr) settled
        self.last_ckpt_step = 0
        self.metrics = None                   # rank 0's MetricsWriter, opened in run()
        self.async_ckpt = None                # (future, step, t0, blocking_s) of a DCP write
        self.stopper = Stopper(dist)
        self.meter = Meter()
        self.t_start = time.perf_counter()    # reset when training starts (_start)
        self.mirrors = None                   # --log-to backends (rank 0), opened in run()
        self.task_eval = None                 # --eval-tasks (finetune.TaskEvaluator)

    # ---------------------------------------------------------------- model
    def _build_model(self) -> None:
        import torch

        from llmtk.train.model import GPT

        cfg, dist = self.cfg, self.dist
        if dist.device == "cpu":
            # Exact resume is tested on CPU; on GPU the fast (non-deterministic) kernels win.
            torch.use_deterministic_algorithms(True, warn_only=True)
        if self.parallel == "fsdp":
            model = self._build_fsdp()
        else:
            model = GPT(self.mcfg)
            # The init draws from a freshly seeded generator (not from what the layers'
            # constructors left), so an FSDP2 run, initialised after sharding, and this one
            # start from the same weights, on every rank.
            torch.manual_seed(cfg.seed)
            model.init_weights()
            if cfg.lora_rank:  # issue 16: freeze the base, train adapters (train/lora.py)
                from llmtk.train.lora import add_lora

                add_lora(model, cfg.lora_rank, cfg.lora_alpha, cfg.lora_targets,
                         cfg.lora_dropout)
            model.activation_checkpointing = cfg.activation_checkpointing
            model.to(dist.device)
        self.raw = model
        self.model = model
        if self.parallel == "ddp":
            from torch.nn.parallel import DistributedDataParallel as DDP

            self.model = DDP(model, device_ids=[dist.local_rank] if dist.cuda else None)
        if self.compiled and self.parallel != "fsdp":
            # Compiling the DDP wrapper (not the inner model) lets dynamo split the graph at
            # DDP's bucket boundaries, so gradient all-reduces overlap the backward.
            self.model.compile()
        # Only what trains (LoRA freezes the base): clipped, updated, checked for NaN.
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.param_names = [n for n, p in model.named_parameters() if p.requires_grad]

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

    def _build_fsdp(self):
        """FSDP2: build on the meta device (no full copy in memory), shard each block and
        the root, then materialise only this rank's shards and initialise them (the same
        values as an unsharded init with the same seed: GPT.init_weights)."""
        import torch
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        from llmtk.train.model import GPT

        with torch.device("meta"):
            model = GPT(self.mcfg)
        if self.cfg.lora_rank:  # adapters before sharding, so FSDP shards them too
            from llmtk.train.lora import add_lora

            add_lora(model, self.cfg.lora_rank, self.cfg.lora_alpha, self.cfg.lora_targets,
                     self.cfg.lora_dropout)
        model.activation_checkpointing = self.cfg.activation_checkpointing
        # bf16: gather parameters in bf16, reduce gradients in fp32 (torchtitan's policy);
        # the sharded master weights and the optimizer stay fp32.
        mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
              if self._bf16() else MixedPrecisionPolicy())
        for block in model.layers:
            if self.compiled:
                # Compile each block's forward: FSDP's all-gather/reshard hooks run around it
                # (eagerly, in Module.__call__), never inside a graph, so nothing breaks it.
                block.forward = torch.compile(block.forward)
            fully_shard(block, mp_policy=mp)
        if self.compiled:
            model.head_loss = torch.compile(model.head_loss)
        fully_shard(model, mp_policy=mp)
        model.to_empty(device=self.dist.device)
        torch.manual_seed(self.cfg.seed)
        model.init_weights()
        if self.cfg.lora_rank:
            from llmtk.train.lora import init_lora

            init_lora(model)  # to_empty left the adapters uninitialised
        return model

    def _bf16(self) -> bool:
        """bf16 autocast: on GPU by default, on request anywhere."""
        return self.cfg.dtype == "bf16" or (self.cfg.dtype == "auto" and self.dist.cuda)

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
            self._poll_async_checkpoint()
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
        values, bad = self._reduce_clip_update(loss_sum)
        st.step += 1
        st.position += self.windows_per_step
        st.tokens += self.tokens_per_step
        self.meter.tokens += self.tokens_per_step
        self.meter.steps += 1
        return StepResult(st.step, lr, values, bad)

    def _micro_steps(self, st: TrainState):
        import torch

        ga = self.cfg.grad_accum
        loss_sum = torch.zeros((), device=self.dist.device)
        scaled = hasattr(self.train_data, "loss_scale")
        for m in range(ga):
            t0 = time.perf_counter()
            batch = self.batches.get(st.position + m * self.train_data.global_batch)
            # batch: (x, y), or (x, y, doc) for SFT
            self.meter.data_s += time.perf_counter() - t0
            last = m == ga - 1
            if self.parallel == "fsdp":
                self.model.set_requires_gradient_sync(last)
            with (self.model.no_sync() if self.parallel == "ddp" and not last
                  else contextlib.nullcontext()):
                with self.autocast():
                    _, loss = self.model(*batch)
                if scaled:  # issue 16: SFT's mean over the step's trained tokens
                    loss = loss * self.train_data.loss_scale(st.position, m, ga)
                loss = self.faults.loss(st.step, loss)
                (loss / ga).backward()
            loss_sum += loss.detach().float()
        return loss_sum

    def _reduce_clip_update(self, loss_sum):
        """The step's one collective, then clip and step on the device. Returns the step's
        [loss, grad_norm, not_finite] and the per-parameter non-finite flags (device)."""
        import torch

        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        local = [g.to_local() if hasattr(g, "to_local") else g for g in grads]
        sq = torch.stack(torch._foreach_norm(local)).float() ** 2  # (P,)
        vec = torch.cat([(loss_sum / self.cfg.grad_accum).view(1), sq])
        if self.dist.distributed:
            import torch.distributed as tdist

            reduced = vec.clone()
            tdist.all_reduce(reduced)
            # FSDP: each rank holds a shard of every gradient, so the squares add up; DDP:
            # every rank holds the same full gradients, the local norms are the global ones.
            vec = torch.cat([reduced[:1] / self.dist.world,
                             reduced[1:] if self.parallel == "fsdp" else sq])
        loss, sq = vec[0], vec[1:]
        norm = sq.sum().sqrt()
        not_finite = (~(torch.isfinite(norm) & torch.isfinite(loss))).float()
        if self.cfg.grad_clip > 0:  # clip_grad_norm_'s rule, without its host sync
            torch._foreach_mul_(local, (self.cfg.grad_clip / (norm + 1e-6)).clamp(max=1.0))
        self.opt.found_inf = not_finite  # the fused kernel skips the update when it is 1
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return torch.stack([loss, norm, not_finite]), ~torch.isfinite(sq)

    def _settle(self, st: TrainState) -> bool:
        """Bring the host up to date with the pending steps (one device read): log
        non-finite steps, stop after too many, detect spikes. False if it rolled back."""
        import torch

        if not self.pending:
            return True
        pending, self.pending = self.pending, []
        rows = torch.stack([torch.cat([r.values, r.bad.float()]) for r in pending])
        values = rows.tolist()  # the one device -> host read
        for r, (loss, norm, not_finite, *bad) in zip(pending, values, strict=True):
            if not_finite:
                self._non_finite(st, r.step, loss, norm, bad)
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
                and self.last_ckpt_step > 0)

    def _rollback(self, st: TrainState, step: int, loss: float) -> None:
        """PaLM-style: back to the last checkpoint, half the learning rate, and skip the
        batches that led to the spike (the data position is not rewound)."""
        from llmtk.io.metrics import MetricsWriter, truncate_after
        from llmtk.train import checkpoint as C

        self._wait_async_checkpoint()
        path = C.find_latest(self.ckpt_root)
        saved = self._load_checkpoint(path)
        self.opt.zero_grad(set_to_none=True)
        if self.metrics is not None:
            # Rows after the checkpoint describe steps that are being redone: drop them.
            self.metrics.close()
            truncate_after(self.metrics.path, saved.step)
            self.metrics = MetricsWriter(self.metrics.path, mirror=self.metrics.mirror)
        self._event("rollback", step=step - 1, loss=loss, ema_loss=st.ema_loss, from_step=step,
                    to_step=saved.step, skipped_windows=st.position - saved.position)
        self._say(f"step {step - 1}: loss spike {loss:.3f} (avg {st.ema_loss:.3f}); rolled "
                  f"back to step {saved.step} with half the learning rate")
        st.step, st.tokens, st.ema_loss = saved.step, saved.tokens, saved.ema_loss
        st.bad_streak = saved.bad_streak
        st.lr_scale *= 0.5
        self.meter = Meter()
        if st.lr_scale < 1 / 16:
            raise CollectiveError(f"loss spikes persist after 4 rollbacks (now step {st.step}, "
                                  "lr x 1/32); lower --lr or check the data near this position")

    # ---------------------------------------------------------------- start and finish
    def _start(self) -> TrainState | None:
        """Choose the checkpoint (rank 0, past corrupt ones), load it everywhere, open the
        metrics log and write the resolved configuration. None: the run is complete."""
        from llmtk.io.metrics import MetricsWriter, truncate_after
        from llmtk.train import checkpoint as C
        from llmtk.train import hf

        path = self.dist.broadcast(self._choose_checkpoint() if self.dist.rank == 0 else None)
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
            self._set_full_state(hf.init_weights(self.cfg, self.mcfg))
            self._say(f"initialised weights from {self.cfg.init_from} (fresh optimizer and "
                      "schedule)")
        elif self.cfg.init_from:
            self._init_from(self.cfg.init_from)
        self.last_ckpt_step = st.step
        if self.dist.rank == 0:
            metrics_path = os.path.join(self.out, "metrics.jsonl")
            if path is not None:
                truncate_after(metrics_path, st.step)
            elif os.path.exists(metrics_path):
                os.replace(metrics_path, metrics_path + ".old")
            self.metrics = MetricsWriter(metrics_path)
            resolved = self._write_config()
            if self.cfg.warmup >= self.cfg.steps:
                self._say(warmup_warning(self.cfg))
            note = busy_note(self.threads, self.threads_from, self.dist.device)
            if note:
                self._say(note)
            from llmtk.train.loggers import open_mirrors

            self.mirrors = open_mirrors(self.cfg.log_to, self.out, resolved, st.step)
            self.metrics.mirror = self.mirrors.log if self.mirrors else None
            if path is not None:
                self._event("resume", step=st.step, path=os.path.relpath(path, self.out))
                self._say(f"resumed from {path} at step {st.step}")
        if self.cfg.eval_tasks:  # issue 16: task files are read (and checked) before training
            from llmtk.train.finetune import TaskEvaluator

            self.task_eval = TaskEvaluator(self)
        self.model.train()
        self.meter = Meter()
        self.t_start = time.perf_counter()  # the step line's elapsed time (this process)
        return st

    def _choose_checkpoint(self) -> str | None:
        """Rank 0: the checkpoint to resume from, or None for a fresh start."""
        from llmtk.train import checkpoint as C

        cfg, root = self.cfg, self.ckpt_root
        if cfg.resume == "never" and os.path.isdir(root) and os.listdir(root):
            # A fresh start must not later auto-resume an earlier run's checkpoints.
            n = 1
            while os.path.exists(f"{root}.old-{n}"):
                n += 1
            os.rename(root, f"{root}.old-{n}")
            self._say(f"--resume never: moved the earlier checkpoints to {root}.old-{n}")
        os.makedirs(root, exist_ok=True)
        if cfg.resume == "never":
            return None
        if cfg.resume == "auto":
            return C.find_latest(root, warn=self._say, repair=True)
        try:
            path = C.resolve(cfg.resume, warn=self._say)
        except C.CheckpointError as e:
            raise ConfigError("resume", str(e), value=cfg.resume) from None
        if path is None:
            raise ConfigError("resume", "no complete checkpoint there", value=cfg.resume)
        return path

    def _load_checkpoint(self, path: str, resume: bool = False) -> TrainState:
        """Restore weights, optimizer, RNG and TrainState from checkpoint `path` (collective)."""
        from llmtk.train import checkpoint as C

        state = C.load_state(path)
        self._compat(state, path)
        saved = TrainState.from_checkpoint(state)
        if resume:
            self._check_resume(state, saved, path)
        try:
            self._set_states(path, with_optim=True)
        except C.CheckpointError as e:
            raise CollectiveError(str(e)) from None
        except (RuntimeError, KeyError, ValueError) as e:  # e.g. written before vocab padding
            raise CollectiveError(f"{path}: its weights do not fit this model "
                                  f"({C._first_line(e)}); use --resume never", exit_code=2) \
                from None
        rng_file = os.path.join(path, f"rng-{self.dist.rank:05d}.pt")
        if os.path.exists(rng_file):
            if state["world_size"] == self.dist.world:
                C.set_rng_state(C.load_tensors(path, os.path.basename(rng_file)))
        elif state["world_size"] == self.dist.world:
            print(f"warning: {rng_file} is missing: rank {self.dist.rank}'s random state "
                  "starts fresh (dropout-free training is unaffected; sampling differs)",
                  file=sys.stderr, flush=True)
        return saved

    def _check_resume(self, state: dict, saved: TrainState, path: str) -> None:
        cfg = self.cfg
        if cfg.steps < saved.step:
            raise CollectiveError(
                f"--steps {cfg.steps} is below the step of the checkpoint to resume, "
                f"{saved.step} ({path}); raise --steps, or start over with --resume never",
                exit_code=2)
        old = state.get("train_config", {})
        old_seed = old.get("seed", cfg.seed)
        if old_seed != cfg.seed:
            self._say(f"note: --seed {cfg.seed} differs from the checkpoint's {old_seed}: the "
                      f"data order from step {saved.step} on follows seed {cfg.seed}")
        changed = changed_settings(old, cfg.to_dict())
        if changed:
            self._say(f"note: resuming {os.path.basename(path)} with changed settings (they "
                      f"apply from step {saved.step} on): {changed}")
        if cfg.init_from:
            self._say(f"note: resuming {path}; --init-from only applies to a fresh start "
                      "(--resume never)")

    def _init_from(self, source: str) -> None:
        from llmtk.train import checkpoint as C

        try:
            src = C.resolve(source, warn=self._say)
        except C.CheckpointError as e:
            raise CollectiveError(f"--init-from {source}: {e}", exit_code=2) from None
        if src is None:
            raise CollectiveError(f"--init-from {source}: no complete checkpoint there",
                                  exit_code=2)
        self._compat(C.load_state(src), src, for_init=True)
        self._set_states(src, with_optim=False)
        self._say(f"initialised weights from {src} (fresh optimizer and schedule)")

    def _compat(self, state: dict, path: str, for_init: bool = False) -> None:
        from llmtk.train.model_config import ModelConfig

        mine = self.mcfg.to_dict()
        # fields added later (qkv_bias) take their defaults
        theirs = ModelConfig(**state["model_config"]).to_dict() if "model_config" in state \
            else {}
        if for_init and theirs and theirs["seq_len"] != mine["seq_len"]:
            # No weight depends on it (RoPE; the rotary tables are rebuilt, not loaded):
            # fine-tuning at a shorter or longer context than pre-training is allowed.
            self._say(f"--init-from: sequence length {theirs['seq_len']} -> "
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
        if state["seq_len"] != self.mcfg.seq_len or \
                state["windows_per_step"] != self.windows_per_step:
            raise CollectiveError(
                f"resume: {path} was written with global batch {state['windows_per_step']} x "
                f"{state['seq_len']} tokens (world size {state['world_size']}); this run has "
                f"{self.windows_per_step} x {self.mcfg.seq_len} (world size {self.dist.world}). "
                "Keep batch-size x processes x grad-accum unchanged, or use --resume never",
                exit_code=2)
        if state["data_cache"] != os.path.basename(self.cache):
            self._say(f"warning: resuming {path} on different data (the data position is kept)")

    def _finish(self, st: TrainState) -> None:
        self._wait_async_checkpoint()
        self.batches.close()
        if self.metrics is not None:
            self.metrics.close()
        self._say(f"done: {st.step} steps, {st.tokens} tokens -> {self.out}")

    def _write_config(self) -> dict:
        resolved = {"train": self.cfg.to_dict(), "model": self.mcfg.to_dict(),
                    "params": sum(p.numel() for p in self.raw.parameters()),
                    "world_size": self.dist.world, "parallel": self.parallel,
                    "compiled": self.compiled, "checkpoint_format": self.ckpt_format,
                    "device": self.dist.device, "threads": self.threads,
                    "tokenizer": self.tok.fingerprint(),
                    "data": self.data_meta, "cache": self.cache}
        text = json.dumps(resolved, indent=1, sort_keys=True)
        from llmtk.train.data import _pid_alive

        for name in os.listdir(self.out):  # left by a run killed mid-write (we hold the lock)
            pid = name.removeprefix("config.json.tmp-")
            if pid != name and pid.isdigit() and not _pid_alive(int(pid)):
                os.remove(os.path.join(self.out, name))
        tmp = os.path.join(self.out, f"config.json.tmp-{os.getpid()}")
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, os.path.join(self.out, "config.json"))
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

    # ---------------------------------------------------------------- states
    def _set_states(self, path: str, with_optim: bool) -> None:
        """Load checkpoint weights (and optimizer state) into this run, whatever the formats:
        a DCP checkpoint into an FSDP run loads each rank's shards directly; every other
        combination goes through the consolidated full state dict."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        from llmtk.train import checkpoint as C

        if C.is_sharded(path) and self.parallel == "fsdp":
            import torch.distributed.checkpoint as dcp

            sd = self._sharded_states(with_optim)
            try:
                dcp.load(sd, checkpoint_id=os.path.join(path, "dcp"))
            except Exception as e:  # DCP wraps every rank's failure in CheckpointException
                raise C.CheckpointError(f"{path}/dcp: cannot load ({C._first_line(e)})") \
                    from None
            set_model_state_dict(self.model, sd["model"])
            if with_optim:
                set_optimizer_state_dict(self.model, self.opt, sd["optim"])
            return
        model_sd, optim_sd = C.load_full_state(path, with_optim)
        self._set_full_state(model_sd)
        if with_optim:
            opts = StateDictOptions(full_state_dict=True)
            set_optimizer_state_dict(self.model, self.opt, optim_sd, options=opts)

    def _set_full_state(self, model_sd: dict) -> None:
        """Load a consolidated (unsharded) model state dict, whatever the parallelism."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        set_model_state_dict(self.model, model_sd,
                             options=StateDictOptions(full_state_dict=True))

    def _sharded_states(self, with_optim: bool = True) -> dict:
        from torch.distributed.checkpoint.state_dict import (
            get_model_state_dict,
            get_optimizer_state_dict,
        )

        sd = {"model": get_model_state_dict(self.model)}
        if with_optim:
            sd["optim"] = get_optimizer_state_dict(self.model, self.opt)
        return sd

    def _full_states(self) -> tuple[dict, dict]:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_optimizer_state_dict,
        )

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return (get_model_state_dict(self.model, options=opts),
                get_optimizer_state_dict(self.model, self.opt, options=opts))

    # ---------------------------------------------------------------- checkpoints
    def _checkpoint_meta(self, st: TrainState) -> dict:
        return {
            "step": st.step, "train_state": asdict(st), "world_size": self.dist.world,
            "windows_per_step": self.windows_per_step, "seq_len": self.mcfg.seq_len,
            "model_config": self.mcfg.to_dict(), "train_config": self.cfg.to_dict(),
            "data_cache": os.path.basename(self.cache), "tokenizer": self.tok.fingerprint(),
            "format": self.ckpt_format, "parallel": self.parallel,
            # --sft: the template itself, which `llmtk eval` puts questions through
            "chat_template": self.chat.record() if self.chat is not None else None,
            # read by tools that predate TrainState
            "tokens": st.tokens, "data_position": st.position, "lr_scale": st.lr_scale,
        }

    def _checkpoint(self, st: TrainState, reason: str, wait: bool = False) -> None:
        """Write checkpoint st.step. Full format: rank 0 writes the consolidated state.
        DCP: every rank writes its shards, in the background unless wait (or
        --no-async-checkpoint); the previous background write is finished first."""
        from llmtk.train import checkpoint as C

        self._settle(st)
        self._wait_async_checkpoint()
        with self.meter.exclude():
            t0 = time.time()
            try:
                if self.ckpt_format == "full":
                    self._save_full(st, t0, reason)
                else:
                    self._save_dcp(st, t0, reason, wait or not self.cfg.async_checkpoint)
            except C.CheckpointError as e:
                raise CollectiveError(f"{e}; the last complete checkpoint (step "
                                      f"{self.last_ckpt_step}) is kept") from None
        self.last_ckpt_step = st.step

    def _save_full(self, st: TrainState, t0: float, reason: str) -> None:
        from llmtk.train import checkpoint as C

        model_sd, optim_sd = self._full_states()
        rank0 = self.dist.rank == 0
        if rank0:
            C.begin(self.ckpt_root, st.step)
        self.dist.barrier()
        tmp = C.tmp_dir(self.ckpt_root, st.step)
        if rank0:
            C.save_torch(model_sd, os.path.join(tmp, "model.pt"))
            C.save_torch(optim_sd, os.path.join(tmp, "optim.pt"))
        C.write_rank_files(tmp, self.dist.rank, self._checkpoint_meta(st) if rank0 else None)
        self._commit(st.step, t0, 0.0, reason)

    def _save_dcp(self, st: TrainState, t0: float, reason: str, wait: bool) -> None:
        import torch.distributed.checkpoint as dcp

        from llmtk.train import checkpoint as C

        if self.dist.rank == 0:
            C.begin(self.ckpt_root, st.step)
        self.dist.barrier()
        tmp = C.tmp_dir(self.ckpt_root, st.step)
        C.write_rank_files(tmp, self.dist.rank,
                           self._checkpoint_meta(st) if self.dist.rank == 0 else None)
        sd, target = self._sharded_states(), os.path.join(tmp, "dcp")
        group = self.dist.groups.get("ckpt")
        if wait:
            dcp.save(sd, checkpoint_id=target, process_group=group)
            self._commit(st.step, t0, 0.0, reason)
            return
        # The state is staged to host memory before async_save returns (the next update
        # may then change the weights); the files are written by a background thread.
        future = dcp.async_save(sd, checkpoint_id=target, process_group=group)
        self.async_ckpt = (future, st.step, t0, time.time() - t0, reason)

    def _commit(self, step: int, t0: float, blocking_s: float, reason: str) -> None:
        """Every rank's files are on disk: rank 0 seals the checkpoint (manifest, COMPLETE,
        rename, latest, prune) and logs it."""
        from llmtk.train import checkpoint as C

        self.dist.barrier()
        if self.dist.rank == 0:
            path = C.commit(self.ckpt_root, step, self.cfg.keep_checkpoints,
                            before_complete=lambda: self.faults.before_commit(step))
            with open(os.path.join(path, C.MANIFEST)) as f:
                nbytes = sum(v["size"] for v in json.load(f)["files"].values())
            fields = {"blocking_seconds": round(blocking_s, 3)} if blocking_s else {}
            self._event("checkpoint", step=step, path=os.path.relpath(path, self.out),
                        seconds=round(time.time() - t0, 3), bytes=nbytes, reason=reason,
                        format=self.ckpt_format, **fields)
        self.dist.barrier()

    def _poll_async_checkpoint(self) -> None:
        """Seal a background checkpoint once every rank's write is done (agreed by all)."""
        if self.async_ckpt is None:
            return
        (done,) = self.dist.host_max([0.0 if self.async_ckpt[0].done() else 1.0])
        if done == 0.0:
            self._wait_async_checkpoint()

    def _wait_async_checkpoint(self) -> None:
        if self.async_ckpt is None:
            return
        from llmtk.train import checkpoint as C

        future, step, t0, blocking_s, reason = self.async_ckpt
        self.async_ckpt = None
        try:
            future.result()
        except Exception as e:
            raise CollectiveError(f"checkpoint step {step}: the background write failed "
                                  f"({C._first_line(e)}); the last complete checkpoint "
                                  f"(step {self.last_ckpt_step}) is kept") from None
        with self.meter.exclude():
            self._commit(step, t0, blocking_s, reason)

    def _preempt(self, st: TrainState, signum: int) -> None:
        name = signal.Signals(signum).name
        self._say(f"{name}: writing a checkpoint at step {st.step} (until it is complete, the "
                  f"last one, step {self.last_ckpt_step}, is the one to resume from)")
        self._checkpoint(st, reason=name, wait=True)
        self._event("preempt", step=st.step, signal=name)
        self._say(f"{name}: checkpoint written at step {st.step}; exiting")
        self._finish(st)

    # ---------------------------------------------------------------- logging
    def _say(self, msg: str) -> None:
        if self.dist.rank == 0 and not self.cfg.quiet:
            print(msg, file=sys.stderr, flush=True)

    def _event(self, name: str, step: int, **fields) -> None:
        if self.metrics is not None:
            self.metrics.write({"step": step, "event": name, **fields, "time": time.time()})

    def _evaluate_log_sample(self, st: TrainState) -> None:
        cfg, last = self.cfg, st.step == self.cfg.steps
        val = None
        if self.val_data is not None and (self._due(st, cfg.eval_every) if cfg.eval_every
                                          else last):
            with self.meter.exclude():
                val = self._evaluate()
        if self._due(st, cfg.log_every):
            self._log_row(st, val)
        elif val is not None and self.metrics is not None:
            self.metrics.write({"step": st.step, "val_loss": val, "time": time.time()})
            self._say(f"step {st.step}: val_loss {val:.4f}")
        if self.task_eval is not None and (self._due(st, cfg.eval_every) if cfg.eval_every
                                           else last):  # issue 16: --eval-tasks
            with self.meter.exclude():
                self.task_eval(st.step)
        if cfg.sample_every and self._due(st, cfg.sample_every):
            with self.meter.exclude():
                self._sample(st)

    def _log_row(self, st: TrainState, val_loss: float | None) -> None:
        step, (loss, grad_norm, not_finite), lr = self.last_row
        elapsed = self.meter.elapsed()
        (mem,) = self.dist.host_max([_mem_gb(self.dist.device)])
        tps = self.meter.tokens / elapsed
        mfu = (self.flops_per_token * tps / (self.peak * self.dist.world)
               if self.peak else None)
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
        if hasattr(self.train_data, "trained_tokens"):  # issue 16: SFT's loss-carrying tokens
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
    def _evaluate(self) -> float:
        import torch

        self.model.eval()
        total = torch.zeros((), dtype=torch.float64, device=self.dist.device)
        with torch.no_grad():
            for g in range(self.cfg.eval_batches):
                batch = [t.to(self.dist.device)  # (x, y), or (x, y, doc) for SFT
                         for t in self.val_data.batch(g * self.val_data.global_batch)]
                with self.autocast():
                    _, loss = self.model(*batch)
                total += loss.double()
        self.model.train()
        if self.dist.distributed:
            import torch.distributed as tdist

            tdist.all_reduce(total)
        return total.item() / (self.cfg.eval_batches * self.dist.world)

    def _sample(self, st: TrainState) -> None:
        import torch

        ids = self.tok.encode(self.cfg.prompt) or [self.tok.eos_id]
        gen = torch.Generator(device=self.dist.device).manual_seed(self.cfg.seed + st.step)
        self.model.eval()
        # Eager: prompts of growing length must not recompile (or evict) the training graphs.
        with torch.compiler.set_stance("force_eager"), self.autocast():
            out = self.raw.generate(torch.tensor([ids], device=self.dist.device),
                                    self.cfg.sample_tokens, temperature=0.8, top_k=50,
                                    generator=gen)
        self.model.train()
        text = self.tok.decode(out[0, len(ids):].tolist())
        self._event("sample", step=st.step, prompt=self.cfg.prompt, text=text)
        self._say(f"sample @ {st.step}: {self.cfg.prompt!r} -> {text!r}")


__all__ = ["LlmtkError", "StepResult", "TrainState", "Trainer", "lr_at", "model_config",
           "train"]
