"""`llmtk train --dry-run`'s per-rank memory against a real CPU training run's, per rank.

Runs `llmtk train`'s own Trainer on CPU, in fp32 or under bf16 autocast as a GPU run
trains (--dtype bf16), in one process or under torchrun with gloo (FSDP2, tensor
parallel), takes one optimizer step (AdamW's states now exist), then
one more micro-step measured: the bytes autograd saves for backward during its forward
(llmtk.train.measure.saved_for_backward: each storage once, DTensors by their local
shard, parameters and their gathered copies excluded), and after its backward the
rank's local parameter shards, gradients and optimizer states
(llmtk.train.measure.state_bytes). The dry-run's numbers for the same configuration and
world (llmtk.train.layout.dryrun + llmtk.estimate.ranks, as `llmtk train --dry-run` prints
them) are set beside them.

Under --ep each rank computes the rows its experts received, which routing need not
split evenly, where the dry run counts the mean: the report's "routing" gives each
rank's rows, their share of an even split, and the activations the dry run's count
plus the bytes of the rows beyond the mean come to; the activations' ratio is against
that. Rank 0 prints one JSON object (and writes it with --json).

Reproduce:
    .venv/bin/python benchmarks/memory_check.py
    .venv/bin/python -m torch.distributed.run --nproc-per-node 2 \
        benchmarks/memory_check.py --parallel fsdp
    .venv/bin/python -m torch.distributed.run --nproc-per-node 2 \
        benchmarks/memory_check.py --tp 2 --dtype bf16 --activation-checkpointing
    .venv/bin/python -m torch.distributed.run --nproc-per-node 2 \
        benchmarks/memory_check.py --experts 4 --top-k 2 --ep 2
    .venv/bin/python -m torch.distributed.run --nproc-per-node 2 \
        benchmarks/memory_check.py --cp 2 --seq-len 256
The numbers: docs/train.md, "Measured against a real run".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.gpu_check import SyntheticTokenizer, synthetic_cache  # noqa: E402

PARTS = ("weights", "gradients", "optimizer", "activations")


def held_gradient_bytes(model) -> int:
    """This rank's bytes of whole (unsharded) gradients that FSDP2 holds while gradient
    sync is off (a step's micro-steps before the last): per parameter, its fp32
    accumulation buffer (bf16 parameters, fp32 reduce) or the gathered parameter's own
    gradient (fp32). Reads FSDP2's private state; measured here, never used to train."""
    from torch.distributed.fsdp import FSDPModule

    from llmtk.train.measure import nbytes

    total = 0
    for m in model.modules():
        group = m._get_fsdp_state()._fsdp_param_group if isinstance(m, FSDPModule) else None
        for fp in group.fsdp_params if group is not None else ():
            g = fp.unsharded_accumulated_grad
            if g is None and hasattr(fp, "_unsharded_param"):
                g = fp._unsharded_param.grad
            total += nbytes(g) if g is not None else 0
    return total


def expert_dispatches(model) -> list:
    """The expert-parallel dispatches (expert_parallel.AllToAll) of model's MoE layers:
    none without --ep."""
    from llmtk.train.model.moe import GroupedExperts

    return [m.dispatch for m in model.modules()
            if isinstance(m, GroupedExperts) and m.dispatch is not None]


def measure_rank(cfg, work: str) -> tuple[dict, object]:
    """(this rank's measured bytes, the Dist) after one step and one measured micro-step."""
    from llmtk.train.data.inputs import cache_source
    from llmtk.train.measure import saved_for_backward, state_bytes
    from llmtk.train.model.config import PRESETS
    from llmtk.train.runtime import Faults, setup_dist
    from llmtk.train.trainer import Trainer

    dist = setup_dist(cfg.device, cfg.nccl_timeout)
    vocab = PRESETS[cfg.model].vocab_size  # the vocabulary the dry-run plans with
    cache = synthetic_cache(os.path.join(work, f"rank-{dist.rank}"), vocab, 200_000)
    trainer = Trainer(cfg, dist, SyntheticTokenizer(vocab), cache_source(cache), Faults())
    st = trainer._start()
    trainer.health.pending.append(trainer._train_step(st))
    trainer.health.settle(st)
    batch = trainer.batches.get(st.position)  # (x, y), and the document ids (--doc-mask)
    dispatches = expert_dispatches(trainer.built.raw)
    for d in dispatches:
        d.received = 0
    with trainer.autocast(), saved_for_backward(trainer.built.raw) as saved:
        _, loss = trainer.model(*batch)
    loss.backward()
    params = list(trainer.built.raw.parameters())
    out = {**state_bytes(params, trainer.optim.opt), "activations": saved["bytes"]}
    if dispatches:  # --ep: the rows this rank's experts received in the measured forward
        out["routed_rows"] = sum(d.received for d in dispatches)
    if trainer.plan.parallel == "fsdp":
        # FSDP2: a micro-step as the trainer runs each one before a step's last; the whole
        # gradients it then holds are what the step's micro-steps hold
        trainer.optim.opt.zero_grad(set_to_none=True)
        with trainer._gradient_sync(last=False):
            with trainer.autocast():
                _, loss = trainer.model(*batch)
            loss.backward()
        out["held_gradients"] = held_gradient_bytes(trainer.built.raw)
    trainer.batches.close()
    return out, dist


def predicted(cfg, world: int) -> dict:
    """The dry-run's row for these ranks (pp = 1: one kind of rank), priced as `llmtk train
    --dry-run` prices it (commands.train.plan_rows)."""
    from llmtk.commands.train import plan_rows
    from llmtk.train.layout.dryrun import dry_run

    d = dry_run(cfg, world)
    result = plan_rows(d, cfg.gpu, cfg.dtype != "fp32")
    row = result["rows"][0]
    out = {"layout": str(d.plan.layout), "parallel": d.plan.parallel, **{k: row[k] for k in PARTS}}
    if d.plan.parallel == "fsdp":  # the gradient bytes held through a step of micro-steps
        again = plan_rows(d, cfg.gpu, cfg.dtype != "fp32", grad_accum=2)
        out["held_gradients"] = again["rows"][0]["fsdp_held"]
    return out


def routed(cfg, world: int, activations: float, rows: int) -> dict:
    """Under --ep, a rank's activations at its own routing: the dry run counts the mean,
    N * K rows per MoE layer (N the rank's tokens; under tp every tp rank routes the whole
    sequence), and each row received beyond it keeps expert_row_bytes more
    (llmtk.estimate.activations). -> the rank's rows, the mean, their ratio (its routing
    share against an even split), the bytes per row and the activations so predicted."""
    from llmtk.estimate.activations import expert_row_bytes
    from llmtk.train.layout.dryrun import dry_run

    mcfg = dry_run(cfg, world).plan.mcfg
    mean = cfg.batch_size * cfg.seq_len // cfg.cp * mcfg.top_k * mcfg.moe_layers
    # a checkpointed layer keeps only its input: the rows are recomputed in backward
    per_row = 0.0 if cfg.activation_checkpointing else \
        expert_row_bytes(mcfg, 2 if cfg.dtype == "bf16" else 4, cfg.tp)
    return {"rows": rows, "mean_rows": mean, "share": rows / mean, "bytes_per_row": per_row,
            "activations": activations + (rows - mean) * per_row}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--d-model", type=int, default=None)
    ap.add_argument("--heads", type=int, default=None)
    ap.add_argument("--kv-heads", type=int, default=None)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--parallel", default="auto", choices=["auto", "fsdp", "ddp", "none"])
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--cp", type=int, default=1, help="context parallel (FSDP2 over dp x cp)")
    ap.add_argument("--doc-mask", action="store_true")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"],
                    help="bf16: autocast on CPU, as a GPU run trains")
    ap.add_argument("--activation-checkpointing", action="store_true")
    ap.add_argument("--lora-rank", type=int, default=0, help="LoRA adapters on every linear")
    ap.add_argument("--experts", type=int, default=None, help="a mixture-of-experts model")
    ap.add_argument("--top-k", type=int, default=None)
    ap.add_argument("--expert-ffn-hidden", type=int, default=None)
    ap.add_argument("--router-bias-rate", type=float, default=None,
                    help="the balancing bias's step (default: llmtk train's)")
    ap.add_argument("--ep", type=int, default=1, help="expert parallelism (with --experts)")
    ap.add_argument("--json", help="also write the report here (rank 0)")
    args = ap.parse_args()

    from llmtk.train.config import TrainConfig

    world = int(os.environ.get("WORLD_SIZE", "1"))
    work = tempfile.mkdtemp(prefix="llmtk-memory-check-")
    dims = {k: v for k, v in (("layers", args.layers), ("d_model", args.d_model),
                              ("heads", args.heads), ("kv_heads", args.kv_heads),
                              ("experts", args.experts), ("top_k", args.top_k),
                              ("expert_ffn_hidden", args.expert_ffn_hidden),
                              ("router_bias_rate", args.router_bias_rate))
            if v is not None}
    cfg = TrainConfig(data=["synthetic"], out=os.path.join(work, "run"), model=args.model,
                      seq_len=args.seq_len, batch_size=args.batch_size, steps=2, warmup=1,
                      log_every=10**6, compile=False, device="cpu", dtype=args.dtype,
                      quiet=True, resume="never", parallel=args.parallel, tp=args.tp,
                      ep=args.ep, cp=args.cp, doc_mask=args.doc_mask,
                      activation_checkpointing=args.activation_checkpointing,
                      lora_rank=args.lora_rank, **dims)
    mine, dist = measure_rank(cfg, work)
    ranks = [mine]
    if dist.distributed:
        import torch.distributed as tdist

        ranks = [None] * dist.world
        tdist.all_gather_object(ranks, mine)
    if dist.rank == 0:
        pred = predicted(cfg, world)
        parts = [*PARTS, *(["held_gradients"] if "held_gradients" in pred else [])]
        report = {"world": world, "layout": pred["layout"], "parallel": pred["parallel"],
                  "predicted": {k: pred[k] for k in parts}, "measured": ranks,
                  "ratio": [{k: r[k] / pred[k] for k in parts if pred[k]} for r in ranks]}
        if "routed_rows" in mine:  # each rank's activations against its own routing
            report["routing"] = [routed(cfg, world, pred["activations"], r["routed_rows"])
                                 for r in ranks]
            for ratio, r, bound in zip(report["ratio"], ranks, report["routing"], strict=True):
                ratio["activations_at_mean_routing"] = ratio["activations"]
                ratio["activations"] = r["activations"] / bound["activations"]
        text = json.dumps(report, indent=1, sort_keys=True)
        print(text, flush=True)
        if args.json:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    dist.close()
    if dist.distributed:  # a torchrun worker: ends as llmtk train's do (runtime.exit_worker)
        from llmtk.train.runtime import exit_worker

        exit_worker()


if __name__ == "__main__":
    main()
