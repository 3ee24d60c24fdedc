"""Loading a trained model: the small public API other packages and commands use.

`load_model(RUN_DIR | CHECKPOINT)` returns the GPT (LoRA adapters merged into the base
weights), its tokenizer, the step and, for an `--sft` run, the chat template it was
trained with, so evaluation prompts an instruction-tuned model the way it learned.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from llmtk.errors import DataError, UsageError


@dataclass
class LoadedModel:
    model: object          # llmtk.train.model.GPT, in eval mode
    tokenizer: object
    step: int
    checkpoint: str        # the step directory
    run_dir: str           # the directory holding checkpoints/
    train_config: dict
    chat: object | None    # llmtk.train.chat template for SFT runs, else None


def run_dir_of(checkpoint: str) -> str:
    """OUT for OUT/checkpoints/step-N, else the checkpoint's own parent."""
    parent = os.path.dirname(os.path.abspath(checkpoint))
    return os.path.dirname(parent) if os.path.basename(parent) == "checkpoints" else parent


def load_model(path: str, device: str = "cpu") -> LoadedModel:
    from llmtk.text.tokenizer import load_tokenizer
    from llmtk.train import checkpoint as C
    from llmtk.train.lora import merged_state_dict
    from llmtk.train.model import GPT, ModelConfig

    ckpt = C.resolve(path)
    if ckpt is None:
        raise UsageError(f"{path}: no complete checkpoint there (a run directory, its "
                         "checkpoints/ or a step-NNNNNNN directory)")
    state = C.load_state(ckpt)
    tc = state.get("train_config", {})
    tok = load_tokenizer(tc.get("tokenizer", "bytes"))
    if state.get("tokenizer") not in (None, tok.fingerprint()):
        raise DataError(f"{ckpt}: trained with tokenizer {state['tokenizer']}, but "
                        f"{tc.get('tokenizer')} is now {tok.fingerprint()}")
    weights = C.load_tensors(ckpt, "model.pt")
    if any(".lora_" in k for k in weights):
        alpha = tc.get("lora_alpha") or tc.get("lora_rank")
        weights = merged_state_dict(weights, state["model_config"], float(alpha))
    model = GPT(ModelConfig(**state["model_config"]))
    model.load_state_dict(weights)
    model.to(device).eval()
    chat = None
    if tc.get("sft"):
        from llmtk.train.chat import chat_template

        chat = chat_template(tok, tc.get("chat_template", "auto"))
    return LoadedModel(model, tok, int(state["step"]), ckpt, run_dir_of(ckpt), tc, chat)
