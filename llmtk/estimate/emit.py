"""`llmtk estimate --emit-config FILE`: the estimated layout as a `llmtk train --config`
TOML (model, parallel layout, micro-batch, accumulation, recompute, dtype, steps).

Only what llmtk train can run is written: AdamW; bf16-mixed or fp32; ZeRO 3 (FSDP2
shards every state over the data-parallel ranks) or ZeRO 0 (every data-parallel rank a
whole copy: DDP, or replicas on the tensor/pipeline mesh); a Llama-style shape. Anything
else is refused with the flag that asks for it, so a written file always trains (or
plans, `llmtk train --config FILE --dry-run`) the layout estimated.
"""

from __future__ import annotations

import json
import math

from llmtk.errors import ConfigError
from llmtk.presets import trainable


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(value)  # a TOML basic string for these plain names


def train_config(req, result: dict, spec) -> str:
    """The TOML text for the estimate `result` of request `req` (model `spec`)."""
    run = result["run"]
    if spec is None:
        raise ConfigError("emit_config", "needs the model's shape ({0} or {1}/{2}/{3}), not "
                          "only {4}", also=("model", "layers", "d_model", "heads", "params"))
    why = trainable(spec)
    if why is not None:
        raise ConfigError("emit_config", f"{spec.name} cannot be trained by llmtk train: {why}")
    if req.optimizer != "adamw":
        raise ConfigError("optimizer", "llmtk train uses AdamW; --emit-config needs adamw")
    if req.precision not in ("bf16-mixed", "fp32"):
        raise ConfigError("precision", "llmtk train runs bf16-mixed or fp32")
    zero, recompute = run["zero"], run["recompute"]  # the solved ones under --solve layout
    if zero not in (0, 3):
        raise ConfigError("zero", "llmtk train shards every state (3, FSDP2) or none (0)")
    if req.dims.vocab is not None or req.dims.head_dim is not None:
        raise ConfigError("vocab" if req.dims.vocab is not None else "head_dim",
                          "is not a train setting (the vocabulary is the tokenizer's, the head "
                          "dim d_model / heads)")
    dp, tp, pp = run["dp"], run["tp"], run["pp"]
    keys: dict = {}
    if req.model is not None:
        keys["model"] = spec.name
    else:  # a custom shape on a small preset's other settings (rope, norm eps)
        keys["model"] = "tiny"
        keys["untied"] = not spec.tie_embeddings
    keys.update({"layers": spec.n_layer, "d-model": spec.d_model, "heads": spec.n_head,
                 "kv-heads": spec.kv_heads, "ffn-hidden": spec.ffn, "seq-len": spec.seq_len})
    if req.model is not None:  # only the dimensions that differ from the preset
        from llmtk.compute.models import preset

        base = preset(req.model)
        same = {"layers": base.n_layer, "d-model": base.d_model, "heads": base.n_head,
                "kv-heads": base.kv_heads, "ffn-hidden": base.ffn, "seq-len": base.seq_len}
        keys = {k: v for k, v in keys.items() if k not in same or same[k] != v}
    keys.update({
        "steps": math.ceil(run["steps"]),
        "batch-size": run["micro_batch"],
        "grad-accum": run["grad_accum_steps"],
        "dtype": "bf16" if req.precision == "bf16-mixed" else "fp32",
        "activation-checkpointing": recompute == "full",
        "tp": tp, "pp": pp,
    })
    if zero == 3:
        keys.update({"parallel": "fsdp", "dp-replicate": 1, "dp-shard": dp})
    elif tp * pp == 1:
        keys["parallel"] = "ddp"
    else:
        keys.update({"parallel": "fsdp", "dp-replicate": dp, "dp-shard": 1})
    if pp > 1:
        keys["pp-schedule"] = "1f1b"
        if run["grad_accum_steps"] < pp:  # train's pipeline: a microbatch per stage at least
            raise ConfigError("global_batch", f"gives {run['grad_accum_steps']} micro-steps "
                              f"per step, but llmtk train's 1f1b pipeline needs at least one "
                              f"per stage (--pp {pp}): raise --global-batch to "
                              f"{pp * run['micro_batch'] * dp} or more")
    if req.lora_rank is not None:
        keys["lora-rank"] = req.lora_rank
    keys["gpu"] = run["gpu"]
    per_node = min(run["gpus"], req.gpus_per_node)
    if run["gpus"] % per_node:
        raise ConfigError("gpus", f"{run['gpus']} GPUs are not whole {per_node}-GPU nodes "
                          f"({{0}}): torchrun starts the same number on every node",
                          also=("gpus_per_node",))
    nodes = run["gpus"] // per_node
    mem = result["memory"]
    head = [
        f"# llmtk estimate's layout for {spec.name}: {run['gpus']} x {run['gpu']}, dp {dp} x "
        f"tp {tp} x pp {pp}, ZeRO {zero}; {mem['total'] / 1e9:.1f} GB per GPU estimated",
    ]
    if mem.get("activations_from") != "llmtk" and zero == 3:  # ZeRO paper sharding, not train
        from llmtk.estimate.memory import fsdp_held_bytes

        model = result["model"]
        stored = model["params"] + (model["lora_params"] or 0)
        held = fsdp_held_bytes(stored / (tp * pp), model["trainable_params"] / (tp * pp),
                               precision=req.precision, dp_shard=dp, pp=pp)
        if held:
            what = "whole fp32 gradients" + (", the stage's gathered weights" if pp > 1 else "")
            head.append(f"# llmtk train's FSDP also holds ~{held / 1e9:.1f} GB per GPU through "
                        f"a step's micro-steps ({what}): --dry-run counts it")
    head += [
        "# check it per rank without a GPU:",
        f"#   llmtk train --config FILE --dry-run --nproc-per-node {per_node} --nnodes {nodes}",
        "# train it (on every node):",
        f"#   llmtk train --config FILE --data DATA --out RUN --nproc-per-node {per_node} "
        f"--nnodes {nodes} --rdzv-endpoint HOST:PORT",
    ]
    return "\n".join(head + [f"{k} = {_toml(v)}" for k, v in keys.items()]) + "\n"
