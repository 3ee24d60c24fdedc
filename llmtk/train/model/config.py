"""Model configuration, named presets and exact parameter counts (no torch import).

`llmtk.train.model.gpt` re-exports everything here next to the GPT module itself.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from llmtk.presets import PRESETS as _SHARED
from llmtk.presets import is_moe_layer, trainable

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
    qkv_bias: bool = False    # biases on q/k/v only (Qwen2's one difference from Llama)
    explicit_head_dim: int | None = None  # None: d_model / n_head (Qwen3: 128 at any width)
    qk_norm: bool = False     # RMSNorm over each head's q and k before rotary (Qwen3)
    # mixture of experts (llmtk.train.model.moe): n_experts > 0 makes layers first_dense,
    # first_dense + moe_every, ... MoE layers; the others stay dense
    n_experts: int = 0               # routed experts per MoE layer; 0: a dense model
    top_k: int = 2                   # experts per token
    n_shared_experts: int = 0        # always-on experts (one MLP n_shared x expert_hidden wide)
    expert_hidden: int | None = None  # an expert's SwiGLU width; None: the dense width
    moe_every: int = 1
    first_dense: int = 0
    router_score: str = "softmax"    # softmax (Mixtral, Qwen3) | sigmoid (DeepSeek-V3)
    router_norm_topk: bool = True    # the K chosen weights renormalised to 1 (Mixtral;
                                     # Qwen3-MoE's norm_topk_prob, false in Qwen1.5/2-MoE)
    router_bias_rate: float = 1e-2   # aux-loss-free balancing bias step (DeepSeek-V3); 0: off
                                     # (benchmarks/moe_balance.py chose it; DeepSeek: 1e-3)
    router_bias_rule: str = "sign"   # sign: rate*sign(err) (DeepSeek-V3) | proportional:
                                     # rate*clip(err/mean, -1, 1), err = mean load - load
    router_aux_loss: float = 0.0     # Switch/GShard balance loss coefficient
    router_z_loss: float = 0.0       # ST-MoE router z-loss coefficient
    capacity_factor: float | None = None  # None: dropless

    @property
    def padded_vocab(self) -> int:
        """Rows of the embedding and output matrices: vocab_size rounded up to a multiple of
        VOCAB_MULTIPLE so the head matmul tiles evenly (nanoGPT's 50257 -> 50304). The extra
        rows are never a target and never sampled (their logits are masked)."""
        return VOCAB_MULTIPLE * math.ceil(self.vocab_size / VOCAB_MULTIPLE)

    @property
    def head_dim(self) -> int:
        if self.explicit_head_dim is not None:
            return self.explicit_head_dim
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

    @property
    def expert_ffn(self) -> int:
        return self.hidden if self.expert_hidden is None else self.expert_hidden

    @property
    def active_ffn(self) -> float:
        """The MLP width one token passes through, the mean over the layers (what its
        activations scale with): dense, or a MoE layer's top_k + shared experts'."""
        moe = self.moe_layers
        active = (self.top_k + self.n_shared_experts) * self.expert_ffn
        return (moe * active + (self.n_layer - moe) * self.hidden) / self.n_layer

    def is_moe(self, layer: int) -> bool:
        """Whether block `layer` (0-based) is a mixture-of-experts layer."""
        return is_moe_layer(layer, self.n_experts, self.first_dense, self.moe_every)

    @property
    def moe_layers(self) -> int:
        return sum(self.is_moe(i) for i in range(self.n_layer))

    def validate(self) -> None:
        """Raise ValueError naming the inconsistent field."""
        for name in ("vocab_size", "seq_len", "n_layer", "d_model", "n_head"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.explicit_head_dim is None and self.d_model % self.n_head:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by n_head ({self.n_head})")
        if self.head_dim % 2:
            raise ValueError(f"head dim {self.head_dim} must be even (rotary)")
        if self.kv_heads < 1 or self.n_head % self.kv_heads:
            raise ValueError(
                f"n_head ({self.n_head}) must be a multiple of n_kv_head ({self.kv_heads})")
        if self.hidden < 1:
            raise ValueError(f"ffn_hidden must be >= 1, got {self.hidden}")
        if self.n_experts:
            self._validate_moe()

    def _validate_moe(self) -> None:
        if self.n_experts < 0:
            raise ValueError(f"n_experts must be >= 0, got {self.n_experts}")
        if not 1 <= self.top_k <= self.n_experts:
            raise ValueError(f"top_k ({self.top_k}) must be in [1, n_experts = "
                             f"{self.n_experts}]")
        for name in ("expert_ffn", "moe_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.n_shared_experts < 0 or self.first_dense < 0:
            raise ValueError("n_shared_experts and first_dense must be >= 0")
        if self.router_score not in ("softmax", "sigmoid"):
            raise ValueError(f"router_score must be softmax or sigmoid, got "
                             f"{self.router_score!r}")
        if self.router_bias_rule not in ("sign", "proportional"):
            raise ValueError(f"router_bias_rule must be sign or proportional, got "
                             f"{self.router_bias_rule!r}")
        if self.capacity_factor is not None and self.capacity_factor <= 0:
            raise ValueError(f"capacity_factor must be > 0, got {self.capacity_factor}")
        if not self.moe_layers:
            raise ValueError(f"no layer is a MoE layer: first_dense ({self.first_dense}) "
                             f">= n_layer ({self.n_layer})")

    def to_dict(self) -> dict:
        return asdict(self)


def config_from_spec(spec) -> ModelConfig:
    """The ModelConfig of a trainable preset from the shared table (llmtk.presets)."""
    return ModelConfig(vocab_size=spec.vocab_size, seq_len=spec.seq_len, n_layer=spec.n_layer,
                       d_model=spec.d_model, n_head=spec.n_head, n_kv_head=spec.n_kv_head,
                       ffn_hidden=spec.ffn_hidden, tie_embeddings=spec.tie_embeddings,
                       norm_eps=spec.norm_eps, rope_theta=spec.rope_theta,
                       n_experts=spec.n_experts, top_k=spec.top_k or 2,
                       n_shared_experts=spec.n_shared_experts, expert_hidden=spec.expert_ffn,
                       moe_every=spec.moe_every, first_dense=spec.first_dense,
                       explicit_head_dim=(spec.head_dim if spec.head_dim is not None
                                          and spec.head_dim * spec.n_head != spec.d_model
                                          else None), qk_norm=spec.qk_norm)


# Every Llama-style preset of the one table that `llmtk estimate` also uses. vocab_size is
# the preset's; the trainer replaces it with the tokenizer's size.
PRESETS: dict[str, ModelConfig] = {
    name: config_from_spec(spec) for name, spec in _SHARED.items() if trainable(spec) is None}


def check_model_name(name: str) -> None:
    """Raise ConfigError unless `name` is a trainable preset (before any data is read)."""
    if name in PRESETS:
        return
    import difflib

    from llmtk.errors import ConfigError

    why = f" ({name} is {trainable(_SHARED[name])})" if name in _SHARED else ""
    close = difflib.get_close_matches(name, list(PRESETS), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close and not why else ""
    raise ConfigError("model", f"must be one of {', '.join(PRESETS)}, got {name!r}{why}{hint}")


def preset(name: str, **overrides) -> ModelConfig:
    """A copy of a named preset with some fields replaced."""
    if name not in PRESETS:
        if name in _SHARED:
            raise KeyError(f"preset {name!r} cannot be trained by llmtk: "
                           f"{trainable(_SHARED[name])} (trainable: {', '.join(PRESETS)})")
        raise KeyError(f"unknown model preset {name!r} (known: {', '.join(PRESETS)})")
    return replace(PRESETS[name], **overrides)


def count_params(cfg: ModelConfig) -> int:
    """Exact parameter count of GPT(cfg) (equals sum(p.numel() for p in model.parameters()))."""
    d, hd = cfg.d_model, cfg.head_dim
    attn = d * (cfg.n_head + 2 * cfg.kv_heads) * hd + cfg.n_head * hd * d  # wqkv + wo
    if cfg.qkv_bias:
        attn += (cfg.n_head + 2 * cfg.kv_heads) * hd
    if cfg.qk_norm:
        attn += 2 * hd                                                      # q_norm, k_norm
    mlp = 3 * d * cfg.hidden                                                # w1, w3, w2
    norms = 2 * d                                                           # attn_norm, mlp_norm
    # a MoE layer: the router, E routed experts and the shared experts' one MLP
    moe = d * cfg.n_experts + 3 * d * cfg.expert_ffn * (cfg.n_experts + cfg.n_shared_experts)
    layers = sum(attn + norms + (moe if cfg.is_moe(i) else mlp) for i in range(cfg.n_layer))
    embed = cfg.padded_vocab * d * (1 if cfg.tie_embeddings else 2)
    return layers + embed + d  # + final norm
