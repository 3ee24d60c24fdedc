"""Named model shapes, one table for `llmtk estimate` and `llmtk train`.

Presets carry the dimensions their papers or model cards publish (`source` says where
from), plus llmtk's own small sizes. `estimate` counts parameters, FLOPs and memory
from any of them; `train` builds those that are Llama-style decoders (`trainable`),
exactly this shape except the vocabulary, which follows the tokenizer.
No torch here: both `llmtk estimate` and `llmtk --help` must start fast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def is_moe_layer(layer: int, n_experts: int, first_dense: int, moe_every: int) -> bool:
    """Whether block `layer` (0-based) is a mixture-of-experts layer: with experts, after
    the first `first_dense` blocks, every `moe_every`-th block (the first one included)."""
    return n_experts > 0 and layer >= first_dense and (layer - first_dense) % moe_every == 0


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer.

    `glu`: the MLP is gated (SwiGLU: three d x ffn matrices) instead of two (GELU).
    `norm`: "layernorm" (weight + bias) or "rmsnorm" (weight only).
    `bias`: linear layers carry biases (GPT-2/3). `learned_pos`: a learned
    position table of seq_len x d_model (GPT-2/3); otherwise rotary/relative.
    `dropout`: the model uses dropout (Korthikanti's GPT-3 accounting stores its masks).
    `params`/`active_params`: published totals that override the count from the
    dimensions (a MoE model's total vs per-token parameters, or an architecture
    detail these fields do not describe).
    """

    name: str
    n_layer: int
    d_model: int
    n_head: int
    vocab_size: int
    seq_len: int
    n_kv_head: int | None = None
    ffn_hidden: int | None = None
    head_dim: int | None = None
    glu: bool = True
    norm: str = "rmsnorm"
    bias: bool = False
    tie_embeddings: bool = False
    learned_pos: bool = False
    dropout: bool = False
    params: float | None = None
    active_params: float | None = None
    rope_theta: float = 10000.0  # rotary base (train builds it; estimate does not need it)
    norm_eps: float = 1e-5       # RMSNorm epsilon (likewise)
    source: str = ""
    note: str = ""
    # mixture of experts: n_experts routed SwiGLU experts of width expert_ffn (top_k per
    # token) and n_shared always-on ones in layers first_dense, first_dense + moe_every, ...
    # (the others dense, ffn wide), each MoE layer with a d_model x n_experts router
    n_experts: int = 0
    top_k: int = 0
    n_shared_experts: int = 0
    expert_ffn: int | None = None
    moe_every: int = 1
    first_dense: int = 0
    qk_norm: bool = False        # RMSNorm over each head's q and k (Qwen3): 2 x head_dim
    parallel_block: bool = False  # attention and MLP read the same input (PaLM)

    def is_moe(self, layer: int) -> bool:
        return is_moe_layer(layer, self.n_experts, self.first_dense, self.moe_every)

    @property
    def moe_layers(self) -> int:
        return sum(self.is_moe(i) for i in range(self.n_layer))

    @property
    def expert_width(self) -> int:
        return self.expert_ffn if self.expert_ffn is not None else self.ffn

    @property
    def active_ffn(self) -> float:
        """The MLP width one token passes through, the mean over the layers: the dense
        width, or in a MoE layer its top_k + shared experts' (activations scale with it)."""
        moe = self.moe_layers
        active = (self.top_k + self.n_shared_experts) * self.expert_width
        return (moe * active + (self.n_layer - moe) * self.ffn) / self.n_layer

    @property
    def kv_heads(self) -> int:
        return self.n_head if self.n_kv_head is None else self.n_kv_head

    @property
    def hd(self) -> int:
        """Head dimension: explicit (PaLM, DeepSeek-V3) or d_model / n_head."""
        return self.head_dim if self.head_dim is not None else self.d_model // self.n_head

    @property
    def ffn(self) -> int:
        """MLP hidden width: explicit, or 4*d (GELU) / Llama's 8/3*d rounded to 64 (SwiGLU)."""
        if self.ffn_hidden is not None:
            return self.ffn_hidden
        if self.glu:
            return 64 * math.ceil(8 * self.d_model / 3 / 64)
        return 4 * self.d_model

    def shape_text(self) -> str:
        kv = f" ({self.kv_heads} kv)" if self.kv_heads != self.n_head else ""
        mlp = "SwiGLU" if self.glu else "GELU"
        ffn = f"{mlp} ffn {self.ffn}"
        if self.n_experts:
            shared = f" + {self.n_shared_experts} shared" if self.n_shared_experts else ""
            dense = self.n_layer - self.moe_layers
            ffn = (f"MoE {self.n_experts} experts{shared} (top {self.top_k}) of "
                   f"{self.expert_width} in {self.moe_layers} layers"
                   + (f", {mlp} ffn {self.ffn} in {dense}" if dense else ""))
        qk = ", q/k norm" if self.qk_norm else ""
        return (f"{self.n_layer} layers x d_model {self.d_model}, {self.n_head} heads{kv} "
                f"of {self.hd}{qk}, {ffn}, vocab {self.vocab_size}, seq {self.seq_len}")


