"""Training: the GPT model, data cache, loop, checkpoints and the torchrun launcher.

The public API for other packages (torch is imported only when one is called):
`load_model(path)` -> (model, tokenizer); `full_state_dict(path)` -> the model's full
state dict from any checkpoint (full or DCP-sharded); `export(path, output)`.
"""


def load_model(path: str, device: str = "cpu"):
    """(GPT in eval mode, tokenizer) from a run dir, checkpoint dir or exported file."""
    from llmtk.train.api import load_model as _load

    return _load(path, device)


def full_state_dict(path: str) -> dict:
    """The model's consolidated state dict (CPU tensors) from any checkpoint."""
    from llmtk.train.api import full_state_dict as _full

    return _full(path)


def export(path: str, output: str) -> str:
    """Write checkpoint `path`'s model as one weights-only file; returns the checkpoint."""
    from llmtk.train.api import export as _export

    return _export(path, output)
