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

With --layout (tp2, pp2, tp2xpp2, fsdp8, fsdp4xtp2, cp2, fsdp2xcp2xtp2, ...) it checks a
parallel layout on this node instead: `llmtk train` itself, launched through torchrun
with the layout's flags (--nproc-per-node = the product, --tp, --pp, --cp, --dp-shard),
on random text with the byte tokenizer (nothing to load on a bare node), logs tokens/s
and MFU; they are printed beside `llmtk estimate`'s prediction for the same layout (the
step-time model of --solve layout, llmtk.estimate.layout, at --mfu for the matmuls; under
cp with its K/V all-gather). --doc-mask trains with `llmtk train --doc-mask` on documents
of about a quarter of the sequence (several per window): FlexAttention's block mask on
one GPU or under tp/fsdp, the cp ranks' bool masks under cp (the estimate does not price
the mask). Without enough GPUs it says so in one line and records nothing (exit 1). A
failed run prints the worker's last stderr lines. fsdp1 --doc-mask ran on one H200
(docs/train.md); the cp layouts have not been run on GPUs yet.

Reproduce:
    python benchmarks/gpu_check.py                   # one H100/H200: under 8 minutes
    python benchmarks/gpu_check.py --models 350m --steps 30
    python benchmarks/gpu_check.py --layout tp2 --models 1b --modes eager
    python benchmarks/gpu_check.py --layout fsdp2xcp2xtp2 --models 1b --seq-len 16384
    python benchmarks/gpu_check.py --layout fsdp1 --doc-mask --models 350m   # FlexAttention
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
        self.name = f"synthetic-{vocab_size}"

    def fingerprint(self) -> str:
        return f"synthetic-{self.vocab_size}"

    def encode(self, text: str) -> list[int]:
        return [b % self.vocab_size for b in text.encode()]

    def decode(self, ids: list[int]) -> str:
        return " ".join(map(str, ids))


def synthetic_cache(root: str, vocab: int, tokens: int) -> str:
    """A token cache (llmtk.train.data.cache: one-task token datasets) of one document of random
    ids, and an empty validation split."""
    import numpy as np

    from llmtk.train.data.cache import CACHE_VERSION
    from llmtk.train.data.tokens import PartWriter, dataset_meta, mark_done, part_name

    d = os.path.join(root, "cache")
    ids = np.random.default_rng(0).integers(0, vocab, tokens - 1, dtype=np.uint16)
    tok = SyntheticTokenizer(vocab)
    for split, docs in (("train", [ids]), ("val", [])):
        meta = dataset_meta(tok, "text", 1, [], cache={
            "version": CACHE_VERSION, "val_fraction": 0.0, "val_inputs": []})
        part = os.path.join(d, split, part_name(0, 1))
        os.makedirs(part, exist_ok=True)
        with open(os.path.join(d, split, "meta.json"), "w") as f:
            json.dump(meta, f)
        writer = PartWriter(part, 0, 1, meta)
        writer.add(docs, np.zeros(len(docs), np.uint64), [None] * len(docs), tok.eos_id)
        mark_done(part, writer.close([]))
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
    from llmtk.train.data.inputs import cache_source
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
    trainer = Trainer(cfg, dist, tok, cache_source(cache), Faults())
    st = trainer._start()
    t0 = time.perf_counter()
    for _ in range(args.warmup):  # compile, allocator warm-up
        trainer.health.pending.append(trainer._train_step(st))
    trainer.health.settle(st)
    warm_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    for _ in range(args.steps):
        trainer.health.pending.append(trainer._train_step(st))
    trainer.health.settle(st)  # the one read: waits for the device to finish the steps
    elapsed = time.perf_counter() - t0
    tps = args.steps * trainer.plan.tokens_per_step / elapsed

    syncs = None
    if dist.cuda:  # every host sync inside the step warns once in this mode
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            for _ in range(args.profile_steps):
                trainer.health.pending.append(trainer._train_step(st))
            torch.cuda.set_sync_debug_mode("default")
        syncs = sum("synchroniz" in str(w.message) for w in caught) / args.profile_steps
        trainer.health.settle(st)

    busy = None
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dist.cuda else [])
    with profile(activities=activities) as prof:
        t1 = time.perf_counter()
        for _ in range(args.profile_steps):
            trainer.health.pending.append(trainer._train_step(st))
        trainer.health.settle(st)
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
    mfu = (trainer.log.flops_per_token * tps / trainer.log.peak) if trainer.log.peak else None
    mem = torch.cuda.max_memory_allocated() / 1e9 if dist.cuda else None
    params = sum(p.numel() for p in trainer.built.raw.parameters())
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
    from llmtk.train.config import TrainConfig, section
    from llmtk.train.model.gpt import GPT
    from llmtk.train.run_shape import ModelSpec, model_config

    device = "cuda" if args.device in ("auto", "cuda") and torch.cuda.is_available() else "cpu"
    mcfg = model_config(section(ModelSpec, TrainConfig(model=model, seq_len=args.seq_len)), vocab)
    torch.manual_seed(0)
    net = GPT(mcfg).to(device)
    if compile_:
        net.compile()
    opt = torch.optim.AdamW(net.parameters(), lr=3e-4, betas=(0.9, 0.95), fused=True)
    tokens = np.memmap(os.path.join(cache, "train", "part-00000-of-00001", "tokens.bin"),
                       dtype=np.uint16, mode="r")
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
    ap.add_argument("--layout", help="a parallel layout on this node, e.g. tp2, pp2, "
                    "tp2xpp2, fsdp8, cp2, fsdp2xcp2xtp2: llmtk train through torchrun, "
                    "against llmtk estimate")
    ap.add_argument("--doc-mask", action="store_true",
                    help="--layout: train with --doc-mask on documents of ~seq-len/4")
    ap.add_argument("--mfu", type=float, default=0.4,
                    help="--layout: the matmul efficiency llmtk estimate assumes")
    args = ap.parse_args()
    if args.doc_mask and not args.layout:
        ap.error("--doc-mask: only with --layout (llmtk train runs it)")
    if args.layout:
        try:
            layout = parse_layout(args.layout)
        except ValueError as e:
            ap.error(f"--layout: {e}")
        return check_layout(args, layout)
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


