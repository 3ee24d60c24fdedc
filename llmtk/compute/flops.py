"""Training FLOPs: Kaplan's 6ND and PaLM's 6N + 12·L·H·Q·T per token.

Forward is 2 FLOPs per parameter per token (one multiply-add), backward twice
that, hence 6N. PaLM (Chowdhery et al. 2022, appendix B) adds the attention
score and value matmuls, which have no parameters: 12·L·H·Q·T per token for
L layers, H heads of dimension Q and sequence length T (full, not causal-halved
attention, as PaLM counts it). This is the "model FLOPs" of model FLOPs
utilisation: recomputation is not counted, so MFU does not reward it.

`causal=True` halves the attention term: with a causal mask only the lower triangle
of the T x T score matrix is work a causal kernel (flash attention) does, so
`llmtk train` reports MFU with it (as Megatron's causal count and FlashAttention's
benchmarks do). `estimate` prints both: PaLM's full count as the model FLOPs (the
published totals are checked against it) and the causal count as the work its time
model divides by peak x MFU (its --mfu is llmtk train's MFU). At 2K context the
difference is a few percent; at 128K attention is most of the work (llama3-8b: the
causal term is 2.3x 6N), so the choice matters there.
"""

from __future__ import annotations


def flops_6nd(n_params: float, tokens: float) -> float:
    """Kaplan et al. 2020's C = 6·N·D, N the parameters in matmuls (ParamCounts.matmul),
    the same N as model_flops_per_token's (the papers' all-parameter N differs from it by
    the untied input table: 0.5% for Llama 3 405B)."""
    return 6.0 * n_params * tokens


def attention_flops_per_token(n_layer: int, n_head: int, head_dim: int, seq_len: int,
                              *, causal: bool = False) -> float:
    """PaLM's 12·L·H·Q·T: QK^T and AV, forward and backward, per token (half if causal)."""
    return (6.0 if causal else 12.0) * n_layer * n_head * head_dim * seq_len


def model_flops_per_token(
    n_params_matmul: float, n_layer: int, n_head: int, head_dim: int, seq_len: int,
    *, trainable_fraction: float = 1.0, causal: bool = False,
) -> float:
    """Training FLOPs per token, PaLM's 6N + 12·L·H·Q·T (what `llmtk train` reports MFU on).

    n_params_matmul: parameters that take part in a matmul (not the input embedding
    lookup nor a learned position table). With frozen weights (LoRA) the weight
    gradient matmuls are skipped: 2N forward + 2N input-gradient + 2N·trainable_fraction.
    """
    dense = (4.0 + 2.0 * trainable_fraction) * n_params_matmul
    return dense + attention_flops_per_token(n_layer, n_head, head_dim, seq_len, causal=causal)


def time_seconds(total_flops: float, n_gpus: int, peak: float, mfu: float) -> float:
    """Wall-clock seconds for `total_flops` of model FLOPs at the given utilisation."""
    return total_flops / (n_gpus * peak * mfu)


def mfu(flops_per_token: float, tokens_per_s: float, n_gpus: int, peak: float) -> float:
    """Model FLOPs utilisation, the inverse of time_seconds: the model FLOPs the run does per
    second over what its GPUs could. tokens_per_s is the whole run's rate, each token of
    the global batch counted once: the GPUs that split one token's work (a tensor-parallel
    group, pipeline stages) share its FLOPs, they do not each do them."""
    return flops_per_token * tokens_per_s / (n_gpus * peak)


def flops_per_token_for_config(cfg, *, causal: bool = False) -> float:
    """`model_flops_per_token` for a `llmtk.train` ModelConfig (duck-typed: n_layer, d_model,
    n_head, kv_heads, head_dim, hidden, vocab_size, seq_len, tie_embeddings), for train's MFU."""
    from llmtk.compute.models import count_params, spec_from_config

    spec = spec_from_config(cfg)
    return model_flops_per_token(count_params(spec).matmul, spec.n_layer, spec.n_head,
                                 spec.hd, spec.seq_len, causal=causal)
