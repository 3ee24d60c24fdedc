"""A checkpoint's model weights as one plain state dict: what `export`, `load_model` and the
Hugging Face export all read, whatever the layout (full or DCP-sharded, run dir or step dir,
or a file written by `export`). A LoRA run's adapters are folded into the base weights.
"""

from __future__ import annotations

import os

from llmtk.errors import UsageError

EXPORT_FORMAT = "llmtk-gpt-v1"


def find_checkpoint(path: str) -> str:
    """The verified checkpoint directory for a run dir, checkpoints dir or step dir."""
    from llmtk.train.checkpoint import files as C

    found = C.resolve(path) if os.path.isdir(path) else None
    if found is None:
        raise UsageError(f"{path}: no complete llmtk train checkpoint there")
    return found


def _clean_keys(sd: dict) -> dict:
    """Drop the wrappers' prefixes (torch.compile's _orig_mod., DDP's module.)."""
    return {k.replace("_orig_mod.", "").removeprefix("module."): v for k, v in sd.items()}


def full_state_dict(path: str) -> dict:
    """The model's full state dict (CPU tensors) from any checkpoint, full or DCP-sharded,
    or from a file written by `export`."""
    import torch

    from llmtk.train.checkpoint import files as C

    if os.path.isfile(path):
        blob = read_export(path)
        sd = _clean_keys(blob["state_dict"])
        if C.needs_qkv_upgrade(blob):  # written before the grouped wqkv layout
            C.upgrade_qkv(sd, None, blob["model_config"])
        return sd
    ckpt = find_checkpoint(path)
    model_sd, _ = C.load_full_state(ckpt, with_optim=False)
    sd = _clean_keys({k: v.detach().to("cpu") if isinstance(v, torch.Tensor) else v
                      for k, v in model_sd.items()})
    if any(".lora_" in k for k in sd):
        from llmtk.train.model.lora import merged_state_dict

        meta = C.load_state(ckpt)
        tc = meta.get("train_config", {})
        sd = merged_state_dict(sd, meta["model_config"],
                               float(tc.get("lora_alpha") or tc.get("lora_rank")))
    return sd


def read_export(path: str) -> dict:
    from llmtk.train.checkpoint import files as C

    blob = C.load_tensors(os.path.dirname(path) or ".", os.path.basename(path))
    if not isinstance(blob, dict) or blob.get("format") != EXPORT_FORMAT:
        raise UsageError(f"{path}: not a file written by `llmtk train export`")
    return blob