def parse_layout(text: str) -> dict[str, int]:
    """'fsdp4xtp2' -> {"tp": 2, "pp": 1, "cp": 1, "dp_shard": 4}: parts joined by x, each
    tpN, ppN, cpN or fsdpN (FSDP2 over N ranks); the processes are their product
    (`world`)."""
    import re

    sizes = {"tp": 1, "pp": 1, "cp": 1, "dp_shard": 1}
    for part in text.lower().split("x"):
        m = re.fullmatch(r"(tp|pp|cp|fsdp)([1-9]\d*)", part)
        if not m:
            raise ValueError(f"expected parts like tp2, pp2, cp2, fsdp8 joined by x, got "
                             f"{text!r}")
        key = "dp_shard" if m[1] == "fsdp" else m[1]
        sizes[key] = int(m[2])
    return sizes


def world(layout: dict) -> int:
    """The processes (GPUs) of a layout."""
    return layout["tp"] * layout["pp"] * layout["cp"] * layout["dp_shard"]


def random_corpus(path: str, n_bytes: int, doc_bytes: int = 65536) -> None:
    """Documents of `doc_bytes` random lowercase words (byte tokenizer: one token per byte)."""
    import numpy as np

    rng = np.random.default_rng(0)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz     ", dtype=np.uint8)
    with open(path, "w") as f:
        written = 0
        while written < n_bytes:
            text = letters[rng.integers(0, len(letters), doc_bytes)].tobytes().decode()
            f.write(json.dumps({"text": text}) + "\n")
            written += len(text)


def grad_accum_for(layout: dict) -> int:
    """Micro-steps per step: one, or under a pipeline two per stage (1F1B needs one per
    stage at least; with two the bubble is (pp-1)/(3pp-1), a fifth at pp 2)."""
    return 2 * layout["pp"] if layout["pp"] > 1 else 1


def train_command(args, layout: dict, model: str, mode: str, corpus: str, out: str) -> list:
    """The `llmtk train` arguments (after the Python executable) of one layout run."""
    n = world(layout)
    return ["-m", "llmtk", "train", "--data", corpus, "--out", out,
            "--model", model, "--seq-len", str(args.seq_len),
            "--batch-size", str(args.batch_size), "--grad-accum", str(grad_accum_for(layout)),
            "--steps", str(2 * args.steps),  # the first logged window warms up
            "--warmup", str(args.warmup), "--log-every", str(args.steps),
            "--tokenizer", "bytes", "--val-fraction", "0", "--quiet",
            "--dtype", "bf16" if args.dtype == "auto" else args.dtype,
            "--compile" if mode == "compile" else "--no-compile",
            "--nproc-per-node", str(n), "--parallel", "fsdp" if n > 1 else "none",
            "--tp", str(layout["tp"]), "--pp", str(layout["pp"]), "--cp", str(layout["cp"]),
            "--dp-shard", str(layout["dp_shard"]),
            *(["--doc-mask"] if args.doc_mask else [])]


