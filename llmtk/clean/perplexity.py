"""Perplexity under a small reference language model (CCNet's third quality signal).

The model is an `llmtk train` checkpoint (a run directory, its checkpoints/ directory or one
step-NNNNNNN directory): `state.json` gives the model and tokenizer configuration, `model.pt`
the weights. A document is scored as training saw it: EOS, then its tokens, then EOS, cut into
windows of the model's sequence length; the score is exp(mean next-token cross-entropy),
over at most `max_tokens` tokens (the cost of one document stays bounded).

Deterministic for --workers: torch runs with one thread in every process.
"""

from __future__ import annotations

import math
import os

from llmtk.errors import UsageError

# Loaded (model, tokenizer) by path, per process (kept across --workers chunks).
_LOADED: dict[str, tuple] = {}


class PerplexityModel:
    def __init__(self, path: str, max_tokens: int = 4096) -> None:
        self.path = path
        self.max_tokens = max_tokens
        self._loaded = None

    def __getstate__(self) -> dict:
        return {"path": self.path, "max_tokens": self.max_tokens, "_loaded": None}

    def load(self):
        if self._loaded is None:
            if self.path not in _LOADED:
                _LOADED[self.path] = _load_checkpoint(self.path)
            self._loaded = _LOADED[self.path]
        return self._loaded

    def score(self, text: str) -> float:
        """Perplexity per token of `text` (inf for an empty text)."""
        import torch

        model, tok, seq_len = self.load()
        ids = [tok.eos_id, *tok.encode(text)[: self.max_tokens], tok.eos_id]
        if len(ids) < 2:
            return math.inf
        total, count = 0.0, 0
        with torch.inference_mode():
            for start in range(0, len(ids) - 1, seq_len):
                chunk = ids[start : start + seq_len + 1]
                x = torch.tensor([chunk[:-1]], dtype=torch.long)  # (1, T)
                y = torch.tensor([chunk[1:]], dtype=torch.long)  # (1, T)
                _, loss = model(x, y)
                n = y.shape[1]
                total += float(loss) * n
                count += n
        return math.exp(total / count)


def _load_checkpoint(path: str):
    import torch

    from llmtk.text.tokenizer import load_tokenizer
    from llmtk.train import checkpoint as C
    from llmtk.train.model import GPT, ModelConfig

    torch.set_num_threads(1)  # the same bits in every --workers process
    ckpt = C.resolve(path) if os.path.exists(path) else None
    if ckpt is None:
        raise UsageError(f"--ppl-model: no complete llmtk train checkpoint at {path}")
    state = C.load_state(ckpt)
    try:
        cfg = ModelConfig(**state["model_config"])
        tok = load_tokenizer(state.get("train_config", {}).get("tokenizer", "bytes"))
    except (KeyError, TypeError) as e:
        raise UsageError(f"--ppl-model: {ckpt}/state.json lacks the model configuration ({e})") \
            from None
    if tok.fingerprint() != state.get("tokenizer", tok.fingerprint()):
        raise UsageError(f"--ppl-model: the tokenizer of {ckpt} is not the one it was trained with")
    model = GPT(cfg)
    weights = C.load_tensors(ckpt, "model.pt")
    weights = {k.removeprefix("_orig_mod.").removeprefix("module."): v for k, v in weights.items()}
    model.load_state_dict(weights)
    model.eval()
    return model, tok, cfg.seq_len


def quantile(values: list[float], q: float) -> float:
    """The q-quantile (nearest rank, no interpolation) of finite values; inf if none."""
    finite = sorted(v for v in values if math.isfinite(v))
    if not finite:
        return math.inf
    rank = min(len(finite) - 1, max(0, math.ceil(q * len(finite)) - 1))
    return finite[rank]
