"""Model shapes: named presets with their published dimensions, and exact parameter counts.

A `ModelSpec` describes a decoder-only transformer well enough to count its
parameters, its FLOPs per token and its activation memory. Presets carry the
dimensions their papers or model cards publish; `source` says where from.
No torch here: `llmtk estimate` must answer without importing it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from llmtk.errors import UsageError


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
    source: str = ""
    note: str = ""

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
        return (f"{self.n_layer} layers x d_model {self.d_model}, {self.n_head} heads{kv} "
                f"of {self.hd}, {mlp} ffn {self.ffn}, vocab {self.vocab_size}, "
                f"seq {self.seq_len}")


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts. `total` is what is stored and trained; `active` what one token
    uses (< total only for mixture-of-experts); `matmul` the active parameters that take
    part in a matrix multiply (no input-embedding lookup, no position table), the N of
    PaLM's 6N; `per_layer` one transformer block; `embedding` the token table(s)."""

    total: float
    active: float
    matmul: float
    per_layer: float
    embedding: float
    published: bool = False  # total comes from the preset's published number


def count_params(m: ModelSpec) -> ParamCounts:
    """Parameters of `m` from its dimensions (exact for the architectures described),
    unless the spec carries published totals."""
    d, hd, H, K, f = m.d_model, m.hd, m.n_head, m.kv_heads, m.ffn
    attn = d * H * hd + 2 * d * K * hd + H * hd * d  # wq, wk, wv, wo
    mlp = (3 if m.glu else 2) * d * f
    norm = 2 * d if m.norm == "layernorm" else d
    bias = (H * hd + 2 * K * hd + d + (0 if m.glu else f) + d) if m.bias else 0
    per_layer = attn + mlp + 2 * norm + bias
    table = m.vocab_size * d
    embedding = table * (1 if m.tie_embeddings else 2)
    pos = m.seq_len * d if m.learned_pos else 0
    total = m.n_layer * per_layer + embedding + pos + norm
    # A lookup is not a matmul: with untied embeddings the input table does no FLOPs,
    # and the output head (the tied table, or the separate head) does.
    matmul = total - pos - (table if not m.tie_embeddings else 0)
    published = m.params is not None
    if published:
        total = float(m.params)
        matmul = total - pos - (table if not m.tie_embeddings else 0)
    active = total
    if m.active_params is not None:
        active = float(m.active_params)
        matmul = active - (table if not m.tie_embeddings else 0)
    return ParamCounts(float(total), float(active), float(matmul), float(per_layer),
                       float(embedding), published)


def _gpt(name, L, d, H, V=50257, T=1024, **kw) -> ModelSpec:
    return ModelSpec(name, L, d, H, V, T, glu=False, norm="layernorm", bias=True,
                     tie_embeddings=True, learned_pos=True, dropout=True, **kw)


def _llama(name, L, d, H, f, V=32000, T=2048, **kw) -> ModelSpec:
    return ModelSpec(name, L, d, H, V, T, ffn_hidden=f, **kw)


_GPT2 = "Radford et al. 2019 (GPT-2), HF model cards"
_LLAMA1 = "Touvron et al. 2023, LLaMA, Table 2"
_LLAMA2 = "Touvron et al. 2023, Llama 2, Table 1 and HF config.json"
_LLAMA3 = "Llama Team 2024, The Llama 3 Herd of Models, Table 3"

PRESET_LIST: list[ModelSpec] = [
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
              ffn_hidden=73728, tie_embeddings=True,
              source="Chowdhery et al. 2022, PaLM, Table 1 (multi-query, head dim 256)"),
    _llama("llama-7b", 32, 4096, 32, 11008, source=_LLAMA1),
    _llama("llama-13b", 40, 5120, 40, 13824, source=_LLAMA1),
    _llama("llama-33b", 60, 6656, 52, 17920, source=_LLAMA1),
    _llama("llama-65b", 80, 8192, 64, 22016, source=_LLAMA1),
    _llama("llama2-7b", 32, 4096, 32, 11008, T=4096, source=_LLAMA2),
    _llama("llama2-13b", 40, 5120, 40, 13824, T=4096, source=_LLAMA2),
    _llama("llama2-70b", 80, 8192, 64, 28672, T=4096, n_kv_head=8, source=_LLAMA2),
    _llama("llama3-8b", 32, 4096, 32, 14336, V=128256, T=8192, n_kv_head=8, source=_LLAMA3),
    _llama("llama3-70b", 80, 8192, 64, 28672, V=128256, T=8192, n_kv_head=8,
           source=_LLAMA3),
    _llama("llama3-405b", 126, 16384, 128, 53248, V=128256, T=8192, n_kv_head=8,
           source=_LLAMA3),
    _llama("mistral-7b", 32, 4096, 32, 14336, T=8192, n_kv_head=8,
           source="Jiang et al. 2023, Mistral 7B, Table 1"),
    ModelSpec("deepseek-v3", 61, 7168, 128, 129280, 4096, head_dim=128, ffn_hidden=18432,
              params=671e9, active_params=37e9,
              source="DeepSeek-AI 2024, DeepSeek-V3 Technical Report, sec. 4.2",
              note="MoE (256 routed + 1 shared expert, 8 routed active) with MLA: params "
                   "as published; activations approximated as a dense model with "
                   "ffn = 9 active experts x 2048 and 128 heads of 128"),
]
PRESETS: dict[str, ModelSpec] = {m.name: m for m in PRESET_LIST}


