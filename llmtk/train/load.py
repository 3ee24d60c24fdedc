"""Load a trained model for inference: an llmtk run/checkpoint, or a Hugging Face folder.

The one public way for other packages (generate, clean's perplexity filter) to get
a model without knowing the checkpoint layout.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from llmtk.errors import DataError, UsageError


@dataclass
class Loaded:
    model: object      # llmtk.train.model.GPT, in eval mode
    tokenizer: object  # llmtk.text.tokenizer.Tokenizer
    source: str        # the checkpoint directory or the Hugging Face folder
    kind: str          # "llmtk" or "hf"


def load_model(source: str, device: str = "cpu", seq_len: int | None = None) -> Loaded:
    """source: a run directory, its checkpoints/ directory, a step directory, or a
    Hugging Face Llama-family folder (config.json + model.safetensors + tokenizer.json)."""
    from llmtk.text.tokenizer import load_tokenizer
    from llmtk.train import checkpoint as C
    from llmtk.train import hf
    from llmtk.train.model import GPT, ModelConfig

    if not os.path.exists(source):
        raise UsageError(f"{source}: no such file or directory")
    if hf.is_hf_dir(source):
        cfg, sd = hf.load_hf(source, seq_len)
        tok = load_tokenizer(hf.tokenizer_file(source))
        path, kind = source, "hf"
    else:
        path = C.resolve(source)
        if path is None:
            raise UsageError(f"{source}: neither a Hugging Face model folder nor an llmtk "
                             "run with a complete checkpoint")
        state = C.load_state(path)
        try:
            cfg = ModelConfig(**state["model_config"])
            tok = load_tokenizer(state.get("train_config", {}).get("tokenizer", "bytes"))
        except (KeyError, TypeError) as e:
            raise DataError(f"{path}/state.json lacks the model configuration ({e})") from None
        if tok.fingerprint() != state.get("tokenizer", tok.fingerprint()):
            raise DataError(f"{path}: its tokenizer file changed since training")
        if seq_len:
            cfg = replace(cfg, seq_len=seq_len)
        from llmtk.train.api import full_state_dict

        sd = full_state_dict(path)  # full or DCP-sharded checkpoints alike
        kind = "llmtk"
    model = GPT(cfg)
    model.load_state_dict(sd)
    model.to(device).eval()
    return Loaded(model, tok, path, kind)
