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

from llmtk.compute.models import preset
from llmtk.errors import ConfigError
from llmtk.estimate import rules
from llmtk.presets import trainable


def gb2(nbytes: float) -> str:
    """GB (10^9 bytes) to two decimals: how the emitted header and the dry-run quote print
    the same estimate, so that they read the same."""
    return f"{nbytes / 1e9:.2f} GB"


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(value)  # a TOML basic string for these plain names


# A custom shape (--layers/--d-model/--heads, no preset) is Llama-style with a 32000-token
# untied vocabulary: the 7b preset's settings, so the file names it with the dimensions
# that differ, and train plans the model estimated (a small preset's vocabulary would not).
CUSTOM_BASE = "7b"


def refusal(req, run: dict, spec) -> ConfigError | None:
    """Why llmtk train cannot run the layout `run` of request `req` (model `spec`), as the
    error --emit-config raises; None when it can. Also decides whether the estimate prices
    the layout as llmtk train holds it (plan.py)."""
    if spec is None:
        return ConfigError("emit_config", "needs the model's shape ({0} or {1}/{2}/{3}), not "
                           "only {4}", also=("model", "layers", "d_model", "heads", "params"))
    why = trainable(spec)
    if why is not None:
        return ConfigError("emit_config", f"{spec.name} cannot be trained by llmtk train: {why}")
    if req.optimizer != "adamw":
        return ConfigError("optimizer", "llmtk train uses AdamW; --emit-config needs adamw")
    if req.precision not in ("bf16-mixed", "fp32"):
        return ConfigError("precision", "llmtk train runs bf16-mixed or fp32")
    if run["zero"] not in (0, 3):  # the solved one under --solve layout
        return ConfigError("zero", "llmtk train shards every state (3, FSDP2) or none (0)")
    if req.dims.head_dim is not None:
        return ConfigError("head_dim", "is not a train setting (the head dim is d_model / "
                           "heads)")
    pp, cp, ep = run["pp"], run.get("cp", 1), run.get("ep", 1)
    if (cp > 1 or ep > 1) and run["zero"] != 3:
        return ConfigError("zero", f"must be 3 with --{'cp' if cp > 1 else 'ep'}: llmtk train "
                           "shards the states over dp_shard x cp (FSDP2)")
    # the trainer's own rules (its plan_layout and check_model), not a copy of them
    why = rules.refusal(spec, dp=run["dp"], tp=run["tp"], pp=pp, cp=cp, ep=ep,
                        zero=run["zero"])
    if why is not None:
        return why
    if pp > 1 and run["grad_accum_steps"] < pp:  # train's pipeline: a microbatch per stage
        return ConfigError("global_batch", f"gives {run['grad_accum_steps']} micro-steps per "
                           f"step, but llmtk train's 1f1b pipeline needs at least one per "
                           f"stage (--pp {pp}): raise --global-batch to "
                           f"{pp * run['micro_batch'] * run['dp']} or more")
    per_node = min(run["gpus"], req.gpus_per_node)
    if run["gpus"] % per_node:
        return ConfigError("gpus", f"{run['gpus']} GPUs are not whole {per_node}-GPU nodes "
                           f"({{0}}): torchrun starts the same number on every node",
                           also=("gpus_per_node",))
    return None


def train_config(req, result: dict, spec) -> str:
    """The TOML text for the estimate `result` of request `req` (model `spec`)."""
    run = result["run"]
    error = refusal(req, run, spec)
    if error is not None:
        raise error
    if req.dims.vocab is not None:  # train can run it (a tokenizer of that size), not write it
        raise ConfigError("vocab", "is not a train setting (the vocabulary is the tokenizer's)")
    zero, recompute = run["zero"], run["recompute"]  # the solved ones under --solve layout
    dp, tp, pp = run["dp"], run["tp"], run["pp"]
    base = preset(req.model if req.model is not None else CUSTOM_BASE)
    keys: dict = {"model": base.name}
    # only the dimensions that differ from the preset's
    for key, value, preset_value in (
            ("layers", spec.n_layer, base.n_layer), ("d-model", spec.d_model, base.d_model),
            ("heads", spec.n_head, base.n_head), ("kv-heads", spec.kv_heads, base.kv_heads),
            ("ffn-hidden", spec.ffn, base.ffn), ("seq-len", spec.seq_len, base.seq_len)):
        if value != preset_value:
            keys[key] = value
    keys.update({
        "steps": run["steps"],
        "batch-size": run["micro_batch"],
        "grad-accum": run["grad_accum_steps"],
        "dtype": "bf16" if req.precision == "bf16-mixed" else "fp32",
        "activation-checkpointing": recompute == "full",
        "tp": tp, "pp": pp,
    })
    if run["cp"] > 1:
        keys["cp"] = run["cp"]
    if run["ep"] > 1:
        keys["ep"] = run["ep"]
    if zero == 3:
        keys.update({"parallel": "fsdp", "dp-replicate": 1, "dp-shard": dp})
    elif tp * pp == 1:
        keys["parallel"] = "ddp"
    else:
        keys.update({"parallel": "fsdp", "dp-replicate": dp, "dp-shard": 1})
    if pp > 1:
        keys["pp-schedule"] = "1f1b"
    if req.lora_rank is not None:
        keys["lora-rank"] = req.lora_rank
    keys["gpu"] = run["gpu"]
    per_node = min(run["gpus"], req.gpus_per_node)
    nodes = run["gpus"] // per_node
    head = [
        f"# llmtk estimate's layout for {spec.name}: {run['gpus']} x {run['gpu']}, dp {dp} x "
        f"tp {tp} x pp {pp}" + (f" x cp {run['cp']}" if run["cp"] > 1 else "")
        + (f" (ep {run['ep']})" if run["ep"] > 1 else "")
        + f", ZeRO {zero}; {run['steps']:,} steps",
        f"# memory as llmtk train holds it: {gb2(result['memory']['llmtk_train_total'])} per "
        "GPU (its busiest rank; what --dry-run quotes as llmtk estimate's)",
    ]
    head += [
        "# check it per rank without a GPU:",
        f"#   llmtk train --config FILE --dry-run --nproc-per-node {per_node} --nnodes {nodes}",
        "# train it (on every node):",
        f"#   llmtk train --config FILE --data DATA --out RUN --nproc-per-node {per_node} "
        f"--nnodes {nodes} --rdzv-endpoint HOST:PORT",
    ]
    return "\n".join(head + [f"{k} = {_toml(v)}" for k, v in keys.items()]) + "\n"
