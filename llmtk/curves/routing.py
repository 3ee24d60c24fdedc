"""Mixture-of-experts routing read from a run's expert-load rows (`expert_load/N`: each
expert's share of layer N's assignments since the last row, llmtk.train.model.moe).

Collapsed routing is a router that sends most tokens to a few experts, or none to some:
the idle experts stop learning (they get no gradient), the busy ones become the model,
and the compute per token stays that of E experts' worth of parameters in name only.
Judged after warm-up (the first third of the logged steps: a fresh router is near
uniform and a balancing bias needs time to act) on each layer's median row, so one noisy
row decides nothing.

Thresholds (module constants) were chosen on benchmarks/moe_balance.py's runs with and
without balancing on the corpus' python-docs documents and checked on its fortunes
(docs/diagnose.md gives the numbers of both halves).
"""

from __future__ import annotations

from statistics import median

from llmtk.curves.common import Finding
from llmtk.curves.logs import Run

LOAD_PREFIX = "expert_load/"
WARM_SHARE = 1 / 3  # rows in the first third of the logged steps are warm-up
MIN_ROWS = 3  # the fewest post-warm-up rows judged
HOT = 2.0  # an expert at >= 2x the uniform share in the median row
IDLE = 0.25  # an expert at <= 1/4 of the uniform share in the median row


def layer_loads(run: Run) -> dict[str, list[tuple[float, list[float]]]]:
    """{layer: [(step, shares), ...]} of the rows that carry expert loads."""
    out: dict[str, list[tuple[float, list[float]]]] = {}
    for row in run.rows:
        step = row.get("step")
        for key, shares in row.items():
            if (key.startswith(LOAD_PREFIX) and isinstance(shares, list) and shares
                    and isinstance(step, int | float)):
                out.setdefault(key[len(LOAD_PREFIX):], []).append(
                    (float(step), [float(s) for s in shares]))
    return out


def after_warmup(rows: list[tuple[float, list[float]]]) -> list[tuple[float, list[float]]]:
    first, last = rows[0][0], rows[-1][0]
    start = first + WARM_SHARE * (last - first)
    return [r for r in rows if r[0] > start]


def layer_extremes(rows: list[tuple[float, list[float]]]) -> tuple[float, float]:
    """(median over rows of the largest share x E, median of the smallest share x E)."""
    E = len(rows[0][1])
    return (median(max(s) * E for _, s in rows), median(min(s) * E for _, s in rows))


def detect_collapsed_routing(run: Run) -> list[Finding]:
    loads = layer_loads(run)
    bad, details, start = [], [], None
    for layer, rows in sorted(loads.items(), key=lambda kv: _order(kv[0])):
        late = after_warmup(rows)
        if len(late) < MIN_ROWS:
            continue
        E = len(late[0][1])
        hi, lo = layer_extremes(late)
        idle = [e for e in range(E) if median(s[e] for _, s in late) * E <= IDLE]
        details.append(f"layer {layer}: busiest expert {hi:.2f}x uniform, idlest {lo:.2f}x "
                       f"(median of {len(late)} rows after step {late[0][0]:.0f})")
        if hi >= HOT or idle:
            what = [f"the busiest expert takes {hi:.1f}x its uniform share"] if hi >= HOT \
                else []
            if idle:
                what.append(f"expert(s) {', '.join(map(str, idle))} of {E} get at most "
                            f"{IDLE:g}x theirs")
            bad.append(f"layer {layer}: " + " and ".join(what))
            start = late[0][0] if start is None else min(start, late[0][0])
    if not bad:
        return []
    return [Finding(
        "collapsed_routing", "warning", start,
        "collapsed expert routing after warm-up: " + "; ".join(bad),
        causes=["no load balancing (--router-bias-rate 0 and no --router-aux-loss): a "
                "router rewards the experts it already favours, which then learn fastest",
                "a learning rate high enough to grow the router's logits before the "
                "balancing catches up",
                "a balancing bias rate too small for the run's length"],
        fixes=["turn on the auxiliary-loss-free bias, --router-bias-rate 1e-3 to 1e-2 "
               "(DeepSeek-V3: 1e-3; llmtk's default 1e-2), and resume or restart",
               "or add the Switch balance loss, --router-aux-loss 1e-2 (with "
               "--router-z-loss 1e-3 to keep the router's logits small)",
               "lower the peak learning rate or lengthen the warm-up",
               "plot the load per layer: llmtk plot-loss RUN -m 'expert_load_*' -o load.png"],
        details=details)]


def _order(layer: str):
    return (0, int(layer)) if layer.isdigit() else (1, layer)
