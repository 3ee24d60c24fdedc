"""Context parallelism (--cp N): each rank of a cp group holds 1/N of every sequence.

The design is the all-gather variant Llama 3 trained its long-context stages with, not a
ring: in every attention layer each rank all-gathers the keys and values of its cp group
(the autograd of the gather reduce-scatters their gradients back in backward) and attends
with its own queries. Why: under grouped-query attention K and V are H/K times smaller than
the queries (4 x for Llama 3 8B), so gathering them costs less than a ring passes around
once it is pipelined, and the whole key range is then in one place, so any mask composes
with it as it does in one process: --doc-mask builds its mask from the global positions
and the document ids (every cp rank holds the whole window's ids; they are tokens' worth
of int64, not activations). A ring would need the mask cut per step and the softmax
merged by log-sum-exp across steps.

The causal load is balanced as in Llama 3 and torchtitan: each sequence is cut into 2N
chunks, rank i holds chunks i and 2N-1-i, so every rank has one early (cheap) and one late
(expensive) chunk and the same attention work. Rotary positions are the tokens' global
ones (per document with --doc-mask). Each rank's loss is the mean over its own T/N tokens
(pre-training: every target counts, so all ranks have the same number) and FSDP2 averages
gradients over the flattened dp_shard x cp mesh: the average over the cp group of the
local means is the sequence's mean, as in one process.

The model calls this through the `mask` argument its blocks already pass to attention
(`ContextParallel.window` makes it, per forward), so the blocks, activation checkpointing
and tensor parallelism's input plan need nothing of their own.
"""

from __future__ import annotations

import torch


def chunk_positions(T: int, size: int, rank: int) -> list[range]:
    """The global positions of cp rank `rank`'s tokens of a T-token window, in the order it
    holds them: chunks rank and 2 size - 1 - rank of 2 size (torch-free: the SFT sampler
    counts a rank's trained tokens on the host with it)."""
    L = T // (2 * size)
    return [range(c * L, (c + 1) * L) for c in (rank, 2 * size - 1 - rank)]


class ContextParallel:
    """This rank's place in its cp group (a DeviceMesh's "cp" dimension or a process group,
    `rank` of `size`)."""

    def __init__(self, group, rank: int, size: int):
        self.group, self.rank, self.size = group, rank, size

    @classmethod
    def of_mesh(cls, cp_mesh) -> ContextParallel:
        return cls(cp_mesh.get_group(), cp_mesh.get_local_rank(), cp_mesh.size())

    def chunks(self, rank: int | None = None) -> tuple[int, int]:
        """The two global chunk indices `rank` (this one by default) holds."""
        r = self.rank if rank is None else rank
        return r, 2 * self.size - 1 - r

    def index(self, T: int, device=None) -> torch.Tensor:
        """(T/cp,) the global positions of this rank's tokens, in the order it holds them."""
        return torch.cat([torch.arange(r.start, r.stop, device=device)
                          for r in chunk_positions(T, self.size, self.rank)])

    def natural_order(self, T: int, device=None) -> torch.Tensor:
        """(T,) for each global position, where it lies in the rank-ordered gather."""
        L, Tl = T // (2 * self.size), T // self.size
        where = torch.empty(T, dtype=torch.long)
        for r in range(self.size):
            for h, c in enumerate(self.chunks(r)):
                where[c * L:(c + 1) * L] = torch.arange(r * Tl + h * L, r * Tl + (h + 1) * L)
        return where.to(device)

    def window(self, idx: torch.Tensor, targets: torch.Tensor, doc: torch.Tensor | None,
               rope_cos: torch.Tensor, rope_sin: torch.Tensor):
        """This rank's part of a (B, T) window: (idx, targets (B, T/cp), cos, sin, the
        CPAttention its blocks attend through)."""
        B, T = idx.shape
        if T % (2 * self.size):
            raise ValueError(f"sequence length {T} is not a multiple of 2 x cp ({self.size})")
        mine = self.index(T, idx.device)  # (Tl,)
        if doc is None:
            cos, sin = rope_cos[mine], rope_sin[mine]  # (Tl, D/2)
        else:
            from llmtk.train.model.gpt import example_positions

            pos = example_positions(doc)[:, mine]  # (B, Tl): positions restart per document
            cos, sin = rope_cos[pos][:, None], rope_sin[pos][:, None]  # (B, 1, Tl, D/2)
        attn = CPAttention(self, T, doc, idx.device)
        return idx[:, mine], targets[:, mine], cos, sin, attn


class CPAttention:
    """Attention of this rank's query chunks over the cp group's gathered keys and values:
    chunk c (of length L) sees keys [0, (c + 1) L), causally aligned at its end; with
    document ids only keys of its own document."""

    def __init__(self, cp: ContextParallel, T: int, doc: torch.Tensor | None, device=None):
        # Everything index-like is built here, eagerly, once per forward: the blocks that
        # read it may be compiled (--compile), and a graph sees it as plain tensor inputs.
        self.cp, self.T = cp, T
        self.L = T // (2 * cp.size)
        self.order = cp.natural_order(T, device)  # (T,) the gathered keys' natural order
        if doc is None:  # causal, aligned at the chunk's end (no (L, end) tensor)
            from torch.nn.attention.bias import causal_lower_right

            self.masks = [causal_lower_right(self.L, (c + 1) * self.L) for c in cp.chunks()]
        else:  # (B, 1, L, (c + 1) L) bool per local chunk, True = attend
            self.masks = [self._chunk_mask(doc, c) for c in cp.chunks()]

    def _chunk_mask(self, doc: torch.Tensor, c: int) -> torch.Tensor:
        """Chunk c's rows of the document mask, without the whole (T, T) one."""
        L, end = self.L, (c + 1) * self.L
        q = torch.arange(c * L, end, device=doc.device)
        causal = torch.arange(end, device=doc.device)[None, :] <= q[:, None]  # (L, end)
        same = doc[:, None, c * L:end, None] == doc[:, None, None, :end]  # (B, 1, L, end)
        return same & causal

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               gqa: bool) -> torch.Tensor:
        """q (B, H, Tl, D), k, v (B, K, Tl, D) of this rank -> (B, H, Tl, D)."""
        import torch.nn.functional as F
        from torch.distributed._functional_collectives import all_gather_single_autograd

        # A functional collective (dynamo traces it: a compiled block keeps one graph);
        # its backward reduce-scatters the gradient, each rank's queries read every key.
        kv = all_gather_single_autograd(torch.stack([k, v]), 3, self.cp.group)  # (2,B,K,T,D)
        kv = kv.index_select(3, self.order)  # global positions in order
        L, out = self.L, []
        for h, c in enumerate(self.cp.chunks()):
            qc = q[:, :, h * L:(h + 1) * L]
            end = (c + 1) * L
            out.append(F.scaled_dot_product_attention(qc, kv[0, :, :, :end], kv[1, :, :, :end],
                                                      attn_mask=self.masks[h], enable_gqa=gqa))
        return torch.cat(out, dim=2)

