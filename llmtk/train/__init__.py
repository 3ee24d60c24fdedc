"""Training: the GPT model, data cache, loop, checkpoints and the torchrun launcher.

The public API for other packages (torch is imported only when one is called):
`load_model(path)` -> a LoadedModel (`.model`, `.tokenizer`, ...; unpacks as `model, tok`)
from a run dir, a checkpoint dir (model.pt or DCP shards), an exported file or
`hf:PATH`; `full_state_dict(path)` -> the model's full state dict from any checkpoint;
`export(path, output)`.
"""


def load_model(path: str, device: str = "cpu", seq_len: int | None = None):
    """The model of a run dir, checkpoint dir, exported file or `hf:PATH`, in eval mode:
    a LoadedModel (see llmtk.train.api.load_model), `model, tok = load_model(path)`."""
    from llmtk.train.api import load_model as _load

    return _load(path, device, seq_len)


def full_state_dict(path: str) -> dict:
    """The model's consolidated state dict (CPU tensors) from any checkpoint."""
    from llmtk.train.api import full_state_dict as _full

    return _full(path)


def export(path: str, output: str) -> str:
    """Write checkpoint `path`'s model as one weights-only file; returns the checkpoint."""
    from llmtk.train.api import export as _export

    return _export(path, output)
