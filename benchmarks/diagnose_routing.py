"""The numbers behind `diagnose`'s collapsed_routing thresholds (llmtk/curves/routing.py).

For each run directory (benchmarks/moe_balance.py's runs, kept with --keep: `bias-R` with
the auxiliary-loss-free bias, `none` without balancing) it prints, per MoE layer over the
rows after warm-up, the median row's busiest expert (share x E), the smallest per-expert
median share x E, and whether the finding fires. Choose the thresholds on one half's
runs (python-docs), then read the other half's (fortunes) with them unchanged.

    python benchmarks/moe_balance.py --data CORPUS --source python-docs --rates 0.003 \
        --seed 0 --keep runs/python-docs-0           # and seed 1; then --source fortunes
    python benchmarks/diagnose_routing.py runs/python-docs-*/bias-* runs/python-docs-*/none
"""

from __future__ import annotations

import os
import sys
from statistics import median

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from llmtk.curves.logs import load_run  # noqa: E402
from llmtk.curves.routing import (  # noqa: E402
    after_warmup,
    detect_collapsed_routing,
    layer_extremes,
    layer_loads,
)


def main() -> None:
    print(f"{'run':32} {'layer':>5} {'busiest':>8} {'idlest expert':>14} finding")
    for path in sys.argv[1:]:
        run = load_run(path)
        fired = bool(detect_collapsed_routing(run))
        name = os.path.relpath(path.rstrip("/"), os.path.dirname(os.path.dirname(
            path.rstrip("/"))))
        for layer, rows in sorted(layer_loads(run).items()):
            late = after_warmup(rows)
            E = len(late[0][1])
            hi, _lo = layer_extremes(late)
            idlest = min(median(s[e] for _, s in late) * E for e in range(E))
            print(f"{name:32} {layer:>5} {hi:8.2f} {idlest:14.2f} {fired}")


if __name__ == "__main__":
    main()
