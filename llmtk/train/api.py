"""The small public API other packages use to read what `llmtk train` wrote, so that none
of them depends on the checkpoint layout (full or DCP-sharded, run dir or step dir):

    model, tok = load_model("runs/a")            # newest verified checkpoint of the run
    m = load_model("hf:models/base")             # .model, .tokenizer, .kind, .step, .chat
    weights = full_state_dict("runs/a/checkpoints/step-0001000")
    export("runs/a", "model.pt")                 # one consolidated, weights-only file

A LoRA run's adapters are folded into the base weights on the way out (W + (alpha/r) B A),
so every reader gets a plain GPT state dict.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from llmtk.errors import DataError, UsageError
from llmtk.io.atomic import atomic_name
from llmtk.train.checkpoint.state_dict import (
    EXPORT_FORMAT,
    find_checkpoint,
    full_state_dict,
    read_export,
)

HF_PREFIX = "hf:"


@dataclass
class LoadedModel:
    """What `load_model` returns. Unpacks as `model, tokenizer = load_model(path)`."""

    model: object              # llmtk.train.model.gpt.GPT, in eval mode (LoRA merged)
    tokenizer: object          # llmtk.text.tokenizer.Tokenizer
    source: str                # the step directory, Hugging Face folder or exported file
    kind: str                  # "llmtk" (a checkpoint), "export" (a file) or "hf"
    step: int | None = None    # the checkpoint's (or export's) step; None for "hf"
    run_dir: str | None = None  # the directory holding checkpoints/ ("llmtk" only)
    train_config: dict = field(default_factory=dict)
    chat: object | None = None  # the chat template of an `--sft` run or an HF folder, else None

    @property
    def checkpoint(self) -> str:
        return self.source

    def __iter__(self):
        return iter((self.model, self.tokenizer))


def load_model(path: str, device: str = "cpu", seq_len: int | None = None) -> LoadedModel:
    """The one way to get a trained model for inference, whatever wrote it:

    - a run directory (its newest verified checkpoint), its checkpoints/ directory or one
      step directory, with a consolidated model.pt or DCP shards (FSDP2) alike;
    - a file written by `llmtk train export`;
    - `hf:PATH` (or a bare PATH that is no llmtk run): a Hugging Face Llama-family folder
      (config.json, model.safetensors, tokenizer.json).

    seq_len overrides the model's context length (rotary tables are derived, not stored).
    """
    from llmtk.text.tokenizer import load_tokenizer
    from llmtk.train.checkpoint import files as C
    from llmtk.train.model import hf
    from llmtk.train.model.gpt import GPT

    hf_dir = path[len(HF_PREFIX):] if path.startswith(HF_PREFIX) else None
    if not os.path.exists(hf_dir or path):
        raise UsageError(f"{hf_dir or path}: no such file or directory")
    ckpt = None
    if hf_dir is None and os.path.isdir(path):
        ckpt = C.resolve(path)
        if ckpt is None and hf.is_hf_dir(path):
            hf_dir = path
        elif ckpt is None:
            raise UsageError(f"{path}: neither a Hugging Face model folder nor an llmtk run "
                             "with a complete checkpoint")
    if hf_dir is not None:
        if not hf.is_hf_dir(hf_dir):
            raise UsageError(f"{path}: not a Hugging Face model folder (config.json and "
                             "model.safetensors)")
        cfg, sd = hf.load_hf(hf_dir, seq_len)
        from llmtk.train.data.chat import own_template

        tok = load_tokenizer(hf.tokenizer_file(hf_dir))
        loaded = LoadedModel(GPT(cfg), tok, hf_dir, "hf", chat=own_template(tok))
    else:
        source = ckpt or path
        cfg, tok, meta = _config_and_tokenizer(source, C.load_state(source) if ckpt
                                               else _export_meta(path))
        if seq_len:
            cfg = replace(cfg, seq_len=seq_len)
        sd = full_state_dict(source)
        tc = meta.get("train_config", {})
        chat = None
        if tc.get("sft"):
            from llmtk.train.data.chat import chat_template, from_record

            recorded = meta.get("chat_template")  # older checkpoints: only the option
            chat = (from_record(tok, recorded) if recorded
                    else chat_template(tok, tc.get("chat_template", "auto")))
        loaded = LoadedModel(GPT(cfg), tok, source, "llmtk" if ckpt else "export",
                             meta.get("step"), run_dir_of(ckpt) if ckpt else None, tc, chat)
    loaded.model.load_state_dict(sd)
    loaded.model.to(device).eval()
    return loaded


def run_dir_of(checkpoint: str) -> str:
    """OUT for OUT/checkpoints/step-N, else the checkpoint's own parent."""
    parent = os.path.dirname(os.path.abspath(checkpoint))
    return os.path.dirname(parent) if os.path.basename(parent) == "checkpoints" else parent


def _export_meta(path: str) -> dict:
    blob = read_export(path)
    return {"model_config": blob["model_config"], "tokenizer": blob["tokenizer"],
            "step": blob.get("step"), "train_config": {"tokenizer": blob["tokenizer_path"]}}


def _config_and_tokenizer(path: str, meta: dict):
    """(ModelConfig, tokenizer, meta) of a checkpoint's state.json or an export's header,
    the tokenizer checked against the fingerprint training recorded."""
    from llmtk.text.tokenizer import load_tokenizer
    from llmtk.train.model.gpt import ModelConfig

    try:
        cfg = ModelConfig(**meta["model_config"])
        tok = load_tokenizer(meta.get("train_config", {}).get("tokenizer", "bytes"))
    except (KeyError, TypeError) as e:
        raise DataError(f"{path}: the checkpoint lacks the model configuration ({e})") \
            from None
    if tok.fingerprint() != meta.get("tokenizer", tok.fingerprint()):
        raise DataError(f"{path}: its tokenizer file changed since training (not the one it "
                        "was trained with)")
    return cfg, tok, meta


def export(path: str, output: str) -> str:
    """Write the model of checkpoint `path` as one weights-only file (atomically); returns
    the checkpoint directory it came from."""
    from llmtk.train.checkpoint import files as C

    ckpt = find_checkpoint(path)
    meta = C.load_state(ckpt)
    blob = {"format": EXPORT_FORMAT, "model_config": meta["model_config"],
            "tokenizer": meta.get("tokenizer"),
            "tokenizer_path": meta.get("train_config", {}).get("tokenizer", "bytes"),
            "step": meta["step"], "qkv_layout": C.QKV_LAYOUT,
            "state_dict": full_state_dict(ckpt)}
    directory = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(directory):
        raise UsageError(f"-o {output}: directory {directory} does not exist")
    with atomic_name(output) as tmp:
        C.save_torch(blob, tmp)  # by name: its disk-full errors are CheckpointErrors
    return ckpt
