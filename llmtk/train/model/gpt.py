"""The GPT model: a pre-norm decoder-only transformer, nanoGPT-clear.

Blocks are Llama-style: RMSNorm before attention and MLP, rotary position
embeddings (no learned positions), SwiGLU MLP, optional grouped-query
attention, `F.scaled_dot_product_attention(is_causal=True)` (flash/memory-
efficient kernels where the device has them), no biases (except q/k/v with
`qkv_bias`, for Qwen2-style models), and an
optional tied input/output embedding.

Weight init (stated so a run is reproducible from the seed alone):
- every Linear and the token embedding: normal(0, 0.02) (GPT-2);
- the two projections that write into the residual stream (attention `wo`
  and MLP `w2`): normal(0, 0.02 / sqrt(2 * n_layer)), GPT-2's scaling so the
  residual stream's variance does not grow with depth;
- RMSNorm weights: 1.
With tied embeddings the shared matrix gets the embedding's init.

Shapes: B batch, T sequence, C d_model, H heads, K kv heads, D head dim, V vocab.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

# The configuration half lives in a torch-free module so `llmtk estimate` can use
# the presets and exact parameter counts without importing torch.
from llmtk.train.model.config import PRESETS, ModelConfig, count_params, preset
from llmtk.train.model.moe import MoE

__all__ = ["GPT", "PRESETS", "ModelConfig", "count_params", "group_qkv", "preset",
           "ungroup_qkv"]


def init_whole_(param: torch.Tensor, fill: Callable[[torch.Tensor], object]) -> None:
    """fill(param) in place, drawn from the CPU generator. A sharded (FSDP2 DTensor)
    parameter gets its slice of the full tensor, drawn whole, so a model initialised after
    sharding holds exactly the weights of one initialised whole with the same seed (a
    DTensor's own in-place init would draw from DTensor's RNG instead)."""
    if param.is_meta:
        # Not materialised here (another pipeline stage's layer): draw and discard, so the
        # generator reaches this rank's layers in the state a whole-model init leaves it.
        fill(torch.empty(param.shape, dtype=param.dtype))
        return
    if not hasattr(param, "device_mesh"):
        if param.device.type == "cpu":
            fill(param)
        else:  # the CPU generator's draws, as a model initialised on the CPU and moved has
            param.copy_(_filled(torch.empty(param.shape, dtype=param.dtype), fill))
        return
    # A private torch API, used here only: which slice of the full tensor this rank holds.
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    full = _filled(torch.empty(param.shape, dtype=param.dtype), fill)
    shape, offset = compute_local_shape_and_global_offset(param.shape, param.device_mesh,
                                                          param.placements)
    local = full[tuple(slice(o, o + n) for o, n in zip(offset, shape, strict=True))]
    param.to_local().copy_(local)


def _filled(t: torch.Tensor, fill: Callable[[torch.Tensor], object]) -> torch.Tensor:
    fill(t)
    return t


def _normal_(param: torch.Tensor, std: float) -> None:
    init_whole_(param, lambda t: nn.init.normal_(t, mean=0.0, std=std))


# ---------------------------------------------------------------- the fused q/k/v layout
#
# wqkv's output rows are grouped by key/value head: for each of the K kv heads, its
# R = H/K query heads, then its k head, then its v head, (R + 2) * D rows a group. A
# tensor-parallel rank's contiguous slice of rows (Shard(0)) is then whole groups: the
# q heads together with the k/v they attend with. Checkpoints written before this layout
# (qkv_layout absent: all q rows, then all k, then all v, Hugging Face's order) are
# converted on load (llmtk.train.checkpoint.files).


def group_qkv(t: torch.Tensor, cfg: ModelConfig, dim: int = 0) -> torch.Tensor:
    """[all q; all k; all v] along `dim` -> grouped by kv head (the layout wqkv stores)."""
    H, K, D = cfg.n_head, cfg.kv_heads, cfg.head_dim
    t = t.movedim(dim, 0)  # ((H + 2K) * D, ...)
    rest = t.shape[1:]
    q, k, v = t.split([H * D, K * D, K * D])
    g = torch.cat([q.reshape(K, (H // K) * D, *rest), k.reshape(K, D, *rest),
                   v.reshape(K, D, *rest)], dim=1)  # (K, (R + 2) * D, ...)
    return g.reshape(-1, *rest).movedim(0, dim)


def ungroup_qkv(t: torch.Tensor, cfg: ModelConfig, dim: int = 0) -> torch.Tensor:
    """The inverse of group_qkv: grouped by kv head -> [all q; all k; all v] along `dim`."""
    H, K, D = cfg.n_head, cfg.kv_heads, cfg.head_dim
    t = t.movedim(dim, 0)
    rest = t.shape[1:]
    q, k, v = t.reshape(K, (H // K + 2) * D, *rest).split([H // K * D, D, D], dim=1)
    return torch.cat([q.reshape(-1, *rest), k.reshape(-1, *rest),
                      v.reshape(-1, *rest)]).movedim(0, dim)


def wide_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype that sums and normalisations run in: fp32, or fp64 for fp64 tensors (an
    --dtype fp64 run narrows nothing)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def wide(x: torch.Tensor) -> torch.Tensor:
    return x.to(wide_dtype(x.dtype))


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32 for stability under bf16 autocast, return the input dtype.
        return F.rms_norm(wide(x), (x.shape[-1],), wide(self.weight), self.eps).type_as(x)


def rotary_tables(cfg: ModelConfig, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape (seq_len, D/2), fp32 (fp64 in an --dtype fp64 run)."""
    hd = cfg.head_dim
    dtype = torch.get_default_dtype()
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, hd, 2, device=device, dtype=dtype)
                                         / hd))
    t = torch.arange(cfg.seq_len, device=device, dtype=dtype)
    freqs = torch.outer(t, inv_freq)  # (T, D/2)
    return freqs.cos(), freqs.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[..., i], x[..., i + D/2]) by position-dependent angles (GPT-NeoX layout).

    x: (B, H, T, D); cos, sin: (T, D/2), or (B, 1, T, D/2) for per-example positions.
    """
    x1, x2 = wide(x).chunk(2, dim=-1)  # (B, H, T, D/2) each
    out = torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return out.type_as(x)


def example_positions(doc: torch.Tensor) -> torch.Tensor:
    """(B, T) example ids -> (B, T) position of each token within its example."""
    B, T = doc.shape
    idx = torch.arange(T, device=doc.device).expand(B, T)
    starts = torch.ones_like(doc, dtype=torch.bool)
    starts[:, 1:] = doc[:, 1:] != doc[:, :-1]
    first = torch.where(starts, idx, torch.zeros_like(idx)).cummax(dim=1).values
    return idx - first


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_rep, self.hd = cfg.n_head // cfg.kv_heads, cfg.head_dim
        # q, k and v in one matmul: H*D + 2*K*D outputs, grouped by kv head (group_qkv).
        # forward reads the number of heads from the output's width, so a tensor-parallel
        # rank holding H/tp query and K/tp kv heads runs the same code.
        H, K = cfg.n_head, cfg.kv_heads
        self.wqkv = nn.Linear(cfg.d_model, (H + 2 * K) * self.hd, bias=cfg.qkv_bias)
        self.wo = nn.Linear(H * self.hd, cfg.d_model, bias=False)
        # Qwen3: each head's q and k RMS-normalised (one weight of head_dim) before rotary
        self.q_norm = RMSNorm(self.hd, cfg.norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(self.hd, cfg.norm_eps) if cfg.qk_norm else None

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        B, T, _ = x.shape
        R, D = self.n_rep, self.hd
        qkv = self.wqkv(x).view(B, T, -1, R + 2, D)  # (B, T, K, R + 2, D)
        # Query head g*R + r is row r of group g: the order Hugging Face's GQA expects.
        q = qkv[:, :, :, :R].reshape(B, T, -1, D).transpose(1, 2)  # (B, H, T, D)
        k = qkv[:, :, :, R].transpose(1, 2)                        # (B, K, T, D)
        v = qkv[:, :, :, R + 1].transpose(1, 2)                    # (B, K, T, D)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        # GQA: each kv head serves H/K query heads; SDPA broadcasts them (no K/V copies).
        # mask (B, 1, T, T) bool, True = attend: causal within one packed example (SFT,
        # --doc-mask). Under --cp it is the rank's context-parallel attention instead, which
        # gathers the keys and values of its group (train/layout/context_parallel.py).
        if hasattr(mask, "attend"):
            y = mask.attend(q, k, v, R > 1)  # (B, H, T/cp, D)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None,
                                               enable_gqa=R > 1)  # (B, H, T, D)
        y = y.transpose(1, 2).reshape(B, T, -1)  # (B, T, H*D)
        return self.wo(y)


class MLP(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.w1 = nn.Linear(cfg.d_model, cfg.hidden, bias=False)  # gate
        self.w3 = nn.Linear(cfg.d_model, cfg.hidden, bias=False)  # up
        self.w2 = nn.Linear(cfg.hidden, cfg.d_model, bias=False)  # down

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, moe: bool = False):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        # A mixture-of-experts layer in place of the MLP (llmtk.train.model.moe), same name.
        self.mlp = MoE(cfg) if moe else MLP(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin, mask)  # (B, T, C)
        x = x + self.mlp(self.mlp_norm(x))
        return x


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        # Embedding and head have padded_vocab rows (a multiple of 128); ids >= vocab_size
        # never occur and their logits are masked out of the loss and of sampling.
        self.tok_emb = nn.Embedding(cfg.padded_vocab, cfg.d_model)
        # Keyed "0".."n-1" (not a ModuleList): a pipeline stage keeps only its blocks and
        # their whole-model names (layers.5.attn.wqkv.weight), so checkpoints reshard
        # between pipeline layouts. Iterate with .values().
        self.layers = nn.ModuleDict({str(i): Block(cfg, cfg.is_moe(i))
                                     for i in range(cfg.n_layer)})
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.padded_vocab, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight
        # Rotary tables are derived, not learned: non-persistent buffers (not in state_dict).
        cos, sin = rotary_tables(cfg)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.activation_checkpointing = False
        # --cp: this rank's layout.context_parallel.ContextParallel, set by parallelize; a
        # forward with targets then trains on the rank's share of each window
        self.cp = None
        if not self.rope_cos.is_meta:  # a meta model is initialised once materialised
            self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        """(Re)initialise every parameter and buffer; see the module docstring for the rule.

        Callable after `to_empty(device=...)` to materialise a model built on the meta device.
        """
        if self.cfg.tie_embeddings and self.lm_head.weight is not self.tok_emb.weight:
            # A plain to_empty() of a meta model gives each module its own new Parameter,
            # silently untying the head (FSDP2's keeps the tie); tie it again.
            self.lm_head.weight = self.tok_emb.weight
        cos, sin = rotary_tables(self.cfg, device=self.rope_cos.device)
        self.rope_cos.copy_(cos)
        self.rope_sin.copy_(sin)
        residual_std = 0.02 / math.sqrt(2 * self.cfg.n_layer)
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                if module is self.lm_head and self.cfg.tie_embeddings:
                    continue  # shares tok_emb's weight, initialised below
                std = residual_std if name.endswith(("attn.wo", "mlp.w2", "shared.w2")) else 0.02
                if name.endswith("attn.wqkv"):
                    # Drawn in the [q; k; v] order, then grouped: the same weights a run
                    # initialised with this seed had before the grouped layout.
                    init_whole_(module.weight, lambda t, std=std: t.copy_(group_qkv(
                        nn.init.normal_(torch.empty_like(t), std=std), self.cfg)))
                else:
                    _normal_(module.weight, std)
                if module.bias is not None:  # only q/k/v with qkv_bias
                    nn.init.zeros_(module.bias)
            elif isinstance(module, MoE):  # its experts (router, shared: Linears here)
                module.init_weights(_normal_, 0.02, residual_std)
            elif isinstance(module, nn.Embedding):
                _normal_(module.weight, 0.02)
            elif isinstance(module, RMSNorm):
                nn.init.ones_(module.weight)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None,
        doc: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """idx, targets: (B, T) int64.

        Without targets: (logits (B, T, vocab_size), None). With targets: (None, the mean
        cross-entropy over all target positions, targets == -1 ignored), computed in chunks
        so the full fp32 logits never exist (see chunked_cross_entropy). A MoE model's
        auxiliary losses join it as aux - aux.detach(): exactly 0 in value (the loss stays
        the cross-entropy, comparable with a dense run's), aux's own gradient in backward,
        scaled by whatever scales the loss (grad accumulation, SFT's token share).

        doc: (B, T) example ids of packed sequences (SFT, --doc-mask): a token attends only
        to earlier tokens of its own example, and positions restart at 0 at every example.

        Under --cp (self.cp set) a forward with targets takes the whole window on every
        rank of the cp group and runs the rank's share of it (its loss: the mean over its
        tokens); without targets (sampling, task scores) every rank runs the whole window.
        """
        B, T = idx.shape
        if T > self.cfg.seq_len:
            raise ValueError(f"sequence length {T} exceeds the model's seq_len {self.cfg.seq_len}")
        if self.cp is not None and targets is not None:
            idx, targets, cos, sin, mask = self.cp.window(idx, targets, doc, self.rope_cos,
                                                          self.rope_sin)
        else:
            cos, sin, mask = positions(self.rope_cos, self.rope_sin, T, doc)
        x = self.tok_emb(idx)  # (B, T, C)
        x = run_blocks(self.layers.values(), x, cos, sin, mask,
                       self.activation_checkpointing and self.training)
        x = self.norm(x)  # (B, T, C)
        if targets is None:
            return self.lm_head(x)[..., :self.cfg.vocab_size], None  # (B, T, V)
        loss = self.head_loss(x, targets)
        aux = [b.mlp.aux for b in self.layers.values() if isinstance(b.mlp, MoE)]
        if aux and self.training:
            total = torch.stack(aux).sum().to(loss.dtype)
            loss = loss + (total - total.detach())
        return None, loss

    def head_loss(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of lm_head(x) against targets (B, T); a method so that it can be
        compiled on its own (FSDP2 compiles per block)."""
        return head_loss(x, self.lm_head.weight, targets, self.cfg.vocab_size)

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                 top_k: int | None = None,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        """Append max_new_tokens sampled tokens to idx (B, T); no KV cache (clarity first)."""
        for _ in range(max_new_tokens):
            ctx = idx[:, -self.cfg.seq_len:]
            logits, _ = self(ctx)  # (B, T, vocab_size): padded rows are never sampled
            logits = logits[:, -1, :].float()  # (B, V)
            if temperature <= 0:
                nxt = logits.argmax(dim=-1, keepdim=True)
            else:
                logits = logits / temperature
                if top_k is not None:
                    kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                probs = F.softmax(logits, dim=-1)
                nxt = torch.multinomial(probs, 1, generator=generator)  # (B, 1)
            idx = torch.cat((idx, nxt), dim=1)
        return idx


def positions(rope_cos: torch.Tensor, rope_sin: torch.Tensor, T: int,
              doc: torch.Tensor | None, flex: bool | None = None):
    """(cos, sin, mask) for a sequence of T tokens: the rotary tables' first T rows and no
    mask (causal attention), or with doc (B, T) example ids (packed SFT sequences,
    --doc-mask) each token's position within its example and what keeps attention inside
    it: on CUDA where FlexAttention exists (`flex` None: decide so; True: also on CPU,
    for tests) a DocumentAttention, else a (B, 1, T, T) bool mask for SDPA."""
    if doc is None:
        return rope_cos[:T], rope_sin[:T], None  # (T, D/2)
    pos = example_positions(doc)  # (B, T)
    if flex or (flex is None and doc.is_cuda and DocumentAttention.available()):
        return rope_cos[pos][:, None], rope_sin[pos][:, None], DocumentAttention(doc)
    causal = torch.ones(T, T, dtype=torch.bool, device=doc.device).tril()
    mask = (doc[:, None, :, None] == doc[:, None, None, :]) & causal  # (B, 1, T, T)
    return rope_cos[pos][:, None], rope_sin[pos][:, None], mask  # (B, 1, T, D/2)


class DocumentAttention:
    """Attention kept inside each document with FlexAttention: a block mask built once per
    forward from the (B, T) document ids (every layer reuses it) lets the kernel skip the
    blocks where no two tokens share a document, so no (T, T) mask exists and the cost
    follows the documents' lengths. Compiled (the fused kernel) on CUDA; on CPU eager,
    the unfused reference, used only by tests to check the mask (tests/test_train_cp.py)."""

    def __init__(self, doc: torch.Tensor):
        from torch.nn.attention.flex_attention import create_block_mask

        def same_document(b, h, q_idx, kv_idx):
            return (doc[b, q_idx] == doc[b, kv_idx]) & (kv_idx <= q_idx)

        # Built here, once per forward, before the (compiled) blocks that read it.
        B, T = doc.shape
        self.doc = doc
        self.block_mask = create_block_mask(same_document, B, None, T, T, device=doc.device)

    @staticmethod
    def available() -> bool:
        try:
            from torch.nn.attention import flex_attention  # noqa: F401
        except ImportError:
            return False
        return True

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               gqa: bool) -> torch.Tensor:
        """q (B, H, T, D), k, v (B, K, T, D) -> (B, H, T, D)."""
        from torch.nn.attention.flex_attention import flex_attention

        attend = _compiled_flex() if self.doc.is_cuda else flex_attention
        return attend(q, k, v, block_mask=self.block_mask, enable_gqa=gqa)


