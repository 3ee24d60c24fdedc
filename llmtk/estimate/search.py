"""The price of a mixture search (`llmtk mix search`) beside the run it is for: K proxy
trainings' FLOPs, GPU time and cost, by the formulas the run's own rows use (6ND, PaLM's
6N + attention, time at the run's MFU on its GPUs). RegMix (Liu et al. 2024) puts its
512 proxies of 1M parameters at about 2% of one 1B run's compute."""

from __future__ import annotations

from llmtk.compute import flops as F
from llmtk.compute.models import ModelSpec, count_params
from llmtk.errors import ConfigError


def price_search(result: dict, proxy: ModelSpec, tokens_per_trial: float, trials: int) -> dict:
    """`result` is the run's estimate (llmtk.estimate.plan.estimate); the proxies run on
    its GPUs at its MFU (their total GPU time does not depend on how many run at once)."""
    if trials < 1:
        raise ConfigError("search_trials", f"must be >= 1, got {trials}")
    run = result["run"]
    counts = count_params(proxy)
    per_token = F.model_flops_per_token(counts.matmul, proxy.n_layer, proxy.n_head, proxy.hd,
                                        proxy.seq_len)
    tokens = trials * tokens_per_trial
    total = tokens * per_token
    seconds = F.time_seconds(total, run["gpus"], run["peak_flops_per_gpu"], run["mfu"])
    gpu_hours = seconds * run["gpus"] / 3600
    price = result["time"]["price_per_gpu_hour"]
    return {
        "trials": trials,
        "proxy_shape": proxy.shape_text(),
        "proxy_params": counts.total,
        "proxy_matmul_params": counts.matmul,
        "tokens_per_trial": tokens_per_trial,
        "tokens": tokens,
        "flops_6nd": F.flops_6nd(counts.matmul, tokens),
        "flops": total,
        "seconds": seconds,
        "gpu_hours": gpu_hours,
        "cost": gpu_hours * price if price else None,
        # against the run: FLOPs by the same formula (6ND to 6ND, PaLM to PaLM)
        "share_of_run_6nd": F.flops_6nd(counts.matmul, tokens) / result["flops"]["total_6nd"],
        "share_of_run": total / result["flops"]["total"],
        "share_of_run_gpu_hours": gpu_hours / result["time"]["gpu_hours"],
    }
