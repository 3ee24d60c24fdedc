"""Model configuration, named presets and exact parameter counts (no torch import).

`llmtk.train.model` re-exports everything here next to the GPT module itself.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

VOCAB_MULTIPLE = 128


@dataclass
class ModelConfig:
    vocab_size: int = 256     # set from the tokenizer at train time (byte-level: 256 + EOS = 257)
    seq_len: int = 256        # the longest sequence (rotary tables are precomputed this long)
    n_layer: int = 4
    d_model: int = 256
    n_head: int = 4
    n_kv_head: int | None = None   # None = n_head (MHA); fewer = grouped-query attention
    ffn_hidden: int | None = None  # None = SwiGLU default: 8/3 * d_model, rounded up to 64s
    tie_embeddings: bool = True
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    @property
    def padded_vocab(self) -> int:
        """Rows of the embedding and output matrices: vocab_size rounded up to a multiple of
        VOCAB_MULTIPLE so the head matmul tiles evenly (nanoGPT's 50257 -> 50304). The extra
        rows are never a target and never sampled (their logits are masked)."""
        return VOCAB_MULTIPLE * math.ceil(self.vocab_size / VOCAB_MULTIPLE)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def kv_heads(self) -> int:
        return self.n_head if self.n_kv_head is None else self.n_kv_head

    @property
    def hidden(self) -> int:
        """The SwiGLU hidden width (Llama's rule: 2/3 of 4*d keeps the MLP's parameter
        count equal to a 4*d GELU MLP; rounded up to 64 for efficient matmuls)."""
        if self.ffn_hidden is not None:
            return self.ffn_hidden
        return 64 * math.ceil(8 * self.d_model / 3 / 64)

    def validate(self) -> None:
        """Raise ValueError naming the inconsistent field."""
        for name in ("vocab_size", "seq_len", "n_layer", "d_model", "n_head"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.n_head:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by n_head ({self.n_head})")
        if self.head_dim % 2:
            raise ValueError(f"head dim d_model/n_head = {self.head_dim} must be even (rotary)")
        if self.kv_heads < 1 or self.n_head % self.kv_heads:
            raise ValueError(
                f"n_head ({self.n_head}) must be a multiple of n_kv_head ({self.kv_heads})")
        if self.hidden < 1:
            raise ValueError(f"ffn_hidden must be >= 1, got {self.hidden}")

    def to_dict(self) -> dict:
        return asdict(self)


# Named sizes. vocab_size is a placeholder the trainer replaces with the tokenizer's
# size; 50304 is GPT-2's 50257 padded to a multiple of 64 (what estimates should use).
PRESETS: dict[str, ModelConfig] = {
    # A CPU-trainable model for tests and laptops (~0.8M params with the byte tokenizer).
    "tiny": ModelConfig(vocab_size=257, seq_len=256, n_layer=4, d_model=128, n_head=4),
    # GPT-2 small's shape (12 x 768, 12 heads); SwiGLU hidden 2048 matches its 4*d MLP size.
    "gpt2-124m": ModelConfig(vocab_size=50304, seq_len=1024, n_layer=12, d_model=768, n_head=12),
    # GPT-2 medium's shape (24 x 1024, 16 heads).
    "350m": ModelConfig(vocab_size=50304, seq_len=2048, n_layer=24, d_model=1024, n_head=16),
    # ~1.0B: 20 x 2048, 16 heads with 8 kv heads (GQA), untied-size embedding tied.
    "1b": ModelConfig(vocab_size=50304, seq_len=2048, n_layer=20, d_model=2048, n_head=16,
                      n_kv_head=8),
    # Llama-2-7B's shape (32 x 4096, 32 heads, hidden 11008, untied, 32000 vocab).
    "7b": ModelConfig(vocab_size=32000, seq_len=4096, n_layer=32, d_model=4096, n_head=32,
                      ffn_hidden=11008, tie_embeddings=False),
}


def preset(name: str, **overrides) -> ModelConfig:
    """A copy of a named preset with some fields replaced."""
    if name not in PRESETS:
        raise KeyError(f"unknown model preset {name!r} (known: {', '.join(PRESETS)})")
    return replace(PRESETS[name], **overrides)


def count_params(cfg: ModelConfig) -> int:
    """Exact parameter count of GPT(cfg) (equals sum(p.numel() for p in model.parameters()))."""
    d, hd = cfg.d_model, cfg.head_dim
    attn = d * (cfg.n_head + 2 * cfg.kv_heads) * hd + cfg.n_head * hd * d  # wqkv + wo
    mlp = 3 * d * cfg.hidden                                                # w1, w3, w2
    norms = 2 * d                                                           # attn_norm, mlp_norm
    per_layer = attn + mlp + norms
    embed = cfg.padded_vocab * d * (1 if cfg.tie_embeddings else 2)
    return cfg.n_layer * per_layer + embed + d  # + final norm
