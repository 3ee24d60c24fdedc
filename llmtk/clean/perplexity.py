"""Perplexity under a small reference language model (CCNet's third quality signal).

The model is whatever `llmtk.train.load_model` reads (a run directory, its checkpoints/
directory or one step-NNNNNNN directory, consolidated or DCP-sharded; a file written by
`llmtk train export`; `hf:PATH`), so this module knows nothing of train's checkpoint layout.
A document is scored as training saw it: EOS, then its tokens, then EOS, cut into
windows of the model's sequence length; the score is exp(mean next-token cross-entropy),
over at most `max_tokens` tokens (the cost of one document stays bounded).

Deterministic for --workers: torch runs with one thread in every process.
"""

from __future__ import annotations

import math

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

    from llmtk.errors import LlmtkError
    from llmtk.train import load_model

    torch.set_num_threads(1)  # the same bits in every --workers process
    try:
        # train's own loader: a run or step dir (consolidated or DCP), an export, hf:PATH
        loaded = load_model(path)
    except LlmtkError as e:
        raise type(e)(f"--ppl-model: {e}") from None
    return loaded.model, loaded.tokenizer, loaded.model.cfg.seq_len


def quantile(values: list[float], q: float) -> float:
    """The q-quantile (nearest rank, no interpolation) of finite values; inf if none."""
    finite = sorted(v for v in values if math.isfinite(v))
    if not finite:
        return math.inf
    rank = min(len(finite) - 1, max(0, math.ceil(q * len(finite)) - 1))
    return finite[rank]
