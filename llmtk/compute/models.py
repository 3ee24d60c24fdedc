"""Model shapes: named presets with their published dimensions, and exact parameter counts.

A `ModelSpec` describes a decoder-only transformer well enough to count its
parameters, its FLOPs per token and its activation memory. Presets carry the
dimensions their papers or model cards publish; `source` says where from.
No torch here: `llmtk estimate` must answer without importing it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from llmtk.errors import ConfigError

# The preset table is shared with `llmtk train` (one table, so the shape estimated is the
# shape trained): it lives in llmtk.presets; re-exported here for estimate's modules.
from llmtk.presets import PRESET_LIST, PRESETS, ModelSpec

__all__ = ["PRESETS", "PRESET_LIST", "ModelSpec", "ParamCounts", "count_params", "preset",
           "Dims", "build_spec", "validate", "spec_from_config"]


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts. `total` is what is stored and trained; `active` what one token
    uses (< total only for mixture-of-experts); `matmul` the active parameters that take
    part in a matrix multiply (no input-embedding lookup, no position table), the one N
    of every FLOPs formula (6N, 6ND, PaLM's 6N + attention, llmtk train's MFU);
    `per_layer` one transformer block; `embedding` the token table(s)."""

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
    attn += 2 * hd if m.qk_norm else 0
    mlp = (3 if m.glu else 2) * d * f
    norm = 2 * d if m.norm == "layernorm" else d
    bias = (H * hd + 2 * K * hd + d + (0 if m.glu else f) + d) if m.bias else 0
    dense = attn + mlp + 2 * norm + bias
    # A MoE layer: the router, every routed expert and the shared ones; a token uses the
    # router, top_k routed experts and the shared ones.
    expert = 3 * d * m.expert_width
    moe = dense - mlp + d * m.n_experts + expert * (m.n_experts + m.n_shared_experts)
    moe_active = dense - mlp + d * m.n_experts + expert * (m.top_k + m.n_shared_experts)
    n_moe = m.moe_layers
    layers = (m.n_layer - n_moe) * dense + n_moe * moe
    per_layer = layers / m.n_layer  # the mean block
    table = m.vocab_size * d
    embedding = table * (1 if m.tie_embeddings else 2)
    pos = m.seq_len * d if m.learned_pos else 0
    total = layers + embedding + pos + norm
    # A lookup is not a matmul: with untied embeddings the input table does no FLOPs,
    # and the output head (the tied table, or the separate head) does.
    matmul = total - pos - (table if not m.tie_embeddings else 0)
    if n_moe:
        matmul -= n_moe * (moe - moe_active)  # the experts a token does not use
    published = m.params is not None
    if published:
        total = float(m.params)
        matmul = total - pos - (table if not m.tie_embeddings else 0)
    active = total - (n_moe * (moe - moe_active) if n_moe and not published else 0)
    if m.active_params is not None:
        active = float(m.active_params)
        matmul = active - (table if not m.tie_embeddings else 0)
    return ParamCounts(float(total), float(active), float(matmul), float(per_layer),
                       float(embedding), published)


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
    raise ConfigError("model", f"unknown preset {name!r}{hint} (known: {', '.join(PRESETS)})")


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
            raise ConfigError(k, "needed with the other model dimensions (or use {0} PRESET)",
                              also=("model",))
    spec = ModelSpec("custom", dims.layers, dims.d_model, dims.heads,
                     dims.vocab if dims.vocab is not None else 32000,
                     dims.seq_len if dims.seq_len is not None else 2048,
                     n_kv_head=dims.kv_heads, ffn_hidden=dims.ffn, head_dim=dims.head_dim,
                     source="--layers/--d-model/--heads (Llama-style: RMSNorm, SwiGLU, "
                            "rotary, no biases, untied embeddings)")
    validate(spec)
    return spec


def validate(m: ModelSpec) -> None:
    """Raise ConfigError naming the dimension (a Dims key) that makes the shape impossible."""
    for key, v in (("layers", m.n_layer), ("d_model", m.d_model), ("heads", m.n_head),
                   ("vocab", m.vocab_size), ("seq_len", m.seq_len),
                   ("kv_heads", m.kv_heads), ("ffn", m.ffn), ("head_dim", m.hd)):
        if v < 1:
            raise ConfigError(key, f"must be >= 1, got {v}")
    if m.head_dim is None and m.d_model % m.n_head:
        raise ConfigError("heads", f"{m.n_head} heads do not divide {{0}} {m.d_model}",
                          also=("d_model",))
    if m.n_head % m.kv_heads:
        raise ConfigError("kv_heads", f"{m.kv_heads} kv heads do not divide "
                          f"{m.n_head} query heads")


def spec_from_config(cfg) -> ModelSpec:
    """The ModelSpec of a `llmtk.train` ModelConfig (Llama-style: RMSNorm, SwiGLU, rotary,
    no biases), duck-typed so this module needs neither torch nor llmtk.train. The vocabulary
    is the model's padded one (the rows it really holds, a multiple of 128)."""
    vocab = getattr(cfg, "padded_vocab", cfg.vocab_size)
    moe = {}
    if getattr(cfg, "n_experts", 0):
        moe = {"n_experts": cfg.n_experts, "top_k": cfg.top_k,
               "n_shared_experts": cfg.n_shared_experts, "expert_ffn": cfg.expert_ffn,
               "moe_every": cfg.moe_every, "first_dense": cfg.first_dense}
    return ModelSpec("llmtk", cfg.n_layer, cfg.d_model, cfg.n_head, vocab,
                     cfg.seq_len, n_kv_head=cfg.kv_heads, ffn_hidden=cfg.hidden,
                     head_dim=cfg.head_dim, tie_embeddings=cfg.tie_embeddings,
                     qk_norm=getattr(cfg, "qk_norm", False),
                     source="llmtk.train ModelConfig", **moe)
