"""The small public API other packages use to read what `llmtk train` wrote, so that none
of them depends on the checkpoint layout (full or DCP-sharded, run dir or step dir):

    model, tok = load_model("runs/a")            # newest verified checkpoint of the run
    weights = full_state_dict("runs/a/checkpoints/step-0001000")
    export("runs/a", "model.pt")                 # one consolidated, weights-only file
    run = load_run("runs/sft")                   # + step, run dir, config, chat template

A LoRA run's adapters are folded into the base weights on the way out (W + (alpha/r) B A),
so every reader gets a plain GPT state dict.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from llmtk.errors import UsageError

EXPORT_FORMAT = "llmtk-gpt-v1"


def find_checkpoint(path: str) -> str:
    """The verified checkpoint directory for a run dir, checkpoints dir or step dir."""
    from llmtk.train import checkpoint as C

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

    from llmtk.train import checkpoint as C

    if os.path.isfile(path):
        return _clean_keys(_read_export(path)["state_dict"])
    ckpt = find_checkpoint(path)
    model_sd, _ = C.load_full_state(ckpt, with_optim=False)
    sd = _clean_keys({k: v.detach().to("cpu") if isinstance(v, torch.Tensor) else v
                      for k, v in model_sd.items()})
    if any(".lora_" in k for k in sd):
        from llmtk.train.lora import merged_state_dict

        meta = C.load_state(ckpt)
        tc = meta.get("train_config", {})
        sd = merged_state_dict(sd, meta["model_config"],
                               float(tc.get("lora_alpha") or tc.get("lora_rank")))
    return sd


def _read_export(path: str) -> dict:
    from llmtk.train import checkpoint as C

    blob = C.load_tensors(os.path.dirname(path) or ".", os.path.basename(path))
    if not isinstance(blob, dict) or blob.get("format") != EXPORT_FORMAT:
        raise UsageError(f"{path}: not a file written by `llmtk train export`")
    return blob


def load_model(path: str, device: str = "cpu"):
    """(GPT in eval mode, its tokenizer) from a run dir, checkpoint dir or exported file.
    The model's configuration is `model.cfg`."""
    model, tok, _ = _load(path, device)
    return model, tok


@dataclass
class LoadedRun:
    model: object          # llmtk.train.model.GPT, in eval mode (LoRA merged)
    tokenizer: object
    step: int
    checkpoint: str        # the step directory
    run_dir: str           # the directory holding checkpoints/
    train_config: dict
    chat: object | None    # llmtk.train.chat template for --sft runs, else None


def run_dir_of(checkpoint: str) -> str:
    """OUT for OUT/checkpoints/step-N, else the checkpoint's own parent."""
    parent = os.path.dirname(os.path.abspath(checkpoint))
    return os.path.dirname(parent) if os.path.basename(parent) == "checkpoints" else parent


def load_run(path: str, device: str = "cpu") -> LoadedRun:
    """load_model plus what evaluation needs: the step, the run directory and, for an
    `--sft` run, the chat template it was trained with (so prompts look as it learned)."""
    ckpt = find_checkpoint(path)
    model, tok, meta = _load(ckpt, device)
    tc = meta.get("train_config", {})
    chat = None
    if tc.get("sft"):
        from llmtk.train.chat import chat_template

        chat = chat_template(tok, tc.get("chat_template", "auto"))
    return LoadedRun(model, tok, int(meta["step"]), ckpt, run_dir_of(ckpt), tc, chat)


def _load(path: str, device: str):
    from llmtk.text.tokenizer import load_tokenizer
    from llmtk.train import checkpoint as C
    from llmtk.train.model import GPT, ModelConfig

    if os.path.isfile(path):
        blob = _read_export(path)
        meta = {"model_config": blob["model_config"], "tokenizer": blob["tokenizer"],
                "train_config": {"tokenizer": blob["tokenizer_path"]}}
    else:
        meta = C.load_state(find_checkpoint(path))
    try:
        cfg = ModelConfig(**meta["model_config"])
        tok = load_tokenizer(meta.get("train_config", {}).get("tokenizer", "bytes"))
    except (KeyError, TypeError) as e:
        raise UsageError(f"{path}: the checkpoint lacks the model configuration ({e})") \
            from None
    if tok.fingerprint() != meta.get("tokenizer", tok.fingerprint()):
        raise UsageError(f"{path}: the tokenizer it names is not the one it was trained with")
    model = GPT(cfg)
    model.load_state_dict(full_state_dict(path))
    return model.to(device).eval(), tok, meta


def export(path: str, output: str) -> str:
    """Write the model of checkpoint `path` as one weights-only file (atomically); returns
    the checkpoint directory it came from."""
    import tempfile

    from llmtk.train import checkpoint as C

    ckpt = find_checkpoint(path)
    meta = C.load_state(ckpt)
    blob = {"format": EXPORT_FORMAT, "model_config": meta["model_config"],
            "tokenizer": meta.get("tokenizer"),
            "tokenizer_path": meta.get("train_config", {}).get("tokenizer", "bytes"),
            "step": meta["step"], "state_dict": full_state_dict(ckpt)}
    directory = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(directory):
        raise UsageError(f"-o {output}: directory {directory} does not exist")
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(output)}.tmp-")
    os.close(fd)
    try:
        C.save_torch(blob, tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, output)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return ckpt


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
