"""LoRA (Hu et al. 2021): frozen base weights, trainable low-rank adapters W + (alpha/r)·B·A.

Own small implementation rather than `peft`: the llmtk model fuses q, k and v into
one `wqkv` matrix, and peft would adapt the fused matrix as a whole, so its
adapter count would differ from the q/k/v-separate count `llmtk estimate
--lora-rank` uses (and from what people mean by "q,v" targets). Here each of q,
k, v gets its own A (r x in) and B (out_part x r) on its rows of `wqkv` (the q, k and
v rows are interleaved by kv head there, model.group_qkv: the adapters' outputs are
concatenated as [q; k; v] and grouped the same way).

Targets: q, k, v (slices of attn.wqkv), o (attn.wo), gate (mlp.w1), up (mlp.w3),
down (mlp.w2). Init as in the paper and peft: A ~ kaiming-uniform(a=sqrt(5)), B = 0,
so step 0 computes exactly the base model. Embeddings and norms stay frozen too.

Mixture-of-experts layers (llmtk.train.model.moe): gate/up/down adapt the shared experts'
MLP (mlp.shared.w1/w3/w2) where the layer has one, and the dense layers' MLPs as usual.
The router stays frozen (its weight is a base parameter; the auxiliary-loss-free balancing
bias is not a parameter and keeps its update unless --router-bias-rate 0). The routed
experts are a target of their own, `experts` (opt-in: E adapters per weight, E times the
parameters of one, and each learns from only the tokens routed to its expert): each
expert e gets A[e] (r x in) and B[e] (out x r) on each of its w1, w3, w2, stored stacked
as the experts are, (E, r, in) and (E, out, r) (LoRAExperts), computed by the same
grouped matmul over the rows sorted by expert, under expert parallelism split over the
ep ranks with the experts they adapt, and under tp along the experts' hidden width
(llmtk.compute.placement.EXPERT_ADAPTER_DIM). A model whose targets find no matrix (all
layers MoE without shared experts, and only gate/up/down asked for) is refused.

State-dict keys keep the base names (`layers.0.attn.wqkv.weight`) and add
`layers.0.attn.wqkv.lora_A.q` / `lora_B.q`, so a plain checkpoint loads into a
LoRA model (the adapters keep their init) and `merged_state_dict` turns a LoRA
checkpoint back into a plain one.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch
from torch import nn

from llmtk.compute.placement import DEFAULT_LORA_TARGETS
from llmtk.compute.placement import parse_lora_targets as parse_targets
from llmtk.errors import ConfigError
from llmtk.train.model.gpt import ModelConfig, group_qkv, init_whole_
from llmtk.train.model.moe import GroupedExperts, MoE, expert_matmul, grad_scaled

MODULE_OF = {"o": "attn.wo", "gate": "mlp.w1", "up": "mlp.w3", "down": "mlp.w2"}


def adapted_per_token(cfg: ModelConfig, targets: str) -> float:
    """How many rank-r adapter outputs (A·x) of q, k, v, o, gate, up, down one token's
    forward keeps per layer, the layers' mean (llmtk.estimate.activations' lora_parts): on
    a dense layer one per adapted projection, on a MoE layer gate, up and down only where
    it has shared experts (the routed experts' adapters, target `experts`, are
    llmtk.estimate.activations.expert_adapter_bytes)."""
    names = parse_targets(targets)
    attn = sum(n in names for n in ("q", "k", "v", "o"))
    mlp = sum(n in names for n in ("gate", "up", "down"))
    total = 0
    for i in range(cfg.n_layer):
        if not cfg.is_moe(i):
            total += attn + mlp
            continue
        shared = mlp if cfg.n_shared_experts else 0
        total += attn + shared
    return total / cfg.n_layer


class _PlainCheckpointLoads:
    """A plain (pre-trained) checkpoint has no adapters: when all of a module's are
    missing they keep their init (the base alone). Mixed in before the torch base class."""

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        before = len(missing_keys)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)
        lora_keys = {f"{prefix}lora_{ab}.{n}" for ab in "AB" for n in self.lora_A}
        mine = [k for k in missing_keys[before:] if k in lora_keys]
        if len(mine) == len(lora_keys):
            for k in mine:
                missing_keys.remove(k)


class LoRALinear(_PlainCheckpointLoads, nn.Linear):
    """A bias-free Linear whose output parts (named, with their widths) may carry adapters."""

    def __init__(self, base: nn.Linear, parts: list[tuple[str, int]], adapted: list[str],
                 rank: int, alpha: float, dropout: float, qkv: ModelConfig | None = None):
        # Built on the meta device (no memory, no init), then given the base's own weight.
        super().__init__(base.in_features, base.out_features, bias=False, device="meta")
        self.weight = base.weight
        self.weight.requires_grad_(False)
        self.parts, self.scale = parts, alpha / rank
        self.qkv = qkv  # wqkv: the model's config, to group the [q; k; v] parts by kv head
        self.drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.lora_A = nn.ParameterDict()
        self.lora_B = nn.ParameterDict()
        for name, width in parts:
            if name in adapted:
                a = torch.empty(rank, self.in_features, device=self.weight.device)
                nn.init.kaiming_uniform_(a, a=math.sqrt(5))
                self.lora_A[name] = nn.Parameter(a)
                self.lora_B[name] = nn.Parameter(torch.zeros(width, rank,
                                                             device=self.weight.device))

    def _arrange(self, t: torch.Tensor, dim: int) -> torch.Tensor:
        """The parts concatenated along `dim` in the base weight's row order. Under tensor
        parallelism t holds this rank's rows of each part (H/tp query heads, K/tp kv heads:
        the rank's whole kv groups, see LoRA under TP in tensor_parallel.py), grouped the
        same way with the rank's head counts."""
        if self.qkv is None:
            return t
        tp = self.out_features // t.shape[dim]  # 1 unless the rows are split over tp ranks
        c = self.qkv
        # group_qkv reads only these three fields
        heads = SimpleNamespace(n_head=c.n_head // tp, kv_heads=c.kv_heads // tp,
                                head_dim=c.head_dim)
        return group_qkv(t, heads, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Under tensor parallelism x, y and the adapters are DTensors (tensor_parallel.py):
        # a column-split base gives y sharded on its last dim (B's rows split the same way),
        # a row-split one a partial sum (A's columns split), and DTensor's matmuls give the
        # adapters' output the same placement, so one addition serves every layout.
        y = super().forward(x)  # (..., out)
        h = self._dropout(x)
        outs = {name: (h @ self.lora_A[name].t()) @ self.lora_B[name].t()  # (..., width)
                for name in self.lora_A}
        if len(self.parts) == 1:
            return y + next(iter(outs.values())) * self.scale
        # wqkv: [q; k; v] concatenated and grouped by kv head, on this rank's columns
        local = [(outs[name].to_local() if hasattr(outs[name], "to_local") else outs[name])
                 if name in outs else None for name, _ in self.parts]
        y_local = y.to_local() if hasattr(y, "to_local") else y
        split = self.out_features // y_local.shape[-1]  # tp (1 without tensor parallelism)
        d = self._arrange(torch.cat(
            [t if t is not None else y_local.new_zeros(*y_local.shape[:-1], width // split)
             for t, (_, width) in zip(local, self.parts, strict=True)], dim=-1), -1)
        if hasattr(y, "to_local"):
            from torch.distributed.tensor import DTensor

            d = DTensor.from_local(d, y.device_mesh, y.placements, run_check=False)
        return y + d * self.scale

    def _dropout(self, x: torch.Tensor) -> torch.Tensor:
        """The adapters' input dropout. A DTensor input (tensor parallel: whole, or split by
        columns for a row-wise base) gets this rank's part of the mask one process would
        draw, drawn whole from the torch generator (every rank of a tp group holds it in
        the same state: seeded alike, saved per rank in checkpoints), rather than from
        DTensor's own generator: the run then equals one process and resumes exactly."""
        if not hasattr(x, "to_local") or not self.training or isinstance(self.drop,
                                                                         nn.Identity):
            return self.drop(x)
        from torch.distributed.tensor import DTensor

        # A private torch API (as in model.init_whole_): this rank's slice of the whole.
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        local = x.to_local()
        if all(p.is_replicate() for p in x.placements):
            # this rank holds the whole input (a column-wise base's): the same draw, without
            # a separate mask of ones
            return DTensor.from_local(self.drop(local), x.device_mesh, x.placements,
                                      run_check=False)
        mask = self.drop(torch.ones(x.shape, dtype=local.dtype, device=local.device))
        shape, offset = compute_local_shape_and_global_offset(x.shape, x.device_mesh,
                                                              x.placements)
        mask = mask[tuple(slice(o, o + n) for o, n in zip(offset, shape, strict=True))]
        return DTensor.from_local(local * mask, x.device_mesh, x.placements, run_check=False)


class LoRAExperts(_PlainCheckpointLoads, GroupedExperts):
    """A MoE layer's routed experts with an adapter per expert on each of their weights:
    expert e computes with w[e] + (alpha/r)·B[e]·A[e], as add_lora's target `experts`
    asks. A (E, r, in), B (E, out, r), stored stacked like the weights; both adapter
    matmuls are grouped over the same rows sorted by expert (moe.expert_matmul). Under
    expert parallelism they are DTensors split over the ep ranks as the weights are
    (expert_parallel.apply_ep), their gradients scaled as the weights' would be."""

    def __init__(self, base: GroupedExperts, rank: int, alpha: float, dropout: float):
        # Built on the meta device (no memory, no init), then given the base's own weights.
        n = base.w1.shape[0]
        super().__init__(0, 0, 0)
        self.w1, self.w3, self.w2 = base.w1, base.w3, base.w2  # frozen by add_lora
        self.grouped, self.dispatch, self.grad_scale = base.grouped, base.dispatch, \
            base.grad_scale
        self.scale = alpha / rank
        self.drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.lora_A = nn.ParameterDict()
        self.lora_B = nn.ParameterDict()
        dev = base.w1.device
        for name in ("w1", "w3", "w2"):
            _, out, inp = getattr(self, name).shape
            a = torch.empty(n, rank, inp, device=dev)
            _expert_kaiming(a)
            self.lora_A[name] = nn.Parameter(a)
            self.lora_B[name] = nn.Parameter(torch.zeros(n, out, rank, device=dev))

    def project(self, x: torch.Tensor, name: str, w: torch.Tensor,
                counts: torch.Tensor) -> torch.Tensor:
        y = super().project(x, name, w, counts)  # (M, out)
        a, b = (grad_scaled(_local(t), self.grad_scale)
                for t in (self.lora_A[name], self.lora_B[name]))
        a, b = a.to(x.dtype), b.to(x.dtype)  # autocast: compute's dtype (a no-op otherwise)
        r = expert_matmul(self.drop(x), a, counts, self.grouped)  # (M, rank)
        return y + expert_matmul(r, b, counts, self.grouped) * self.scale  # (M, out)


def place_expert_adapters(experts, mesh, ep: bool, tp: bool) -> None:
    """Distribute the adapters of `experts` (a LoRAExperts; others have none) over `mesh`,
    the experts' own: (ep,), (tp,) or (ep, tp) - each expert's with the expert (Shard(0)
    over ep), and over tp along the experts' hidden width where the adapter touches it,
    whole on the other side (llmtk.compute.placement.EXPERT_ADAPTER_DIM; a whole one's
    gradient on a rank is its part of the sum, marked Partial by _local). Called by
    expert_parallel.apply_ep and tensor_parallel._split_moe."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    from llmtk.compute.placement import EXPERT_ADAPTER_DIM

    for kind in ("lora_A", "lora_B"):
        adapters = getattr(experts, kind, None)
        for name, p in (adapters or {}).items():
            dim = EXPERT_ADAPTER_DIM[kind][name]
            place = ([Shard(0)] if ep else []) + (
                [Replicate() if dim is None else Shard(dim)] if tp else [])
            adapters[name] = nn.Parameter(distribute_tensor(p.detach(), mesh, place),
                                          requires_grad=p.requires_grad)


def _local(t: torch.Tensor) -> torch.Tensor:
    """An adapter's local piece (a plain tensor as it is); where it is whole over a mesh
    dimension (tp) its gradient comes back marked Partial there."""
    if not hasattr(t, "to_local"):
        return t
    from torch.distributed.tensor import Partial

    return t.to_local(grad_placements=[Partial() if p.is_replicate() else p
                                       for p in t.placements])


def _expert_kaiming(a: torch.Tensor) -> None:
    """Kaiming uniform (a=sqrt(5)) per expert: each (r, in) slice as an (r, in) A is drawn
    (fan_in = in; the stacked tensor's own fan_in would be r·in)."""
    for e in range(a.shape[0]):
        nn.init.kaiming_uniform_(a[e], a=math.sqrt(5))


def _parts(model, block) -> dict[str, tuple[str, list[tuple[str, int]]]]:
    cfg = model.cfg
    q, kv = cfg.n_head * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    out = {"attn.wqkv": [("q", q), ("k", kv), ("v", kv)]}
    moe = isinstance(block.mlp, MoE)  # its shared experts' MLP, if it has one
    for name, path in MODULE_OF.items():
        if moe and name != "o":
            if block.mlp.shared is None:
                continue
            path = path.replace("mlp.", "mlp.shared.")
        out[path] = [(name, _get(block, path).out_features)]
    return out


def _get(module, path: str):
    for part in path.split("."):
        module = getattr(module, part)
    return module


def add_lora(model, rank: int, alpha: float | None = None, targets: str = DEFAULT_LORA_TARGETS,
             dropout: float = 0.0) -> int:
    """Freeze every parameter of `model` (a llmtk GPT) and add adapters; returns the number
    of trainable (adapter) parameters."""
    if rank < 1:
        raise ConfigError("lora_rank", f"must be >= 1, got {rank}")
    names = parse_targets(targets)
    alpha = float(rank if alpha is None else alpha)
    for p in model.parameters():
        p.requires_grad_(False)
    for block in model.layers.values():
        for path, parts in _parts(model, block).items():
            adapted = [n for n, _ in parts if n in names]
            if not adapted:
                continue
            parent_path, _, leaf = path.rpartition(".")
            parent = _get(block, parent_path)
            setattr(parent, leaf, LoRALinear(getattr(parent, leaf), parts, adapted, rank,
                                             alpha, dropout,
                                             model.cfg if path == "attn.wqkv" else None))
        if "experts" in names and isinstance(block.mlp, MoE):
            block.mlp.experts = LoRAExperts(block.mlp.experts, rank, alpha, dropout)
    n = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if not n:
        raise ConfigError("lora_targets", f"{','.join(names)} adapt no matrix of this model "
                          "(a mixture-of-experts layer's routed experts are the target "
                          "`experts`; or target q,k,v,o)")
    return n


def merged_state_dict(state: dict, model_config: dict, alpha: float) -> dict:
    """A LoRA checkpoint's state dict with the adapters folded in: the plain model's keys.

    model_config: the run's ModelConfig as a dict; alpha: the run's lora_alpha."""
    from llmtk.train.model.config import ModelConfig

    cfg = ModelConfig(**model_config)
    q, kv = cfg.n_head * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    offset = {"q": 0, "k": q, "v": q + kv}  # rows of [q; k; v], before group_qkv
    out = {k: v.clone() for k, v in state.items() if ".lora_" not in k}
    deltas: dict = {}  # weight key -> the adapters' delta in the parts' row order (fp32)
    for key, a in state.items():
        if ".lora_A." not in key:
            continue
        prefix, part = key.split(".lora_A.")
        b = state[f"{prefix}.lora_B.{part}"]
        if a.dim() == 3:  # a MoE layer's routed experts (LoRAExperts): per expert B[e]·A[e]
            w = out[f"{prefix}.{part}"]
            w += ((alpha / a.shape[1]) * torch.bmm(b.float(), a.float())).to(w.dtype)
            continue
        w = out[f"{prefix}.weight"]
        d = deltas.setdefault(f"{prefix}.weight", torch.zeros(w.shape, dtype=torch.float32))
        start = offset.get(part, 0)
        d[start:start + b.shape[0]] += (alpha / a.shape[0]) * (b.float() @ a.float())
    for key, d in deltas.items():
        w = out[key]
        w += (group_qkv(d, cfg) if key.endswith("attn.wqkv.weight") else d).to(w.dtype)
    return out


def _kaiming_(param: torch.Tensor) -> None:
    """add_lora's A init, in place; a sharded adapter gets its slice of the whole matrix,
    as GPT.init_weights does for the base, so the adapters (and every step after the
    first) equal a single process's with the same seed."""
    init_whole_(param, lambda t: nn.init.kaiming_uniform_(t, a=math.sqrt(5)))


def init_lora(model) -> None:
    """(Re)initialise every adapter as add_lora does (A: Kaiming uniform, B: zeros), drawing
    in add_lora's order: for a model built on the meta device and materialised with
    to_empty (FSDP2), right after GPT.init_weights with the run's seed."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, LoRAExperts):
                for a in module.lora_A.values():
                    init_whole_(a, _expert_kaiming)
            elif isinstance(module, LoRALinear):
                for a in module.lora_A.values():
                    _kaiming_(a)
            else:
                continue
            for b in module.lora_B.values():
                nn.init.zeros_(b)
