"""Where each parameter of llmtk's GPT lives under tensor parallelism: one table that
`llmtk.train.layout.tensor_parallel.apply_tp` applies, `llmtk train --dry-run` counts
(`train/layout/dryrun.py`) and `llmtk estimate` prices (`estimate/memory.lora_params`), so the
three cannot drift apart.

A parameter is either split along one dimension over the tp ranks (each holds 1/tp of
it) or whole on every tp rank. Megatron-LM's split (the style of each module):

    column-wise   the output rows split (dim 0): attn.wqkv, mlp.w1 (gate), mlp.w3 (up)
    row-wise      the input columns split (dim 1): attn.wo, mlp.w2 (down)
    vocabulary    the vocabulary rows split (dim 0): tok_emb, lm_head (one matrix if tied)
    replicated    whole (sequence parallel splits their activations, not their weights):
                  attn_norm, mlp_norm, norm

LoRA adapters (W + s·B·A) follow their base, so each rank computes its part of B·A x
with the base's own collectives: on a column-wise base B (out, r) is split by rows like W
and A (r, in) is whole; on a row-wise base A is split by columns like W and B is whole.

Under FSDP2 every parameter (split or whole over tp) is then sharded over dp_shard; under
pipeline parallelism a stage holds its blocks (`stage_layers`, unless --pp-layers says
otherwise: train/layout/mesh.pipeline_split), the first stage the embedding and the last the
final norm and the head (train/layout/pipeline.py).
"""

from __future__ import annotations

COLWISE, ROWWISE, VOCAB, REPLICATED = "colwise", "rowwise", "vocabulary", "replicated"

# module (in the model, or in each block `layers.N.`) -> its tp style
MODEL_PLAN = {"tok_emb": VOCAB, "norm": REPLICATED, "lm_head": VOCAB}
BLOCK_PLAN = {"attn_norm": REPLICATED, "attn.wqkv": COLWISE, "attn.wo": ROWWISE,
              "mlp_norm": REPLICATED, "mlp.w1": COLWISE, "mlp.w3": COLWISE,
              "mlp.w2": ROWWISE}

# A MoE layer's parameters (llmtk.train.model.moe, in place of the MLP's), the dimension split
# over tp as Megatron splits experts without expert parallelism: each expert's hidden
# width, like the dense MLP's; the router and its bias whole. (llmtk train does not yet
# run MoE under tp: `estimate` prices it, the dry run counts it.)
MOE_PLAN = {"mlp.router": None, "mlp": None, "mlp.experts": 1,
            "mlp.shared.w1": 0, "mlp.shared.w3": 0, "mlp.shared.w2": 1}
EXPERT_DIM = {"w1": 1, "w3": 1, "w2": 2}  # (E, H, C), (E, H, C), (E, C, H)
# LoRA's targets (llmtk train --lora-targets, llmtk estimate --lora-targets): q, k, v (slices
# of attn.wqkv), o (attn.wo), gate/up/down (mlp.w1/w3/w2: on a MoE layer its shared experts'),
# experts (each routed expert's w1, w3, w2; opt-in)
LORA_TARGETS = ("q", "k", "v", "o", "gate", "up", "down", "experts")
DEFAULT_LORA_TARGETS = "q,k,v,o,gate,up,down"


def parse_lora_targets(spec: str) -> list[str]:
    """--lora-targets (train's and estimate's) as target names in LORA_TARGETS' order;
    ConfigError when one is not a target or none is given."""
    from llmtk.errors import ConfigError

    names = [t.strip() for t in spec.split(",") if t.strip()]
    if not names or any(t not in LORA_TARGETS for t in names):
        raise ConfigError("lora_targets", f"expected a comma list of {','.join(LORA_TARGETS)}, "
                          f"got {spec!r}")
    return [t for t in LORA_TARGETS if t in names]
# LoRA's per-expert adapters (`--lora-targets experts`: A (E, r, in), B (E, out, r)) follow
# their weight's split of the hidden width H on their H side and are whole on the other:
# A of w1/w3 (E, r, C) whole, B (E, H, r) by H; A of w2 (E, r, H) by H, B (E, C, r) whole.
EXPERT_ADAPTER_DIM = {"lora_A": {"w1": None, "w3": None, "w2": 2},
                      "lora_B": {"w1": 1, "w3": 1, "w2": None}}

# the dimension of a base weight (and bias) split over tp, by style; None: whole
WEIGHT_DIM = {COLWISE: 0, ROWWISE: 1, VOCAB: 0, REPLICATED: None}
# the dimension of each adapter split over tp, by its base's style
ADAPTER_DIM = {COLWISE: {"lora_A": None, "lora_B": 0},
               ROWWISE: {"lora_A": 1, "lora_B": None}}


def tp_dim(name: str) -> int | None:
    """The dimension along which parameter `name` (a state-dict key of llmtk's GPT, e.g.
    `layers.3.attn.wo.lora_A.o`, or of one block, `attn.wo.weight`) is split over the tp
    ranks; None when every tp rank holds it whole."""
    parts = name.split(".")
    if parts[0] == "layers":
        parts = parts[2:]
    adapter = next((p for p in parts if p in ("lora_A", "lora_B")), None)
    if adapter is not None:
        module = ".".join(parts[:parts.index(adapter)])
        if module == "mlp.experts":
            return EXPERT_ADAPTER_DIM[adapter][parts[-1]]
        return ADAPTER_DIM[BLOCK_PLAN[module]][adapter]
    module = ".".join(parts[:-1])
    if module in ("attn.q_norm", "attn.k_norm"):
        return None  # one head_dim weight, whole on every rank (tp refused for it yet)
    if module in MOE_PLAN:
        return MOE_PLAN[module] if module != "mlp.experts" else EXPERT_DIM[parts[-1]]
    style = BLOCK_PLAN.get(module) or MODEL_PLAN[module]
    return WEIGHT_DIM[style]


def tp_elements(name: str, numel: float, tp: int) -> float:
    """Elements of parameter `name` (of `numel`) one tp rank holds."""
    return numel / tp if tp_dim(name) is not None else float(numel)


def adapter_split(style: str) -> tuple[bool, bool]:
    """(A split, B split) over tp for the adapters of a base of tp `style`."""
    dims = ADAPTER_DIM[style]
    return dims["lora_A"] is not None, dims["lora_B"] is not None


def stage_layers(n_layer: int, stages: int) -> list[int]:
    """Blocks per pipeline stage, the default split: even, the first n_layer % stages
    stages one more."""
    return [n_layer // stages + (1 if s < n_layer % stages else 0) for s in range(stages)]