def _squash(name: str) -> str:
    """'Llama-2-70B' and 'llama2_70b' both become 'llama270b': how people misspell presets."""
    return "".join(ch for ch in name.lower() if ch.isalnum())


def preset(name: str) -> ModelSpec:
    key = name.lower()
    if key in PRESETS:
        return PRESETS[key]
    import difflib

    squashed = {_squash(k): k for k in PRESETS}
    if _squash(name) in squashed:
        guesses = [squashed[_squash(name)]]
    else:
        guesses = [squashed[g] for g in
                   difflib.get_close_matches(_squash(name), list(squashed), n=2, cutoff=0.75)]
    hint = f"; did you mean {' or '.join(guesses)}?" if guesses else ""
    raise UsageError(f"--model: unknown preset {name!r}{hint} (known: {', '.join(PRESETS)})")


@dataclass
class Dims:
    """Dimension options as given on the command line (None = not given)."""

    layers: int | None = None
    d_model: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    ffn: int | None = None
    vocab: int | None = None
    seq_len: int | None = None
    extra: dict = field(default_factory=dict)


def build_spec(model: str | None, dims: Dims) -> ModelSpec | None:
    """A preset with some dimensions replaced, or a Llama-style model from the dimensions.

    Returns None when neither a preset nor the core dimensions are given (the
    caller then needs --params)."""
    given = {k: v for k, v in vars(dims).items() if k != "extra" and v is not None}
    if model is not None:
        spec = preset(model)
        mapping = {"layers": "n_layer", "d_model": "d_model", "heads": "n_head",
                   "kv_heads": "n_kv_head", "head_dim": "head_dim", "ffn": "ffn_hidden",
                   "vocab": "vocab_size", "seq_len": "seq_len"}
        shape_changed = any(k in given for k in ("layers", "d_model", "heads", "kv_heads",
                                                  "head_dim", "ffn", "vocab"))
        spec = replace(spec, **{mapping[k]: v for k, v in given.items()})
        if shape_changed and (spec.params is not None or spec.active_params is not None):
            # The published totals no longer describe the changed shape.
            spec = replace(spec, params=None, active_params=None)
        validate(spec)
        return spec
    core = ("layers", "d_model", "heads")
    if not any(k in given for k in core):
        return None
    for k in core:
        if k not in given:
            raise UsageError(f"--{k.replace('_', '-')}: needed with the other model "
                             "dimensions (or use --model PRESET)")
    spec = ModelSpec("custom", dims.layers, dims.d_model, dims.heads,
                     dims.vocab if dims.vocab is not None else 32000,
                     dims.seq_len if dims.seq_len is not None else 2048,
                     n_kv_head=dims.kv_heads, ffn_hidden=dims.ffn, head_dim=dims.head_dim,
                     source="--layers/--d-model/--heads (Llama-style: RMSNorm, SwiGLU, "
                            "rotary, no biases, untied embeddings)")
    validate(spec)
    return spec


def validate(m: ModelSpec) -> None:
    """Raise UsageError naming the option whose value makes the shape impossible."""
    for opt, v in (("--layers", m.n_layer), ("--d-model", m.d_model), ("--heads", m.n_head),
                   ("--vocab", m.vocab_size), ("--seq-len", m.seq_len),
                   ("--kv-heads", m.kv_heads), ("--ffn", m.ffn), ("--head-dim", m.hd)):
        if v < 1:
            raise UsageError(f"{opt}: must be >= 1, got {v}")
    if m.head_dim is None and m.d_model % m.n_head:
        raise UsageError(f"--heads: {m.n_head} heads do not divide --d-model {m.d_model}")
    if m.n_head % m.kv_heads:
        raise UsageError(f"--kv-heads: {m.kv_heads} kv heads do not divide "
                         f"{m.n_head} query heads")


def spec_from_config(cfg) -> ModelSpec:
    """The ModelSpec of a `llmtk.train` ModelConfig (Llama-style: RMSNorm, SwiGLU, rotary,
    no biases), duck-typed so this module needs neither torch nor llmtk.train. The vocabulary
    is the model's padded one (the rows it really holds, a multiple of 128)."""
    vocab = getattr(cfg, "padded_vocab", cfg.vocab_size)
    return ModelSpec("llmtk", cfg.n_layer, cfg.d_model, cfg.n_head, vocab,
                     cfg.seq_len, n_kv_head=cfg.kv_heads, ffn_hidden=cfg.hidden,
                     head_dim=cfg.head_dim, tie_embeddings=cfg.tie_embeddings,
                     source="llmtk.train ModelConfig")
