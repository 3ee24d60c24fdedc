"""GPU readiness check for `llmtk train`: throughput, MFU, memory, syncs, checkpoints.

For each model (350M and 1B, bf16, T=2048 by default) and for eager and torch.compile,
it runs llmtk's own training step (llmtk.train.trainer.Trainer) and reports:
  tokens/s and MFU (llmtk.estimate's formula: 6N + causal attention, bf16 peak),
  peak memory, the GPU-busy fraction (kernel time / wall time, torch.profiler),
  host syncs per step (torch.cuda.set_sync_debug_mode counts them),
  checkpoint seconds and bytes (a synchronous DCP/full checkpoint),
and a plain PyTorch loop of the same model and shape (GPT + fused AdamW + autocast, no
logging, no NaN checks, no checkpoints) as the ceiling, with llmtk's ratio to it.

Tokens are random ids of a 50,257-token vocabulary (GPT-2's size, padded to 50,304),
written straight into a token cache, so no tokenizer or corpus is needed.

Reproduce:
    python benchmarks/gpu_check.py                   # one H100/H200: under 8 minutes
    python benchmarks/gpu_check.py --models 350m --steps 30
    .venv/bin/python benchmarks/gpu_check.py --cpu-smoke   # tiny model on CPU (tests run it)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class SyntheticTokenizer:
    """Just enough of a tokenizer for the trainer: a vocabulary size and an EOS id."""

    def __init__(self, vocab_size: int):
        self.vocab_size, self.eos_id = vocab_size, vocab_size - 1

    def fingerprint(self) -> str:
        return f"synthetic-{self.vocab_size}"

    def encode(self, text: str) -> list[int]:
        return [b % self.vocab_size for b in text.encode()]

    def decode(self, ids: list[int]) -> str:
        return " ".join(map(str, ids))


def synthetic_cache(root: str, vocab: int, tokens: int) -> str:
    import numpy as np

    d = os.path.join(root, "cache")
    os.makedirs(d, exist_ok=True)
    ids = np.random.default_rng(0).integers(0, vocab, tokens, dtype=np.uint16)
    ids.tofile(os.path.join(d, "train-00000.bin"))
    meta = {"version": 1, "dtype": "uint16", "tokenizer": f"synthetic-{vocab}",
            "vocab_size": vocab, "eos_id": vocab - 1, "text_field": "text",
            "val_fraction": 0.0, "inputs": [], "val_inputs": [],
            "train": {"docs": 1, "tokens": tokens,
                      "shards": [{"file": "train-00000.bin", "tokens": tokens}]},
            "val": {"docs": 0, "tokens": 0, "shards": []}}
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f)
    return d


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def flash_attention_ok(head_dim: int) -> bool | None:
    """Whether SDPA's flash backend takes bf16 causal attention at this head dim (CUDA)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if not torch.cuda.is_available():
        return None
    q = torch.randn(2, 16, 256, head_dim, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(2, 8, 256, head_dim, device="cuda", dtype=torch.bfloat16)  # GQA 16/8
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=True)
        return True
    except RuntimeError:
        return False


def bench_llmtk(args, model: str, compile_: bool, cache: str, tok, workdir: str) -> dict:
    import torch

    from llmtk.train.config import TrainConfig
    from llmtk.train.runtime import Faults, setup_dist
    from llmtk.train.trainer import Trainer

    out = os.path.join(workdir, f"run-{model}-{'compile' if compile_ else 'eager'}")
    os.makedirs(out, exist_ok=True)
    cfg = TrainConfig(data=["synthetic"], out=out, model=model, seq_len=args.seq_len,
                      batch_size=args.batch_size, steps=10**6, warmup=10, lr=3e-4,
                      log_every=10**6, compile=compile_, device=args.device,
                      dtype=args.dtype, quiet=True, resume="never", keep_checkpoints=1,
                      checkpoint_format="full")
    dist = setup_dist(cfg.device, cfg.nccl_timeout)
    if dist.cuda:
        torch.cuda.reset_peak_memory_stats()
    trainer = Trainer(cfg, dist, tok, cache, Faults())
    st = trainer._start()
    t0 = time.perf_counter()
    for _ in range(args.warmup):  # compile, allocator warm-up
        trainer.pending.append(trainer._train_step(st))
    trainer._settle(st)
    warm_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    for _ in range(args.steps):
        trainer.pending.append(trainer._train_step(st))
    trainer._settle(st)  # the one read: waits for the device to finish the steps
    elapsed = time.perf_counter() - t0
    tps = args.steps * trainer.tokens_per_step / elapsed

    syncs = None
    if dist.cuda:  # every host sync inside the step warns once in this mode
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            for _ in range(args.profile_steps):
                trainer.pending.append(trainer._train_step(st))
            torch.cuda.set_sync_debug_mode("default")
        syncs = sum("synchroniz" in str(w.message) for w in caught) / args.profile_steps
        trainer._settle(st)

    busy = None
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dist.cuda else [])
    with profile(activities=activities) as prof:
        t1 = time.perf_counter()
        for _ in range(args.profile_steps):
            trainer.pending.append(trainer._train_step(st))
        trainer._settle(st)
        wall_us = (time.perf_counter() - t1) * 1e6
    if dist.cuda:
        kernel_us = sum(e.self_device_time_total for e in prof.key_averages())
        busy = min(1.0, kernel_us / wall_us)

    t0 = time.perf_counter()
    trainer._checkpoint(st, "bench", wait=True)
    ckpt_s = time.perf_counter() - t0
    with open(os.path.join(out, "metrics.jsonl")) as f:
        ev = [json.loads(x) for x in f if '"checkpoint"' in x][-1]
    trainer.batches.close()
    mfu = (trainer.flops_per_token * tps / trainer.peak) if trainer.peak else None
    mem = torch.cuda.max_memory_allocated() / 1e9 if dist.cuda else None
    params = sum(p.numel() for p in trainer.raw.parameters())
    del trainer
    if dist.cuda:
        torch.cuda.empty_cache()
    return {"model": model, "params": params, "compile": compile_, "tokens_per_s": tps,
            "mfu": mfu, "peak_mem_gb": mem, "gpu_busy": busy, "host_syncs_per_step": syncs,
            "checkpoint_s": round(ckpt_s, 2), "checkpoint_bytes": ev["bytes"],
            "warmup_s": round(warm_s, 1)}