def _gpt(name, L, d, H, V=50257, T=1024, **kw) -> ModelSpec:
    return ModelSpec(name, L, d, H, V, T, glu=False, norm="layernorm", bias=True,
                     tie_embeddings=True, learned_pos=True, dropout=True, **kw)


def _llama(name, L, d, H, f, V=32000, T=2048, **kw) -> ModelSpec:
    return ModelSpec(name, L, d, H, V, T, ffn_hidden=f, **kw)


_GPT2 = "Radford et al. 2019 (GPT-2), HF model cards"
_LLAMA1 = "Touvron et al. 2023, LLaMA, Table 2"
_LLAMA2 = "Touvron et al. 2023, Llama 2, Table 1 and HF config.json"
_LLAMA3 = "Llama Team 2024, The Llama 3 Herd of Models, Table 3"

_LLMTK = "llmtk's own sizes (Llama-style, tied embeddings)"
_QWEN3 = "Qwen Team 2025, Qwen3 Technical Report, Table 2, and HF config.json"

PRESET_LIST: list[ModelSpec] = [
    # A CPU-trainable model for tests and laptops (~0.8M params with the byte tokenizer).
    ModelSpec("tiny", 4, 128, 4, 257, 256, tie_embeddings=True, source=_LLMTK),
    # GPT-2 small's width and depth (12 x 768, 12 heads) as a Llama-style model; SwiGLU
    # hidden 2048 keeps the MLP at GPT-2's 4*d size. (`gpt2-124m` is GPT-2 itself.)
    ModelSpec("llmtk-124m", 12, 768, 12, 50304, 1024, tie_embeddings=True, source=_LLMTK),
    # GPT-2 medium's width and depth (24 x 1024, 16 heads).
    ModelSpec("350m", 24, 1024, 16, 50304, 2048, tie_embeddings=True, source=_LLMTK),
    # ~1.0B: 20 x 2048, 16 heads with 8 kv heads (GQA).
    ModelSpec("1b", 20, 2048, 16, 50304, 2048, n_kv_head=8, tie_embeddings=True,
              source=_LLMTK),
    # Llama-2-7B's shape under a short name.
    _llama("7b", 32, 4096, 32, 11008, T=4096, source=_LLAMA2),
    _gpt("gpt2-124m", 12, 768, 12, source=_GPT2),
    _gpt("gpt2-350m", 24, 1024, 16, source=_GPT2),
    _gpt("gpt2-774m", 36, 1280, 20, source=_GPT2),
    _gpt("gpt2-1.5b", 48, 1600, 25, source=_GPT2),
    _gpt("gpt3-175b", 96, 12288, 96, T=2048, source="Brown et al. 2020, GPT-3, Table 2.1"),
    ModelSpec("chinchilla-70b", 80, 8192, 64, 32000, 2048, ffn_hidden=32768, glu=False,
              norm="rmsnorm", params=70e9,
              source="Hoffmann et al. 2022, Chinchilla, Table 4",
              note="params as published (70B): its Transformer-XL relative-position "
                   "projections are not described by these fields"),
    ModelSpec("palm-540b", 118, 18432, 48, 256000, 2048, n_kv_head=1, head_dim=256,
              ffn_hidden=73728, tie_embeddings=True, parallel_block=True,
              source="Chowdhery et al. 2022, PaLM, Table 1 (multi-query, head dim 256)"),
    _llama("llama-7b", 32, 4096, 32, 11008, norm_eps=1e-6, source=_LLAMA1),
    _llama("llama-13b", 40, 5120, 40, 13824, norm_eps=1e-6, source=_LLAMA1),
    _llama("llama-33b", 60, 6656, 52, 17920, norm_eps=1e-6, source=_LLAMA1),
    _llama("llama-65b", 80, 8192, 64, 22016, norm_eps=1e-6, source=_LLAMA1),
    _llama("llama2-7b", 32, 4096, 32, 11008, T=4096, source=_LLAMA2),
    _llama("llama2-13b", 40, 5120, 40, 13824, T=4096, source=_LLAMA2),
    _llama("llama2-70b", 80, 8192, 64, 28672, T=4096, n_kv_head=8, source=_LLAMA2),
    _llama("llama3-8b", 32, 4096, 32, 14336, V=128256, T=8192, n_kv_head=8, rope_theta=5e5,
           source=_LLAMA3),
    _llama("llama3-70b", 80, 8192, 64, 28672, V=128256, T=8192, n_kv_head=8, rope_theta=5e5,
           source=_LLAMA3),
    _llama("llama3-405b", 126, 16384, 128, 53248, V=128256, T=8192, n_kv_head=8, rope_theta=5e5,
           source=_LLAMA3),
    _llama("mistral-7b", 32, 4096, 32, 14336, T=8192, n_kv_head=8,
           source="Jiang et al. 2023, Mistral 7B, Table 1"),
    # Mixture-of-experts models whose counts follow from their shapes (embeddings counted):
    # Mixtral 46.70B total / 12.88B active; Qwen3 30.53B / 3.35B and 235.1B / 22.2B.
    _llama("mixtral-8x7b", 32, 4096, 32, 14336, T=32768, n_kv_head=8, rope_theta=1e6,
           n_experts=8, top_k=2, source="Jiang et al. 2024, Mixtral of Experts, Table 1"),
    ModelSpec("qwen3-30b-a3b", 48, 2048, 32, 151936, 4096, n_kv_head=4, head_dim=128,
              ffn_hidden=6144, n_experts=128, top_k=8, expert_ffn=768, qk_norm=True,
              rope_theta=1e6, norm_eps=1e-6, source=_QWEN3),
    ModelSpec("qwen3-235b-a22b", 94, 4096, 64, 151936, 4096, n_kv_head=4, head_dim=128,
              ffn_hidden=12288, n_experts=128, top_k=8, expert_ffn=1536, qk_norm=True,
              rope_theta=1e6, norm_eps=1e-6, source=_QWEN3),
    ModelSpec("deepseek-v3", 61, 7168, 128, 129280, 4096, head_dim=128, ffn_hidden=18432,
              params=671e9, active_params=37e9,
              source="DeepSeek-AI 2024, DeepSeek-V3 Technical Report, sec. 4.2",
              note="MoE (256 routed + 1 shared expert, 8 routed active) with MLA: params "
                   "as published; activations approximated as a dense model with "
                   "ffn = 9 active experts x 2048 and 128 heads of 128"),
]
PRESETS: dict[str, ModelSpec] = {m.name: m for m in PRESET_LIST}


def trainable(m: ModelSpec) -> str | None:
    """None if `llmtk train` builds exactly this shape (a Llama-style decoder), else why not."""
    if not m.glu or m.norm != "rmsnorm" or m.bias or m.learned_pos:
        return ("a GPT-2/3-style model (LayerNorm, GELU, biases, learned positions)"
                if m.learned_pos or m.bias else "not SwiGLU + RMSNorm")
    if m.params is not None or m.active_params is not None:
        return "its published size is not described by these dimensions (MoE or a custom part)"
    if m.parallel_block:
        return "its parallel attention + MLP block (PaLM) is not built by llmtk's model"
    return None


