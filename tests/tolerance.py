"""Tolerances for numerical comparisons, derived from the arithmetic compared.

Two results of the same function computed along different code paths (another summation
order, another process layout, another library) differ by rounding only. For a sum of n
terms of magnitude sum(|t_i|), any order lies within gamma_n * sum(|t_i|) of the exact sum,
gamma_n = n * u / (1 - n * u), u the unit roundoff (Higham, "Accuracy and Stability of
Numerical Algorithms", 2nd ed., Lemma 3.1 and eq. 3.5); two orders within twice that.
A CPU's vector units (AVX2 or AVX-512, Intel or AMD) choose the order, so a comparison
between code paths must allow that bound, never the difference one machine measured.

Where a bound through a whole network or many optimizer steps is hard to state, the
comparison runs in fp64: the same rounding argument with u = 2^-53 leaves so much room that
a worst case amplified a thousandfold still sits far below any bug (see PARITY_REL).
"""

from contextlib import contextmanager

U32 = 2.0 ** -24  # unit roundoff of fp32: half the gap between 1 and the next float
U64 = 2.0 ** -53  # unit roundoff of fp64


def gamma(n: int, u: float = U32) -> float:
    """The relative error bound of a sum (or dot product) of n terms in any order."""
    assert n * u < 1
    return n * u / (1 - n * u)


# Layout parity in fp64 (the reason, measured amplification included, is in
# tests/test_train_parallel.py): AdamW turns a rounding difference in a tiny gradient into
# a full-size update, and over 20 steps one fp32 run measured x170 amplification. 1e-9 is
# 4.5e6 units of fp64 rounding: that amplification with 10^4 to spare, while any layout bug
# moves a loss or a grad norm by more than 1e-3.
PARITY_REL = 1e-9
FP64 = ["--dtype", "fp64"]


@contextmanager
def fp64():
    """Build and run models in fp64 inside (torch's default dtype, as `--dtype fp64` runs)."""
    import torch

    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def assert_close64(got, want) -> None:
    """Two fp64 results of the same arithmetic in other orders agree within PARITY_REL of
    the largest |want|. Their rounding bound, 2 gamma_n(u64) sum|terms| with n up to 10^4
    roundings on a path and sum|terms| up to 100 times the values, is 2e-10 of them at
    most; a bug (a wrong mask, a missing term) moves them by 1e-3 or more."""
    import torch

    assert got.dtype == want.dtype == torch.float64, (got.dtype, want.dtype)
    scale = want.abs().max().item()
    assert max_abs_diff(got, want) <= PARITY_REL * scale, (max_abs_diff(got, want), scale)


def max_abs_diff(a, b) -> float:
    """The largest elementwise difference of two tensors, computed in fp64."""
    return (a.double() - b.double()).abs().max().item()


def forward_chain(cfg, seq_len: int) -> int:
    """How many accumulated roundings lie on the longest path from a GPT's input to one of
    its logits, layer by layer (ModelConfig `cfg`, a sequence of seq_len tokens): the two
    RMS norms' sums of squares (d_model each; head_dim more each for q/k norms), the q/k/v
    projection (d_model terms), the scores (head_dim), the softmax's denominator and the
    weighted sum of values (seq_len each), the output projection (n_head x head_dim), then
    the MLP: the router (d_model) and the top-k combination (k) in a MoE layer, the
    up-projections (d_model) and the down-projection (its hidden width); at the end the
    final norm (d_model) and the head (d_model)."""
    d, hd = cfg.d_model, cfg.head_dim
    n = 0
    for layer in range(cfg.n_layer):
        n += 2 * d + (2 * hd if cfg.qk_norm else 0)
        n += d + hd + 2 * seq_len + cfg.n_head * hd
        if cfg.is_moe(layer):
            n += d + cfg.top_k + 1 + d + max(cfg.expert_ffn,
                                             cfg.n_shared_experts * cfg.expert_ffn)
        else:
            n += d + cfg.hidden
    return n + 2 * d


def logit_bound(model, idx, extra: int = 0, **forward_kw) -> float:
    """How far two fp32 forwards of the GPT `model` on `idx` (model(idx, **forward_kw))
    that differ only in summation order (another kernel, another library's implementation
    of the same arithmetic) may put any logit apart. `extra`: roundings one of the two
    forwards adds on the path (a merged LoRA adapter: r + 2 per adapted matrix).

    Each of the forward_chain(...) = N accumulated roundings on a logit's path is one
    relative error of at most u of the magnitudes it adds up. Through the residual stream a
    relative error passes a layer with gain about 1 (each branch reads an RMS-normalised
    copy, so its scale is divided out, and adds its output to the stream), so the final
    hidden state x is within gamma_N of exact, relatively, and a logit v within
    gamma_N * sum_k |W[v, k]| |x[k]|; two such forwards within twice that. The bound grows
    linearly in N where real rounding errors mostly cancel (about sqrt(N)): a tiny model
    (N ~ 1200) measured 1.3e-6 apart where this gives 9e-4, room for the gains the argument
    leaves out, and below the mapping bugs the tests look for (measured: a wrong rope
    theta or a flipped expert moves logits by 0.1 or more, a norm eps of 1e-5 for 1e-6 by
    2e-3, where the bound is 4e-4). A forward in fp64 rounds less, so the bound holds for it
    too, and for an fp64 result rounded once to fp32."""
    import torch

    seen = {}
    hook = model.norm.register_forward_hook(lambda mod, args, out: seen.update(x=out))
    try:
        with torch.no_grad():
            model(idx, **forward_kw)
    finally:
        hook.remove()
    x = seen["x"].double()  # (B, T, C)
    w = model.lm_head.weight.double()  # (V, C)
    scale = (x.abs() @ w.abs().t()).max().item()  # max over logits of sum_k |W||x|
    return 2 * gamma(forward_chain(model.cfg, idx.shape[-1]) + extra) * scale


def loglik_bound(model, idx, n: int, ll: float) -> float:
    """How far two fp32 computations of a continuation's log-likelihood `ll` (n tokens
    scored after `idx`'s contexts, the summed log-softmax entries) may lie apart when their
    forwards differ in summation order. Each entry is a logit minus the log-sum-exp of the
    V logits: both move by at most the logit bound b (the log-sum-exp moves by at most the
    largest change of its inputs), and each side's log-sum-exp rounds its sum of V
    positive terms (gamma_V relatively, so gamma_V absolutely after the log) and its exp
    and log (3 u); the n entries' sum adds gamma_n |ll| on each side."""
    b = logit_bound(model, idx)
    v = model.cfg.vocab_size
    return n * (2 * b + 2 * (gamma(v) + 3 * U32)) + 2 * gamma(n) * abs(ll)
