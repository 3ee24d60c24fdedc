"""Training throughput: `llmtk train` against a minimal plain-PyTorch loop, same run.

Both train the same GPT (llmtk.train.model.gpt) with the same batch, sequence length,
AdamW, gradient clipping and precision, on the same tokens; the plain loop is the
nanoGPT shape (memmap -> random windows -> forward/backward/step) without
checkpoints, logging, NaN checks or schedules. The rounds alternate (llmtk, plain,
llmtk, plain, ...) so machine noise hits both; the medians and their ratio are
printed (goal: llmtk >= 0.95x the plain loop). Beside the wall-clock rates it prints the
CPU time per steady step of both (time.process_time, from the step after the first
logging window to the one before the last, whose checkpoint it leaves out): on a machine
shared with other jobs that ratio moves far less with the load than tokens/s do.

Reproduce (CPU, a few minutes on 2 cores):

    .venv/bin/python benchmarks/train_throughput.py
    .venv/bin/python benchmarks/train_throughput.py --data CORPUS.jsonl.zst

On a GPU (bf16 autocast + torch.compile; MFU by llmtk.estimate's formula, causal
attention; benchmarks/gpu_check.py is the fuller GPU report):

    python benchmarks/train_throughput.py --device cuda --model 350m --seq-len 2048 \\
        --batch-size 8 --steps 60 --compile
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def stdlib_corpus(path: str) -> None:
    """Docstrings of the standard library (offline), ~1 MB of text."""
    names = ["json", "os", "re", "collections", "itertools", "functools", "pathlib", "argparse",
             "subprocess", "textwrap", "string", "random", "math", "datetime", "logging",
             "shutil", "tempfile", "csv", "heapq", "bisect", "typing", "asyncio", "socket",
             "threading", "unittest", "email", "http.client", "urllib.request", "decimal"]
    with open(path, "w") as f:
        for name in names:
            mod = importlib.import_module(name)
            for _attr, obj in inspect.getmembers(mod):
                doc = inspect.getdoc(obj)
                if doc and len(doc) > 100:
                    f.write(json.dumps({"text": doc}) + "\n")


def run_llmtk(args, data: str, out: str, cache: str) -> tuple[float, float]:
    """(tokens/s, CPU seconds per steady step) of `llmtk train` (library call, the same code
    path as the command)."""
    from llmtk.io.metrics import read_metrics
    from llmtk.train.config import resolve_config
    from llmtk.train.runtime import Faults
    from llmtk.train.trainer import train

    class CpuClock(Faults):  # the seam tests use; here it only reads the clock
        def __init__(self):
            self.at = {}

        def after_step(self, step: int) -> None:
            self.at[step] = time.process_time()

    flags = dict(data=[data], out=out, cache_dir=cache, model=args.model, seq_len=args.seq_len,
                 batch_size=args.batch_size, steps=args.steps, log_every=args.log_every,
                 warmup=1, lr=3e-4, device=args.device, dtype=args.dtype, compile=args.compile,
                 resume="never", quiet=True, checkpoint_every=0, layers=args.layers,
                 d_model=args.d_model, heads=args.heads, keep_checkpoints=1)
    cfg = resolve_config(flags, None)
    clock = CpuClock()
    train(cfg, faults=clock)
    rows = [r for r in read_metrics(os.path.join(out, "metrics.jsonl")) if "loss" in r]
    # The first window holds the warm-up (allocator, compile); the last one the final
    # checkpoint write is outside the window. Use the steady windows.
    steady = rows[1:] if len(rows) > 1 else rows
    first, last = args.log_every, args.steps - 1
    cpu = (clock.at[last] - clock.at[first]) / (last - first)
    return statistics.median(r["tokens_per_s"] for r in steady), cpu


def run_plain(args, cache_dir: str, mcfg) -> tuple[float, float]:
    """(tokens/s, CPU seconds per steady step) of the minimal loop."""
    import numpy as np
    import torch

    from llmtk.train.model.gpt import GPT

    device = args.device
    torch.manual_seed(0)
    model = GPT(mcfg).to(device)
    if args.compile:
        model.compile()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}], lr=3e-4, betas=(0.9, 0.95),
                            fused=True)  # as llmtk's (fused on CPU too)
    from llmtk.train.data.cache import open_cache

    tokens = open_cache(cache_dir)[0].parts[0].tokens  # the cache's one train part
    B, T = args.batch_size, mcfg.seq_len
    rng = np.random.default_rng(0)
    bf16 = device == "cuda" if args.dtype == "auto" else args.dtype == "bf16"
    times, cpu_at = [], []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        starts = rng.integers(0, len(tokens) - T - 1, B)
        rows = np.stack([tokens[s:s + T + 1] for s in starts]).astype(np.int64)
        batch = torch.from_numpy(rows).to(device)
        x, y = batch[:, :-1], batch[:, 1:]
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=bf16):
            _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        cpu_at.append(time.process_time())  # after step len(cpu_at), as llmtk's after_step
    first, last = args.log_every, args.steps - 1
    cpu = (cpu_at[last - 1] - cpu_at[first - 1]) / (last - first)
    steady = times[args.log_every:] or times
    # Per-window rates like llmtk's rows, then the median.
    windows = [steady[i:i + args.log_every] for i in range(0, len(steady), args.log_every)]
    return statistics.median(B * T * len(w) / sum(w) for w in windows if w), cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", help="JSONL(.zst) corpus (default: stdlib docstrings)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--dtype", default="auto", choices=["auto", "fp32", "bf16"])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--d-model", type=int, default=None)
    ap.add_argument("--heads", type=int, default=None)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compile", action="store_true")
    args = ap.parse_args()
    if args.steps < 2 * args.log_every:
        ap.error("--steps must be at least 2 x --log-every (a warm-up window and a steady one)")

    import torch

    from llmtk.compute.flops import flops_per_token_for_config
    from llmtk.compute.hardware import device_peak_flops
    from llmtk.text.tokenizer import ByteTokenizer
    from llmtk.train.config import TrainConfig, section
    from llmtk.train.data.cache import build_cache
    from llmtk.train.run_shape import ModelSpec, model_config

    tmp = tempfile.mkdtemp(prefix="llmtk-bench-")
    data = args.data
    if data is None:
        data = os.path.join(tmp, "stdlib.jsonl")
        stdlib_corpus(data)
    cache_root = os.path.join(tmp, "cache")
    cache = build_cache([data], [], ByteTokenizer(), cache_root)
    shape = TrainConfig(model=args.model, seq_len=args.seq_len, layers=args.layers,
                        d_model=args.d_model, heads=args.heads)
    mcfg = model_config(section(ModelSpec, shape), ByteTokenizer().vocab_size)
    print(f"model {args.model} ({mcfg.n_layer}x{mcfg.d_model}, "
          f"seq {mcfg.seq_len}), batch {args.batch_size}, {args.steps} steps x {args.rounds} "
          f"rounds, device {args.device}, torch {torch.__version__}, "
          f"threads {torch.get_num_threads()}", file=sys.stderr)
    ours, plain, ours_cpu, plain_cpu = [], [], [], []
    for r in range(args.rounds):
        tps, cpu = run_llmtk(args, data, os.path.join(tmp, f"run{r}"), cache_root)
        ours.append(tps)
        ours_cpu.append(cpu)
        tps, cpu = run_plain(args, cache, mcfg)
        plain.append(tps)
        plain_cpu.append(cpu)
        print(f"round {r + 1}: llmtk {ours[-1]:,.0f} tok/s, plain {plain[-1]:,.0f} tok/s; CPU "
              f"per step llmtk {ours_cpu[-1] * 1e3:.1f} ms, plain {plain_cpu[-1] * 1e3:.1f} ms",
              file=sys.stderr)
    a, b = statistics.median(ours), statistics.median(plain)
    # On a shared machine the load changes between rounds; the ratio within a round (runs
    # back to back) is the steadier number.
    per_round = statistics.median(x / y for x, y in zip(ours, plain, strict=True))
    print(f"llmtk train: {a:,.0f} tokens/s   plain PyTorch loop: {b:,.0f} tokens/s   "
          f"ratio {a / b:.3f}x (median of per-round ratios {per_round:.3f}x)")
    cpu_ratio = statistics.median(p / o for o, p in zip(ours_cpu, plain_cpu, strict=True))
    print(f"CPU time per steady step: llmtk {statistics.median(ours_cpu) * 1e3:.1f} ms   plain "
          f"{statistics.median(plain_cpu) * 1e3:.1f} ms   speed ratio (plain CPU / llmtk CPU, "
          f"median per round) {cpu_ratio:.3f}x")
    if args.device == "cuda":
        peak = device_peak_flops(torch.cuda.get_device_name(0))
        fpt = flops_per_token_for_config(mcfg, causal=True)
        if peak:
            print(f"MFU (PaLM formula, {torch.cuda.get_device_name(0)}): llmtk {a * fpt / peak:.1%}"
                  f"   plain {b * fpt / peak:.1%}")


if __name__ == "__main__":
    main()