_FLEX = None


def _compiled_flex():
    """flex_attention compiled once per process (its fused kernel)."""
    global _FLEX
    if _FLEX is None:
        from torch.nn.attention.flex_attention import flex_attention

        _FLEX = torch.compile(flex_attention, dynamic=False)
    return _FLEX


def run_blocks(blocks, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               mask: torch.Tensor | None, recompute: bool) -> torch.Tensor:
    """x (B, T, C) through the blocks in order; `recompute`: activation checkpointing."""
    for block in blocks:
        if recompute:
            # Recompute the block's activations in backward instead of storing them.
            x = torch.utils.checkpoint.checkpoint(block, x, cos, sin, mask, use_reentrant=False)
        else:
            x = block(x, cos, sin, mask)
    return x


# ---------------------------------------------------------------- the loss


def head_loss(x: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
              vocab: int) -> torch.Tensor:
    """Mean cross-entropy of the head `weight` applied to x (B, T, C) against targets."""
    if hasattr(x, "full_tensor"):  # tensor parallel: (B, T/tp, C) shards -> (B, T, C)
        x = x.full_tensor()
    return chunked_cross_entropy(x.reshape(-1, x.size(-1)), weight, targets.reshape(-1), vocab)



def _chunk_rows(vocab: int) -> int:
    """Rows per chunk so that one chunk's fp32 logits take about 256 MiB (1,334 rows at a
    50,304 vocabulary; the whole batch at once for a byte vocabulary)."""
    return max(128, (256 << 20) // (4 * vocab))


def _all_reduce(t: torch.Tensor, group, op: str = "sum") -> torch.Tensor:
    """t summed (or maxed) over the tp group, in place; returns t."""
    import torch.distributed as tdist

    tdist.all_reduce(t, op=tdist.ReduceOp.MAX if op == "max" else tdist.ReduceOp.SUM,
                     group=group)
    return t


class _ChunkedCrossEntropy(torch.autograd.Function):
    """Cross-entropy of h @ W.T without the (N, V) fp32 logits: each chunk of rows computes
    its logits, loss and both gradients in forward (the fused linear-cross-entropy idea of
    Liger-Kernel / Apple's Cut Cross-Entropy, here in plain PyTorch), so at most one chunk's
    logits exist at a time and backward only scales the saved gradients. Logits of the
    padded columns (>= vocab) are -inf: they never win and never count."""

    @staticmethod
    def forward(ctx, h, weight, targets, vocab: int, chunk: int, need_grad: bool,
                group=None, start: int = 0):
        # h: (N, C) in the compute dtype; weight: (Vp, C), or with a tp `group` this rank's
        # rows start .. start + Vp/tp of the head; targets: (N,) int64, -1 = ignore
        n = (targets != -1).sum().clamp(min=1)
        # A frozen head (LoRA: the tied embedding is frozen) needs no d/dW: skipping it saves
        # a (Vp, C) fp32 buffer and a third of the head's matmuls.
        need_w = need_grad and weight.requires_grad
        if need_grad:
            grad_h = torch.empty_like(h)
        acc = wide_dtype(weight.dtype)  # fp32 accumulators (fp64 in an fp64 run)
        grad_w = (torch.zeros(weight.shape, dtype=acc, device=weight.device)
                  if need_w else None)
        total = torch.zeros((), dtype=torch.float64, device=h.device)  # exact-ish sum
        w = weight.to(h.dtype)
        for begin in range(0, h.size(0), chunk):
            hc, tc = h[begin:begin + chunk], targets[begin:begin + chunk]
            logits = wide(hc @ w.t())  # (n, Vp): one chunk only (tp: (n, Vp/tp))
            logits[:, max(0, vocab - start):] = float("-inf")
            ok = tc != -1
            if group is None:
                lse = torch.logsumexp(logits, dim=-1)  # (n,)
                safe = tc.clamp(min=0).unsqueeze(1)
                target = logits.gather(1, safe).squeeze(1)  # (n,)
                mine = ok
            else:  # the log-sum-exp and the target's logit over every rank's columns
                top = _all_reduce(logits.max(dim=-1).values, group, "max")  # (n,)
                lse = top + _all_reduce(torch.exp(logits - top.unsqueeze(1)).sum(-1),
                                        group).log()
                local = tc - start
                mine = ok & (local >= 0) & (local < w.size(0))  # the target is my column
                safe = torch.where(mine, local, 0).unsqueeze(1)
                target = _all_reduce(torch.where(mine, logits.gather(1, safe).squeeze(1), 0.0),
                                     group)
            total += ((lse - target) * ok).sum(dtype=torch.float64)
            if not need_grad:
                continue
            # d(loss_sum)/d(logits) = softmax - onehot(target), zero on ignored rows
            probs = torch.exp(logits - lse.unsqueeze(1))
            probs.scatter_add_(1, safe, -mine.to(probs.dtype).unsqueeze(1))
            probs *= ok.unsqueeze(1)
            grad_h[begin:begin + chunk] = (probs.to(h.dtype) @ w).to(h.dtype)
            if need_w:
                grad_w += wide(probs.t().to(h.dtype).matmul(hc))
        if need_grad and group is not None:
            _all_reduce(grad_h, group)  # every rank's columns contribute to every row's
        if need_grad:
            ctx.save_for_backward(grad_h, grad_w, n)  # grad_w None: saved as None
            ctx.weight_dtype = weight.dtype
        return (total / n).to(wide_dtype(h.dtype))

    @staticmethod
    def backward(ctx, grad_out):
        grad_h, grad_w, n = ctx.saved_tensors
        scale = grad_out / n
        return (grad_h * scale.to(grad_h.dtype),
                None if grad_w is None else (grad_w * scale).to(ctx.weight_dtype),
                None, None, None, None, None, None)


def chunked_cross_entropy(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                          vocab: int, chunk: int | None = None) -> torch.Tensor:
    """Mean cross-entropy of the logits h @ weight.T (only the first `vocab` columns are
    real) against targets; equals F.cross_entropy on the full fp32 logits (tested to 1e-6).

    A vocabulary-sharded weight (a tensor-parallel DTensor, Shard(0) over the tp group):
    each rank computes the logits of its rows only, chunk by chunk as above (so no rank
    holds more than a chunk of (N, Vp/tp) logits); the loss and h's gradient are combined
    over the group, the weight's gradient is this rank's shard of it."""
    if torch.is_autocast_enabled(h.device.type):
        h = h.to(torch.get_autocast_dtype(h.device.type))
    need_grad = torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad)
    group, start = None, 0
    if hasattr(weight, "device_mesh"):  # (Vp, C) over the tp group -> this rank's rows
        mesh = weight.device_mesh
        group, rank = mesh.get_group(), mesh.get_local_rank()
        weight = weight.to_local()  # (Vp/tp, C); its gradient flows back as the shard's
        start = rank * weight.size(0)
    with torch.autocast(h.device.type, enabled=False):
        return _ChunkedCrossEntropy.apply(h, weight, targets, vocab,
                                          chunk or _chunk_rows(weight.size(0)), need_grad,
                                          group, start)
