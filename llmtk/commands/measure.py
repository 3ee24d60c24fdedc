"""`llmtk estimate --measure`: llmtk.train.measure's real CPU step against
llmtk.estimate.activations' prediction, as a table or JSON."""

from __future__ import annotations

from llmtk.compute.models import Dims
from llmtk.errors import UsageError
from llmtk.estimate import memory
from llmtk.estimate.activations import predict


def compare(mcfg, batch: int, recompute: str = "selective", lora_rank: int | None = None) -> dict:
    from llmtk.train.measure import measure
    from llmtk.train.model.config import count_params

    got = measure(mcfg, batch, recompute=recompute, lora_rank=lora_rank)
    want = predict(mcfg, count_params(mcfg), batch, recompute=recompute, lora_rank=lora_rank)
    rows = {}
    for k in ("weights", "gradients", "optimizer", "activations"):
        rows[k] = {"measured": got[k], "predicted": want[k],
                   "error": (want[k] - got[k]) / got[k] if got[k] else 0.0}
    rows["activations"]["korthikanti_style"] = want["activations_korthikanti_style"]
    states = ("weights", "gradients", "optimizer")
    m, p = sum(got[k] for k in states), sum(want[k] for k in states)
    rows["model_states"] = {"measured": m, "predicted": p, "error": (p - m) / m}
    return {"config": mcfg.to_dict(), "batch": batch, "params": got["params"],
            "precision": "fp32 (CPU)", "recompute": recompute, "lora_rank": lora_rank,
            "rows": rows}


def measure_report(model: str | None, dims: Dims, *, batch: int, json_out: bool, file,
                   recompute: str = "selective", lora_rank: int | None = None) -> None:
    if recompute not in memory.RECOMPUTE:
        raise UsageError(f"--recompute: expected one of {', '.join(memory.RECOMPUTE)}, "
                         f"got {recompute!r}")
    from llmtk.train.measure import config_from

    cfg = config_from(model, dims)
    if lora_rank is not None and lora_rank < 1:
        raise UsageError(f"--lora-rank: must be >= 1, got {lora_rank}")
    result = compare(cfg, batch, recompute, lora_rank=lora_rank)
    if json_out:
        from llmtk.io.console import write_json

        write_json(file, result)
        return
    from rich.table import Table

    from llmtk.io.console import buffered_console

    c = result["config"]
    t = Table(title=(f"llmtk estimate --measure: {c['n_layer']} layers x d_model {c['d_model']}, "
                     f"{c['n_head']} heads ({cfg.kv_heads} kv), ffn {cfg.hidden}, vocab "
                     f"{c['vocab_size']}, seq {c['seq_len']}, batch {batch}, recompute "
                     f"{recompute}, fp32 on CPU, "
                     + (f"LoRA rank {lora_rank}, " if lora_rank else "") +
                     f"{result['params']:,} params"), title_justify="left")
    for col in ("bytes", "measured", "predicted", "error"):
        t.add_column(col, justify="left" if col == "bytes" else "right")
    for k, row in result["rows"].items():
        t.add_row(k, f"{row['measured']:,}", f"{row['predicted']:,.0f}", f"{row['error']:+.2%}")
    ks = result["rows"]["activations"]["korthikanti_style"]
    meas = result["rows"]["activations"]["measured"]
    t.add_row("activations, big-model formula", f"{meas:,}", f"{ks:,.0f}",
              f"{(ks - meas) / meas:+.2%}")
    console, emit = buffered_console(file)
    console.print(t)
    emit()