def predict_layout(args, model: str, layout: dict, device_name: str, per_node: int) -> dict:
    """llmtk estimate's step time for this model, layout and batch (the same micro-steps
    as the run: grad_accum_for)."""
    from llmtk.compute import hardware
    from llmtk.compute.flops import flops_per_token_for_config, model_flops_per_token
    from llmtk.compute.models import count_params, spec_from_config
    from llmtk.estimate.layout import Candidate, step_time
    from llmtk.train.config import TrainConfig, section
    from llmtk.train.run_shape import ModelSpec, model_config

    mcfg = model_config(section(ModelSpec, TrainConfig(model=model, seq_len=args.seq_len)), 257)
    spec = spec_from_config(mcfg)
    counts = count_params(spec)
    gpu = hardware.match_device_name(device_name)
    if gpu is None:
        return {}
    precision = "fp32" if args.dtype == "fp32" else "bf16-mixed"
    peak = hardware.peak_flops(gpu, precision)
    dp, cp = layout["dp_shard"], layout["cp"]
    c = Candidate(dp, layout["tp"], layout["pp"], 3 if dp * cp > 1 else 0, args.batch_size,
                  "selective", cp=cp)  # FSDP2 shards over dp_shard x cp
    global_batch = args.batch_size * dp * grad_accum_for(layout)
    t = step_time(spec, c, global_batch=global_batch,
                  flops_per_token=model_flops_per_token(counts.matmul, spec.n_layer,
                                                        spec.n_head, spec.hd, spec.seq_len),
                  params=counts.total, peak=peak, mfu=args.mfu, gpu=gpu, per_node=per_node,
                  elem=4 if precision == "fp32" else 2)
    tps = global_batch * spec.seq_len / t["step_s"] / world(layout)
    # MFU as llmtk train reports it (causal attention), so the two columns compare
    return {"tokens_per_s_per_gpu": tps, "step_s": t["step_s"], "cp_s": t["cp_s"],
            "mfu": flops_per_token_for_config(mcfg, causal=True) * tps / peak}


def run_train(cmd: list, out: str, keep_lines: int = 30) -> dict | None:
    """Run one `llmtk train`; None when it succeeds, else its last stderr line as `error`
    and the last `keep_lines` lines as `worker_messages`: train's own last line only
    says that a worker failed, and the worker's traceback above it is the reason (on a
    lent GPU a run cannot be repeated to read it). The whole stderr is kept in
    OUT/stderr.log."""
    import subprocess

    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode == 0:
        return None
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "stderr.log"), "w") as f:
        f.write(p.stderr)
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    return {"error": lines[-1] if lines else f"exit {p.returncode}",
            "worker_messages": lines[-keep_lines:]}


def check_layout(args, layout: dict) -> None:
    import torch

    n = world(layout)
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if have < n:
        sys.exit(f"gpu_check --layout {args.layout}: needs {n} CUDA GPU"
                 f"{'s' if n > 1 else ''} on this node, found {have}; nothing measured, "
                 "nothing recorded")
    device_name = torch.cuda.get_device_name(0)
    work = tempfile.mkdtemp(prefix="llmtk-gpu-check-layout-")
    corpus = os.path.join(work, "random.jsonl")
    # the first logged window compiles and warms up; the second counts
    # (the cp ranks of a group read the same sequences: dp_shard of them a micro-step)
    random_corpus(corpus, int(1.2 * 2 * args.steps * args.batch_size * layout["dp_shard"]
                              * grad_accum_for(layout) * (args.seq_len + 1)) + 1_000_000,
                  doc_bytes=max(16, args.seq_len // 4) if args.doc_mask else 65536)
    print(f"llmtk gpu_check --layout {args.layout}: {n} x {device_name}, torch "
          f"{torch.__version__}, seq {args.seq_len}, micro-batch {args.batch_size}, "
          f"{args.steps} timed steps", file=sys.stderr)
    results = []
    for model in args.models.split(","):
        for mode in args.modes.split(","):
            out = os.path.join(work, f"run-{model}-{mode}")
            cmd = [sys.executable, *train_command(args, layout, model, mode, corpus, out)]
            r = {"model": model, "layout": args.layout, "compile": mode == "compile",
                 "doc_mask": args.doc_mask, "gpus": n, "device": device_name}
            failure = run_train(cmd, out)
            if failure:
                r.update(failure)
                print(f"{model:>5} {mode:>7} {args.layout}: failed: {r['error']}\n"
                      + "\n".join("    " + x for x in r["worker_messages"]), flush=True)
                results.append(r)
                continue
            with open(os.path.join(out, "metrics.jsonl")) as f:
                rows = [json.loads(x) for x in f if '"loss"' in x]
            last = rows[-1]  # steps args.steps+1 .. 2*args.steps, after the warm-up window
            r.update(tokens_per_s_per_gpu=last["tokens_per_s"] / n, mfu=last["mfu"],
                     mem_gb=last["mem_gb"], step_s=last["step_s"],
                     predicted=predict_layout(args, model, layout, device_name,
                                              torch.cuda.device_count()))
            results.append(r)
            print(_layout_line(r), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device_name, "torch": torch.__version__, "args": vars(args),
                       "results": results}, f, indent=1)


def _layout_line(r: dict) -> str:
    pred = r["predicted"]
    mfu = "n/a" if r["mfu"] is None else f"{r['mfu']:.1%}"
    layout = r["layout"] + (" doc-mask" if r.get("doc_mask") else "")
    line = (f"{r['model']:>5} {'compile' if r['compile'] else 'eager':>7} {layout}: "
            f"{r['tokens_per_s_per_gpu']:,.0f} tok/s/GPU  MFU {mfu}  mem {r['mem_gb']:.1f} GB")
    if pred:
        line += (f"  | llmtk estimate: {pred['tokens_per_s_per_gpu']:,.0f} tok/s/GPU  MFU "
                 f"{pred['mfu']:.1%}  (measured/predicted "
                 f"{r['tokens_per_s_per_gpu'] / pred['tokens_per_s_per_gpu']:.2f})")
    return line


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