def bench_plain(args, model: str, compile_: bool, cache: str, vocab: int) -> dict:
    """The ceiling: the same GPT and shape in the shortest loop PyTorch allows."""
    import numpy as np
    import torch

    from llmtk.compute.flops import flops_per_token_for_config
    from llmtk.compute.hardware import device_peak_flops
    from llmtk.train.config import TrainConfig
    from llmtk.train.model import GPT
    from llmtk.train.run_shape import model_config

    device = "cuda" if args.device in ("auto", "cuda") and torch.cuda.is_available() else "cpu"
    mcfg = model_config(TrainConfig(model=model, seq_len=args.seq_len), vocab)
    torch.manual_seed(0)
    net = GPT(mcfg).to(device)
    if compile_:
        net.compile()
    opt = torch.optim.AdamW(net.parameters(), lr=3e-4, betas=(0.9, 0.95), fused=True)
    tokens = np.memmap(os.path.join(cache, "train-00000.bin"), dtype=np.uint16, mode="r")
    B, T = args.batch_size, mcfg.seq_len
    bf16 = device == "cuda" if args.dtype == "auto" else args.dtype == "bf16"
    rng = np.random.default_rng(0)

    def step():
        starts = rng.integers(0, len(tokens) - T - 1, B)
        rows = torch.from_numpy(np.stack([tokens[s:s + T + 1] for s in starts]).astype(np.int64))
        batch = rows.to(device, non_blocking=True)
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=bf16):
            _, loss = net(batch[:, :-1], batch[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        step()
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    _sync(device)
    tps = args.steps * B * T / (time.perf_counter() - t0)
    peak = device_peak_flops(torch.cuda.get_device_name(0)) if device == "cuda" else None
    mfu = flops_per_token_for_config(mcfg, causal=True) * tps / peak if peak else None
    return {"model": model, "compile": compile_, "tokens_per_s": tps, "mfu": mfu}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="350m,1b")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20, help="timed steps per configuration")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--profile-steps", type=int, default=5)
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--dtype", default="auto", choices=["auto", "fp32", "bf16"])
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="a tiny model for a few steps on CPU: checks that the script runs")
    args = ap.parse_args()
    if args.cpu_smoke:
        args.models, args.seq_len, args.batch_size, args.device = "tiny", 64, 2, "cpu"
        args.steps, args.warmup, args.profile_steps = 3, 1, 2

    import torch

    vocab = 509 if args.cpu_smoke else 50257
    work = tempfile.mkdtemp(prefix="llmtk-gpu-check-")
    cache = synthetic_cache(work, vocab, max(2_000_000, 4 * args.batch_size * args.seq_len
                                             * (args.steps + args.warmup + 10)))
    tok = SyntheticTokenizer(vocab)
    device_name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    print(f"llmtk gpu_check: {device_name}, torch {torch.__version__}, seq {args.seq_len}, "
          f"batch {args.batch_size}, {args.steps} timed steps", file=sys.stderr)
    flash = {hd: flash_attention_ok(hd) for hd in (64, 128)}
    print(f"flash attention (bf16, causal, GQA) chosen for head dim 64: {flash[64]}, "
          f"128: {flash[128]}", flush=True)
    results = []
    for model in args.models.split(","):
        for mode in args.modes.split(","):
            compile_ = mode == "compile"
            ours = bench_llmtk(args, model, compile_, cache, tok, work)
            plain = bench_plain(args, model, compile_, cache, vocab)
            ours["plain_tokens_per_s"] = plain["tokens_per_s"]
            ours["plain_mfu"] = plain["mfu"]
            ours["ratio_to_plain"] = ours["tokens_per_s"] / plain["tokens_per_s"]
            results.append(ours)
            print(_line(ours), flush=True)
            with contextlib.suppress(Exception):
                torch._dynamo.reset()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device_name, "torch": torch.__version__, "args": vars(args),
                       "flash_attention": flash, "results": results}, f, indent=1)


def _line(r: dict) -> str:
    def pct(v):
        return "n/a" if v is None else f"{v:.1%}"

    def num(v, fmt):
        return "n/a" if v is None else format(v, fmt)

    return (f"{r['model']:>5} {'compile' if r['compile'] else 'eager':>7}: "
            f"{r['tokens_per_s']:>10,.0f} tok/s  MFU {pct(r['mfu'])}  "
            f"plain {r['plain_tokens_per_s']:,.0f} tok/s (MFU {pct(r['plain_mfu'])}, "
            f"ratio {r['ratio_to_plain']:.3f})  mem {num(r['peak_mem_gb'], '.1f')} GB  "
            f"busy {pct(r['gpu_busy'])}  syncs/step {num(r['host_syncs_per_step'], '.2f')}  "
            f"ckpt {r['checkpoint_s']} s / {r['checkpoint_bytes'] / 1e9:.2f} GB  "
            f"(warm-up {r['warmup_s']} s)")


if __name__ == "__main__":
    main()
