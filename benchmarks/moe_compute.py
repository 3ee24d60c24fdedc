"""Grouped expert compute: the MoE layer's CPU time per token against a dense SwiGLU MLP with
the same active parameters, same run (issue #41's goal: within 1.5x).

The MoE layer (llmtk.train.model.moe.MoE: router, top-k, sort by expert, grouped matmuls,
combine) with E experts of width H, top-k K, against llmtk.train.model.gpt.MLP of width K*H:
the same matmul FLOPs per token (the router's d x E aside). Forward and backward of the
same input, the two (and the MoE layer's per-expert-slice fallback, the path fp64 takes)
interleaved round after round so machine load hits all alike; the median CPU time
(time.process_time) per token of each and their ratios are printed.

Reproduce (CPU, about a minute):

    .venv/bin/python benchmarks/moe_compute.py
    .venv/bin/python benchmarks/moe_compute.py --d-model 1024 --experts 16 --top-k 4
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--d-model", type=int, default=512)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--expert-hidden", type=int, default=1024)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    import torch

    from llmtk.train.model.gpt import MLP, ModelConfig
    from llmtk.train.model.moe import MoE, grouped_mm_ok

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    d, E, K, H = args.d_model, args.experts, args.top_k, args.expert_hidden
    cfg = ModelConfig(d_model=d, n_head=8, n_experts=E, top_k=K, expert_hidden=H,
                      ffn_hidden=K * H, router_bias_rate=0.0)
    moe, dense = MoE(cfg), MLP(cfg)
    for p in [*moe.parameters(), *dense.parameters()]:
        torch.nn.init.normal_(p, std=0.02)
    loop = MoE(cfg)
    loop.load_state_dict(moe.state_dict())
    loop.experts.grouped = False  # the fallback: one matmul per expert's slice
    x = torch.randn(1, args.tokens, d)
    active = sum(p.numel() for p in dense.parameters())
    moe_active = 3 * d * H * K + d * E
    print(f"d_model {d}, {E} experts of {H}, top-{K}; dense MLP of {K * H}: "
          f"{active / 1e6:.2f}M active params vs the MoE's {moe_active / 1e6:.2f}M; "
          f"{args.tokens} tokens, {args.threads} thread(s); torch {torch.__version__}; "
          f"grouped kernel used: {grouped_mm_ok(x.view(-1, d), moe.experts.w1)}")

    def step(layer) -> float:
        t = time.process_time()
        xi = x.clone().requires_grad_(True)
        layer(xi).square().mean().backward()
        return time.process_time() - t

    layers = {"dense MLP": dense, "MoE grouped": moe, "MoE slice loop": loop}
    times: dict[str, list[float]] = {k: [] for k in layers}
    for layer in layers.values():
        step(layer)  # warm-up
    for _ in range(args.rounds):
        for name, layer in layers.items():
            times[name].append(step(layer))
    base = statistics.median(times["dense MLP"])
    print(f"{'layer':16} {'us/token':>10} {'x dense':>8}   (forward + backward, median of "
          f"{args.rounds})")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:16} {med / args.tokens * 1e6:10.2f} {med / base:8.2f}")


if __name__ == "__main__":
    main()
