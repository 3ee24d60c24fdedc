"""The training loop: one process, DDP or FSDP2; resumable bit for bit; never loses work.

Order of one step (every rank runs the same sequence of collectives):
  1. lr from the schedule (a pure function of the step, so it needs no state to resume);
  2. grad_accum micro-batches: forward, loss / grad_accum, backward (DDP syncs on the last);
  3. clip gradients -> total grad norm (the same on every rank);
  4. one all-reduce of [loss, non-finite flag, stop flag]: every rank agrees to step,
     skip (non-finite loss or gradients) or stop (SIGTERM/SIGUSR1 seen by any rank);
  5. optimizer step (or skip, with an event naming the parameters with bad gradients);
  6. log, evaluate, sample, checkpoint as scheduled.
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
from dataclasses import dataclass, replace

from llmtk.errors import LlmtkError, UsageError
from llmtk.train.config import TrainConfig


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: str = "cpu"

    @property
    def distributed(self) -> bool:
        return self.world > 1

    def barrier(self) -> None:
        if self.distributed:
            import torch.distributed as dist

            dist.barrier()


def setup_dist(cfg: TrainConfig) -> Dist:
    import torch

    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    use_cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is available")
    device = f"cuda:{local_rank}" if use_cuda else "cpu"
    if use_cuda:
        torch.cuda.set_device(local_rank)
    if world > 1:
        import torch.distributed as dist

        # NCCL on GPU, gloo on CPU.
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return Dist(rank, world, local_rank, device)


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


def model_config(cfg: TrainConfig, vocab_size: int):
    from llmtk.train.model_config import PRESETS

    if cfg.model not in PRESETS:
        raise UsageError(f"--model must be one of {', '.join(PRESETS)}, got {cfg.model!r}")
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


class Stopper:
    """SIGTERM / SIGUSR1 (Slurm preemption) ask for a checkpoint and a clean exit."""

    def __init__(self):
        self.signum = 0
        for sig in (signal.SIGTERM, signal.SIGUSR1):
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        self.signum = signum


def _say(dist: Dist, cfg: TrainConfig, msg: str) -> None:
    if dist.rank == 0 and not cfg.quiet:
        print(msg, file=sys.stderr, flush=True)


def _mem_gb(device: str) -> float:
    """Peak memory of this process: CUDA allocator peak on GPU, peak RSS on CPU."""
    import torch

    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 1e9
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # Linux: KiB


def _fault(name: str, step: int) -> bool:
    """Test-only fault injection: LLMTK_TEST_<NAME>=<step>."""
    value = os.environ.get(f"LLMTK_TEST_{name}")
    return value is not None and int(value) == step


def train(cfg: TrainConfig) -> None:
    dist = setup_dist(cfg)
    try:
        Trainer(cfg, dist).run()
    except LlmtkError as e:
        if getattr(e, "collective", False) and dist.rank != 0:
            sys.exit(e.exit_code)  # every rank reached the same verdict; rank 0 says it
        raise
    finally:
        if dist.distributed:
            import torch.distributed as tdist

            if tdist.is_initialized():
                tdist.destroy_process_group()


class Trainer:
    def __init__(self, cfg: TrainConfig, dist: Dist):
        import torch

        from llmtk.text.tokenizer import load_tokenizer
        from llmtk.train import data as D

        self.cfg, self.dist = cfg, dist
        self.out = cfg.out
        self.ckpt_root = os.path.join(cfg.out, "checkpoints")
        if dist.rank == 0:
            if cfg.resume == "never" and os.path.isdir(self.ckpt_root) and os.listdir(
                    self.ckpt_root):
                # A fresh start must not later auto-resume an earlier run's checkpoints.
                n = 1
                while os.path.exists(f"{self.ckpt_root}.old-{n}"):
                    n += 1
                os.rename(self.ckpt_root, f"{self.ckpt_root}.old-{n}")
                _say(dist, cfg, f"--resume never: moved the earlier checkpoints to "
                     f"{self.ckpt_root}.old-{n}")
            os.makedirs(self.ckpt_root, exist_ok=True)
        if dist.device == "cpu":
            # Exact resume is tested on CPU; on GPU the fast (non-deterministic) kernels win.
            torch.use_deterministic_algorithms(True, warn_only=True)

        if cfg.sft:  # issue 16: instruction data instead of the token cache (train/finetune.py)
            from llmtk.train.finetune import setup_sft

            setup_sft(self)
            self._build_model()
            return
        # Data: the node's first process tokenizes (if no cache yet), the others wait.
        self.tok = load_tokenizer(cfg.tokenizer)
        cache_root = cfg.cache_dir or os.path.join(cfg.out, "cache")
        if dist.local_rank == 0:
            self.cache = D.build_cache(cfg.data, cfg.val_data, self.tok, cache_root,
                                       cfg.text_field, cfg.val_fraction,
                                       log=lambda m: _say(dist, cfg, m))
        dist.barrier()
        if dist.local_rank != 0:
            self.cache = D.build_cache(cfg.data, cfg.val_data, self.tok, cache_root,
                                       cfg.text_field, cfg.val_fraction)
        meta = D.read_meta(self.cache)

        self.mcfg = model_config(cfg, self.tok.vocab_size)
        T = self.mcfg.seq_len
        self.train_data = D.Sampler(D.Windows.open(self.cache, "train", T), cfg.batch_size,
                                    dist.world, dist.rank, cfg.seed)
        val_windows = D.Windows.open(self.cache, "val", T)
        self.val_data = (D.Sampler(val_windows, cfg.batch_size, dist.world, dist.rank, cfg.seed,
                                   shuffle=False) if len(val_windows) else None)
        self.windows_per_step = cfg.batch_size * dist.world * cfg.grad_accum
        self.tokens_per_step = self.windows_per_step * T
        self.data_meta = {"train_tokens": meta["train"]["tokens"],
                          "val_tokens": meta["val"]["tokens"],
                          "train_docs": meta["train"]["docs"], "val_docs": meta["val"]["docs"]}
        self._build_model()

    # ---------------------------------------------------------------- model
    def _build_model(self) -> None:
        import torch

        from llmtk.train.model import GPT

        cfg, dist = self.cfg, self.dist
        torch.manual_seed(cfg.seed)  # the same initial weights on every rank
        model = GPT(self.mcfg)
        if cfg.lora_rank:  # issue 16: freeze the base, train adapters (train/lora.py)
            from llmtk.train.lora import add_lora

            add_lora(model, cfg.lora_rank, cfg.lora_alpha, cfg.lora_targets, cfg.lora_dropout)
        model.activation_checkpointing = cfg.activation_checkpointing
        model.to(dist.device)
        self.raw = model
        parallel = cfg.parallel
        if parallel == "auto":
            parallel = "ddp" if dist.distributed else "none"
        if parallel != "none" and not dist.distributed:
            parallel = "none"  # DDP/FSDP of one process is the plain model
        self.parallel = parallel
        if cfg.compile:
            model.compile()
        if parallel == "ddp":
            from torch.nn.parallel import DistributedDataParallel as DDP

            ids = [dist.local_rank] if dist.device.startswith("cuda") else None
            self.model = DDP(model, device_ids=ids)
        elif parallel == "fsdp":
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

            # bf16: gather parameters in bf16, reduce gradients in fp32 (torchtitan's policy);
            # the sharded master weights and the optimizer stay fp32.
            mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
                  if self._bf16() else MixedPrecisionPolicy())
            for block in model.layers:
                fully_shard(block, mp_policy=mp)
            fully_shard(model, mp_policy=mp)
            self.model = model
        else:
            self.model = model

        # AdamW, decoupled weight decay on matrices only (not norms), nanoGPT's grouping.
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": cfg.weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
        fused = dist.device.startswith("cuda") and parallel != "fsdp"
        self.opt = torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                                     **({"fused": True} if fused else {}))
        self.param_names = {p: n for n, p in model.named_parameters()}

        self.autocast = (
            (lambda: torch.autocast(device_type=dist.device.split(":")[0], dtype=torch.bfloat16))
            if self._bf16() else contextlib.nullcontext)

        # MFU: the same PaLM formula and peak table that `llmtk estimate` prints.
        from llmtk.estimate.flops import flops_per_token_for_config
        from llmtk.estimate.hardware import device_peak_flops

        self.flops_per_token = flops_per_token_for_config(self.mcfg)
        self.peak = (device_peak_flops(torch.cuda.get_device_name(dist.local_rank))
                     if dist.device.startswith("cuda") else None)

    def _bf16(self) -> bool:
        """bf16 autocast: on GPU by default, on request anywhere."""
        return self.cfg.dtype == "bf16" or (self.cfg.dtype == "auto"
                                            and self.dist.device.startswith("cuda"))

    def _state_options(self, full_for_load: bool = False):
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        return StateDictOptions(full_state_dict=True, cpu_offload=not full_for_load)

    def _get_states(self) -> tuple[dict, dict]:
        from torch.distributed.checkpoint.state_dict import (
            get_model_state_dict,
            get_optimizer_state_dict,
        )

        opts = self._state_options()
        return (get_model_state_dict(self.model, options=opts),
                get_optimizer_state_dict(self.model, self.opt, options=opts))

    def _set_states(self, model_sd: dict, optim_sd: dict | None) -> None:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        opts = StateDictOptions(full_state_dict=True)
        set_model_state_dict(self.model, model_sd, options=opts)
        if optim_sd is not None:
            set_optimizer_state_dict(self.model, self.opt, optim_sd, options=opts)

    # ---------------------------------------------------------------- checkpoints
    def _compat(self, state: dict, path: str, for_init: bool = False) -> None:
        mine = self.mcfg.to_dict()
        theirs = state["model_config"]
        if theirs != mine:
            diff = ", ".join(f"{k}: {theirs.get(k)} -> {v}" for k, v in mine.items()
                             if theirs.get(k) != v)
            what = "--init-from" if for_init else "resume"
            raise UsageError(f"{what}: {path} has a different model shape ({diff}); "
                             "use the same model flags" + ("" if for_init else
                                                           " or --resume never"))
        if for_init:
            return
        if state["seq_len"] != self.mcfg.seq_len or \
                state["windows_per_step"] != self.windows_per_step:
            raise UsageError(
                f"resume: {path} was written with global batch {state['windows_per_step']} x "
                f"{state['seq_len']} tokens (world size {state['world_size']}); this run has "
                f"{self.windows_per_step} x {self.mcfg.seq_len} (world size {self.dist.world}). "
                "Keep batch-size x processes x grad-accum unchanged, or use --resume never")
        if state["data_cache"] != os.path.basename(self.cache):
            _say(self.dist, self.cfg, f"warning: resuming {path} on different data "
                 "(the data position is kept)")

    def _resume(self) -> None:
        from llmtk.train import checkpoint as C

        cfg, dist = self.cfg, self.dist
        self.step, self.tokens, self.position, self.lr_scale = 0, 0, 0, 1.0
        self.bad_streak = 0
        self.resumed_from = None
        path = None
        if cfg.resume == "auto":
            path = C.find_latest(self.ckpt_root)
        elif cfg.resume != "never":
            path = C.resolve(cfg.resume)
            if path is None:
                raise UsageError(f"--resume {cfg.resume}: no complete checkpoint there")
        if path is not None:
            state = C.load_state(path)
            self._compat(state, path)
            self._set_states(C.load_tensors(path, "model.pt"), C.load_tensors(path, "optim.pt"))
            rng_file = f"rng-{dist.rank:05d}.pt"
            if state["world_size"] == dist.world and os.path.exists(os.path.join(path, rng_file)):
                C.set_rng_state(C.load_tensors(path, rng_file))
            self.step, self.tokens = state["step"], state["tokens"]
            self.position, self.lr_scale = state["data_position"], state["lr_scale"]
            self.resumed_from = path
            if cfg.init_from:
                _say(dist, cfg, f"note: resuming {path}; --init-from only applies to a fresh "
                     "start (--resume never)")
            return
        if cfg.init_from:
            src = C.resolve(cfg.init_from)
            if src is None:
                raise UsageError(f"--init-from {cfg.init_from}: no complete checkpoint there")
            self._compat(C.load_state(src), src, for_init=True)
            self._set_states(C.load_tensors(src, "model.pt"), None)
            _say(dist, cfg, f"initialised weights from {src} (fresh optimizer and schedule)")

    def _checkpoint(self, reason: str) -> None:
        from llmtk.train import checkpoint as C

        model_sd, optim_sd = self._get_states()
        state = {
            "step": self.step, "tokens": self.tokens, "data_position": self.position,
            "lr_scale": self.lr_scale, "world_size": self.dist.world,
            "windows_per_step": self.windows_per_step, "seq_len": self.mcfg.seq_len,
            "model_config": self.mcfg.to_dict(), "train_config": self.cfg.to_dict(),
            "data_cache": os.path.basename(self.cache), "tokenizer": self.tok.fingerprint(),
            "schedule": {"name": self.cfg.schedule, "step": self.step},
        }
        step = self.step

        def crash_hook():
            if _fault("CRASH_IN_CHECKPOINT", step):
                os.kill(os.getpid(), signal.SIGKILL)

        path, seconds = C.save(self.ckpt_root, self.step, rank=self.dist.rank,
                               barrier=self.dist.barrier,
                               model_state=model_sd if self.dist.rank == 0 else None,
                               optim_state=optim_sd if self.dist.rank == 0 else None,
                               state=state, keep=self.cfg.keep_checkpoints,
                               before_complete=crash_hook)
        self._event("checkpoint", path=os.path.relpath(path, self.out),
                    seconds=round(seconds, 3), reason=reason)
        self.last_ckpt_step = self.step

    # ---------------------------------------------------------------- logging
    def _event(self, name: str, **fields) -> None:
        if self.dist.rank == 0:
            self.metrics.write({"step": self.step, "event": name, **fields, "time": time.time()})

    def _all_reduce(self, values: list[float], op: str = "sum") -> list[float]:
        import torch

        t = torch.tensor(values, dtype=torch.float64, device=self.dist.device)
        if self.dist.distributed:
            import torch.distributed as tdist

            tdist.all_reduce(t, op=tdist.ReduceOp.MAX if op == "max" else tdist.ReduceOp.SUM)
        return t.tolist()

    def _bad_params(self) -> list[str]:
        """Names of parameters whose gradient holds a NaN/Inf, gathered from all ranks."""
        import torch

        bad = []
        for p, name in self.param_names.items():
            g = p.grad
            if g is None:
                continue
            if hasattr(g, "to_local"):
                g = g.to_local()
            if not torch.isfinite(g).all():
                bad.append(name)
        if self.dist.distributed:
            import torch.distributed as tdist

            gathered: list = [None] * self.dist.world
            tdist.all_gather_object(gathered, bad)
            bad = sorted({n for lst in gathered for n in lst})
        return bad

    # ---------------------------------------------------------------- eval / sample
    def _evaluate(self) -> float | None:
        import torch

        if self.val_data is None:
            return None
        self.model.eval()
        total = 0.0
        with torch.no_grad():
            for g in range(self.cfg.eval_batches):
                batch = [t.to(self.dist.device)  # (x, y), or (x, y, doc) for SFT
                         for t in self.val_data.batch(g * self.val_data.global_batch)]
                with self.autocast():
                    _, loss = self.model(*batch)
                total += loss.item()
        self.model.train()
        (s,) = self._all_reduce([total])
        return s / (self.cfg.eval_batches * self.dist.world)

    def _sample(self) -> None:
        import torch

        ids = self.tok.encode(self.cfg.prompt) or [self.tok.eos_id]
        gen = torch.Generator(device=self.dist.device).manual_seed(self.cfg.seed + self.step)
        self.model.eval()
        module = self.model.module if self.parallel == "ddp" else self.model
        with self.autocast():
            out = module.generate(torch.tensor([ids], device=self.dist.device),
                                  self.cfg.sample_tokens, temperature=0.8, top_k=50,
                                  generator=gen)
        self.model.train()
        text = self.tok.decode(out[0, len(ids):].tolist())
        self._event("sample", prompt=self.cfg.prompt, text=text)
        _say(self.dist, self.cfg, f"sample @ {self.step}: {self.cfg.prompt!r} -> {text!r}")

    # ---------------------------------------------------------------- the loop
    def run(self) -> None:
        import torch

        from llmtk.curves.metrics import MetricsWriter, truncate_after

        cfg, dist = self.cfg, self.dist
        self._resume()
        metrics_path = os.path.join(self.out, "metrics.jsonl")
        if dist.rank == 0:
            if self.resumed_from is not None:
                truncate_after(metrics_path, self.step)
            elif os.path.exists(metrics_path):
                os.replace(metrics_path, metrics_path + ".old")
            self.metrics = MetricsWriter(metrics_path)
            resolved = {"train": cfg.to_dict(), "model": self.mcfg.to_dict(),
                        "params": sum(p.numel() for p in self.raw.parameters()),
                        "world_size": dist.world, "parallel": self.parallel,
                        "device": dist.device, "tokenizer": self.tok.fingerprint(),
                        "data": self.data_meta, "cache": self.cache}
            text = json.dumps(resolved, indent=1, sort_keys=True)
            with open(os.path.join(self.out, "config.json.tmp"), "w") as f:
                f.write(text + "\n")
            os.replace(os.path.join(self.out, "config.json.tmp"),
                       os.path.join(self.out, "config.json"))
            _say(dist, cfg, f"llmtk train: resolved config\n{text}")
            if self.resumed_from:
                self._event("resume", path=os.path.relpath(self.resumed_from, self.out))
                _say(dist, cfg, f"resumed from {self.resumed_from} at step {self.step}")
        self.last_ckpt_step = self.step
        task_eval = None
        if cfg.eval_tasks:  # issue 16: task files are read (and checked) before training
            from llmtk.train.finetune import TaskEvaluator

            task_eval = TaskEvaluator(self)
        stopper = Stopper()
        self.model.train()
        params = [p for p in self.raw.parameters()]
        ema = None
        window = {"t": time.time(), "tokens": 0, "data_s": 0.0, "steps": 0}

        while self.step < cfg.steps:
            lr = lr_at(self.step, cfg) * self.lr_scale
            for group in self.opt.param_groups:
                group["lr"] = lr
            loss_sum = torch.zeros((), device=dist.device)  # read once per step (one sync)
            for m in range(cfg.grad_accum):
                t0 = time.time()
                batch = [t.to(dist.device, non_blocking=True)  # (x, y), or (x, y, doc) for SFT
                         for t in self.train_data.batch(
                             self.position + m * self.train_data.global_batch)]
                window["data_s"] += time.time() - t0
                sync = m == cfg.grad_accum - 1
                ctx = (self.model.no_sync() if self.parallel == "ddp" and not sync
                       else contextlib.nullcontext())
                if self.parallel == "fsdp":
                    self.model.set_requires_gradient_sync(sync)
                with ctx:
                    with self.autocast():
                        _, loss = self.model(*batch)
                    if hasattr(self.train_data, "loss_scale"):  # issue 16: SFT token weighting
                        loss = loss * self.train_data.loss_scale(self.position, m, cfg.grad_accum)
                    if _fault("NAN_LOSS", self.step):
                        loss = loss * float("nan")
                    if _fault("SPIKE_LOSS", self.step):
                        del os.environ["LLMTK_TEST_SPIKE_LOSS"]  # once, not on the redo
                        loss = loss * 10.0
                    (loss / cfg.grad_accum).backward()
                loss_sum += loss.detach().float()
            loss_sum = loss_sum.item()
            max_norm = cfg.grad_clip if cfg.grad_clip > 0 else float("inf")
            norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
            if hasattr(norm, "full_tensor"):
                norm = norm.full_tensor()
            grad_norm = norm.item()
            local_bad = 0.0 if (math.isfinite(loss_sum) and math.isfinite(grad_norm)) else 1.0
            total, n_bad, n_stop = self._all_reduce(
                [loss_sum / cfg.grad_accum, local_bad, float(stopper.signum)])
            loss_avg = total / dist.world
            self.position += self.windows_per_step
            self.tokens += self.tokens_per_step

            if n_bad > 0 or not math.isfinite(loss_avg):
                self.bad_streak += 1
                bad = self._bad_params()
                action = "stop" if (cfg.on_nan == "stop"
                                    or self.bad_streak >= cfg.max_bad_steps) else "skip"
                self.opt.zero_grad(set_to_none=True)
                self.step += 1
                self._event("nan", loss=loss_avg, grad_norm=grad_norm, bad_params=bad,
                            action=action, consecutive=self.bad_streak)
                _say(dist, cfg, f"step {self.step}: non-finite loss/gradients "
                     f"(loss {loss_avg}, grad norm {grad_norm}); skipped the update; "
                     f"bad gradients in: {', '.join(bad[:8]) or 'none (loss only)'}")
                if action == "stop":
                    if dist.rank == 0:
                        self.metrics.sync()
                    why = ("--on-nan stop" if cfg.on_nan == "stop"
                           else f"{self.bad_streak} consecutive non-finite steps")
                    err = LlmtkError(
                        f"stopped at step {self.step}: {why}; first bad parameters: "
                        f"{', '.join(bad[:5]) or 'none (the loss itself)'}. Lower --lr, raise "
                        f"--warmup or lower --grad-clip; the last checkpoint is kept")
                    err.collective = True
                    raise err
                continue

            if (cfg.on_spike == "rollback" and ema is not None and self.step > cfg.warmup
                    and loss_avg > cfg.spike_factor * ema and self.last_ckpt_step > 0):
                self._rollback(loss_avg, ema)
                continue
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            self.bad_streak = 0
            self.step += 1
            ema = loss_avg if ema is None else 0.95 * ema + 0.05 * loss_avg
            window["tokens"] += self.tokens_per_step
            window["steps"] += 1

            last = self.step == cfg.steps
            val = None
            if self.val_data is not None and (
                    (cfg.eval_every and self.step % cfg.eval_every == 0) or last):
                t_eval = time.time()
                val = self._evaluate()
                window["t"] += time.time() - t_eval  # throughput counts training only
            if self.step % cfg.log_every == 0 or last:
                self._log_row(loss_avg, lr, grad_norm, window, val)
                window = {"t": time.time(), "tokens": 0, "data_s": 0.0, "steps": 0}
            elif val is not None and dist.rank == 0:
                self.metrics.write({"step": self.step, "val_loss": val, "time": time.time()})
                _say(dist, cfg, f"step {self.step}: val_loss {val:.4f}")
            if task_eval is not None and ((cfg.eval_every and self.step % cfg.eval_every == 0)
                                          or last):  # issue 16
                t_eval = time.time()
                task_eval()
                window["t"] += time.time() - t_eval
            t_extra = time.time()
            if cfg.sample_every and (self.step % cfg.sample_every == 0 or last):
                self._sample()
            if n_stop > 0:
                signame = signal.Signals(int(stopper.signum or signal.SIGTERM)).name \
                    if stopper.signum else "signal"
                self._checkpoint(reason=signame)
                self._event("preempt", signal=signame)
                _say(dist, cfg, f"{signame}: checkpoint written at step {self.step}; exiting")
                return
            if last or (cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0):
                self._checkpoint(reason="final" if last else "scheduled")
            window["t"] += time.time() - t_extra  # samples and checkpoints are not training
            die = os.environ.get("LLMTK_TEST_DIE_ONCE")  # tests: a worker crash, once
            if die and int(die.split(":")[1]) == self.step and not os.path.exists(
                    die.split(":")[0]):
                open(die.split(":")[0], "w").close()
                os._exit(17)
            if os.environ.get("LLMTK_TEST_STEP_DELAY"):  # tests: time to send a signal
                time.sleep(float(os.environ["LLMTK_TEST_STEP_DELAY"]))
        if dist.rank == 0:
            self.metrics.close()
        _say(dist, cfg, f"done: {self.step} steps, {self.tokens} tokens -> {self.out}")

    def _rollback(self, loss: float, ema: float) -> None:
        """PaLM-style: back to the last checkpoint, half the learning rate, and skip the
        batches that led to the spike (the data position is not rewound)."""
        from llmtk.train import checkpoint as C

        path = C.find_latest(self.ckpt_root)
        position = self.position
        state = C.load_state(path)
        self._set_states(C.load_tensors(path, "model.pt"), C.load_tensors(path, "optim.pt"))
        self.opt.zero_grad(set_to_none=True)
        if self.dist.rank == 0:
            # Rows after the checkpoint describe steps that are being redone: drop them.
            from llmtk.curves.metrics import MetricsWriter, truncate_after

            self.metrics.close()
            truncate_after(self.metrics.path, state["step"])
            self.metrics = MetricsWriter(self.metrics.path)
        self._event("rollback", loss=loss, ema_loss=ema, from_step=self.step + 1,
                    to_step=state["step"], skipped_windows=position - state["data_position"])
        _say(self.dist, self.cfg, f"step {self.step}: loss spike {loss:.3f} (avg {ema:.3f}); "
             f"rolled back to step {state['step']} with half the learning rate")
        self.step, self.tokens = state["step"], state["tokens"]
        self.position = position
        self.lr_scale *= 0.5
        if self.lr_scale < 1 / 16:
            err = LlmtkError(f"loss spikes persist after 4 rollbacks (now step {self.step}, "
                             "lr x 1/32); lower --lr or check the data near this position")
            err.collective = True
            raise err

    def _log_row(self, loss: float, lr: float, grad_norm: float, window: dict,
                 val_loss: float | None) -> None:
        elapsed = max(time.time() - window["t"], 1e-9)
        (mem,) = self._all_reduce([_mem_gb(self.dist.device)], op="max")
        tps = window["tokens"] / elapsed
        mfu = (self.flops_per_token * tps / (self.peak * self.dist.world)
               if self.peak else None)
        if self.dist.rank != 0:
            return
        row = {"step": self.step, "loss": loss, "lr": lr, "grad_norm": grad_norm,
               "tokens": self.tokens, "tokens_per_s": round(tps, 1),
               "mfu": None if mfu is None else round(mfu, 4), "mem_gb": round(mem, 3),
               "data_s": round(window["data_s"], 4),
               "step_s": round(elapsed / max(1, window["steps"]), 4), "time": time.time()}
        if val_loss is not None:
            row["val_loss"] = val_loss
        if hasattr(self.train_data, "trained_tokens"):  # issue 16: SFT's loss-carrying tokens
            row["trained_tokens"] = self.train_data.trained_tokens(self.position)
        self.metrics.write(row)
        if not self.cfg.quiet:
            from llmtk.io.console import stderr_console

            mfu_s = f" | mfu {mfu:.1%}" if mfu is not None else ""
            val_s = f" | val {val_loss:.4f}" if val_loss is not None else ""
            stderr_console().print(
                f"[bold]step {self.step}/{self.cfg.steps}[/bold] | loss [cyan]{loss:.4f}[/cyan]"
                f"{val_s} | lr {lr:.2e} | gnorm {grad_norm:.3f} | {tps:,.0f} tok/s{mfu_s} | "
                f"{row['step_s'] * 1000:.0f} ms/step | {row['mem_gb']:.2f} GB", soft_wrap=True)
