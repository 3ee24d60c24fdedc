"""This model against a baseline on the same items: metric deltas with a paired bootstrap
confidence interval, McNemar's exact test for the right/wrong metrics, and the items
that flipped either way.

Paired: both models answer the same items, so each bootstrap sample draws item indices
once and recomputes both metrics on them; the interval is on the difference. McNemar
looks only at the discordant items (b: the baseline right, this model wrong; c: the
reverse): two-sided p = P(Binomial(b + c, 1/2) <= min(b, c)) * 2.
"""

from __future__ import annotations

import math

from llmtk.errors import DataError
from llmtk.evaluate.metrics import TaskResult
from llmtk.evaluate.tasks import PERPLEXITY

BOOTSTRAP_SAMPLES, BOOTSTRAP_SEED, CONFIDENCE = 1000, 1234, 0.95
LOWER_IS_BETTER = ("perplexity", "bits_per_byte")
PER_ITEM = {"acc": "correct", "acc_norm": "correct_norm", "exact_match": "correct",
            "exact_match_flexible": "correct_flexible"}


def _values(result: TaskResult, ids: list[str]):
    """(B, n)-indexable arrays per metric: the per-item values in the order of `ids`, and
    for perplexity tasks the NLL, tokens and bytes the ratios are made of."""
    import numpy as np

    by_id = {str(r["id"]): r for r in result.items}
    rows = [by_id[i] for i in ids]
    if result.kind == PERPLEXITY:
        return {k: np.array([r[k] for r in rows], dtype=np.float64)
                for k in ("nll", "tokens", "bytes")}
    return {m: np.array([float(r[PER_ITEM[m]]) for r in rows], dtype=np.float64)
            for m in result.metrics}


def _metric(values: dict, metric: str, idx):
    """The metric over the item indices `idx` ((B, n) or (n,)), per bootstrap row."""
    import numpy as np

    if metric == "perplexity":
        return np.exp(values["nll"][idx].sum(-1) / np.maximum(1, values["tokens"][idx].sum(-1)))
    if metric == "bits_per_byte":
        return values["nll"][idx].sum(-1) / math.log(2) / np.maximum(
            1, values["bytes"][idx].sum(-1))
    return values[metric][idx].mean(-1)


def mcnemar_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value for b and c discordant pairs."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def compare(result: TaskResult, baseline: TaskResult) -> dict:
    """Per metric: this, baseline, delta and its CI (plus McNemar for right/wrong metrics);
    and the ids lost (baseline right, this wrong) and gained."""
    import numpy as np

    ids = [str(r["id"]) for r in result.items]
    base_ids = {str(r["id"]) for r in baseline.items}
    if set(ids) != base_ids or len(ids) != len(base_ids):
        raise DataError(f"{result.name}: the baseline scored other items (ids differ)")
    mine, theirs = _values(result, ids), _values(baseline, ids)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    idx = rng.integers(0, len(ids), size=(BOOTSTRAP_SAMPLES, len(ids)))
    lo_q, hi_q = (1 - CONFIDENCE) / 2, 1 - (1 - CONFIDENCE) / 2
    metrics, flips = {}, {}
    for m in result.metrics:
        deltas = _metric(mine, m, idx) - _metric(theirs, m, idx)
        entry = {"value": result.metrics[m], "baseline": baseline.metrics[m],
                 "delta": result.metrics[m] - baseline.metrics[m],
                 "ci": [float(np.quantile(deltas, lo_q)), float(np.quantile(deltas, hi_q))]}
        if m in PER_ITEM:
            lost = (theirs[m] == 1) & (mine[m] == 0)
            gained = (theirs[m] == 0) & (mine[m] == 1)
            entry.update(lost=int(lost.sum()), gained=int(gained.sum()),
                         mcnemar_p=mcnemar_p(int(lost.sum()), int(gained.sum())))
            flips[PER_ITEM[m]] = lost, gained
        metrics[m] = entry
    # the items flipped on `correct` (acc, exact_match): the ones the bad-case files list
    none = np.zeros(len(ids), dtype=bool)  # perplexity: nothing is right or wrong
    lost, gained = flips.get("correct", (none, none))
    return {"metrics": metrics, "lost": [i for i, f in zip(ids, lost, strict=True) if f],
            "gained": [i for i, f in zip(ids, gained, strict=True) if f]}


def worse_by(metric: str, entry: dict) -> float:
    """How much worse this model is than the baseline on `metric` (negative: better)."""
    return entry["delta"] if metric in LOWER_IS_BETTER else -entry["delta"]


def regressions(comparison: dict, threshold: float) -> list[str]:
    """The metrics that got worse by more than `threshold`."""
    return [m for m, e in comparison["metrics"].items() if worse_by(m, e) > threshold]
