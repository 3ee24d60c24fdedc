"""Model FLOPs per token (PaLM's formula) and GPU peak throughput, for MFU.

NOTE: this belongs in llmtk/estimate/ (DESIGN.md: train's MFU uses the same
formula `estimate` prints). When llmtk.estimate.flops / .hardware exist (the
estimate branch), these functions defer to them; the local fallbacks below keep
train working without that branch and can be deleted once it is merged.
"""

from __future__ import annotations

from llmtk.train.model_config import ModelConfig, count_params

# Dense bf16 tensor-core peak FLOP/s per GPU (vendor datasheets, no sparsity).
GPU_PEAK_BF16 = {
    "H200": 989e12,
    "H100": 989e12,   # SXM; the PCIe card is 756e12
    "A100": 312e12,
    "L40S": 362e12,
    "A10": 125e12,
    "L4": 121e12,
    "V100": 125e12,   # fp16 (no bf16 on Volta)
}


def model_flops_per_token(cfg: ModelConfig) -> float:
    try:
        from llmtk.estimate.flops import flops_per_token_for_config
    except ImportError:
        return _model_flops_per_token(cfg)
    return flops_per_token_for_config(cfg)


def _model_flops_per_token(cfg: ModelConfig) -> float:
    """Training FLOPs per token: 6N + 12·L·H·Q·T (PaLM, appendix B).

    N counts the parameters used in matmuls: the input-embedding lookup costs no
    FLOPs, so an untied input embedding is left out; a tied one is counted once
    (it is the output projection). 12·L·H·Q·T is attention's score and value
    matmuls (H·Q = d_model) at sequence length T, forward + backward.
    """
    n = count_params(cfg) - (0 if cfg.tie_embeddings else cfg.vocab_size * cfg.d_model)
    return 6.0 * n + 12.0 * cfg.n_layer * cfg.d_model * cfg.seq_len


def gpu_peak_flops(device_name: str) -> float | None:
    """Peak bf16 FLOP/s for a torch.cuda.get_device_name() string, None when unknown."""
    try:
        from llmtk.estimate.hardware import device_peak_flops
    except ImportError:
        pass
    else:
        return device_peak_flops(device_name)
    name = device_name.upper()
    for key, peak in GPU_PEAK_BF16.items():
        if key in name:
            if key == "H100" and "PCIE" in name:
                return 756e12
            return peak
    return None
