"""Per-layer gradient norms (`--grad-stats per-layer`): the layer a spike or a NaN starts in.

The trainer already reduces every parameter's squared gradient norm once a step (its one
collective, `optim.Optimizer.update`), and reads them to the host when it settles the
pending steps. This module groups them by layer and picks the steps that get a
`grad_stats` row in metrics.jsonl:

- a non-finite step (`why: "nan"`): some gradient or the loss is NaN/Inf;
- a spike step (`why: "spike"`): the grad norm above GRAD_SPIKE times its running mean, or
  the loss above `--spike-factor` times its running mean (after WARM_STEPS steps);
- every `--grad-stats-every` steps (`why: "every"`), the baseline a jump is measured from.

A row is `{"step", "event": "grad_stats", "why", "grad_norm", "grad_norm/LAYER": ...}`,
layers in the model's order (input first). A layer is the module path up to a block's
sub-module: `tok_emb`, `layers.3.attn`, `layers.3.mlp`, `layers.3.attn_norm`, `norm`; LoRA
adapters count with the layer they adapt. `llmtk diagnose` names the first layer whose
norm went non-finite or jumped, and `llmtk plot-loss --metric 'grad_norm/*'` draws them.
"""

from __future__ import annotations

import math

GRAD_SPIKE = 10.0  # grad norm 10x its running mean (diagnose's grad_explosion factor)
WARM_STEPS = 5  # steps seen before a spike can be called (the first norms are large)
EMA = 0.9  # weight of the running means


def layer_of(name: str) -> str:
    """`layers.3.attn.wqkv.weight` -> `layers.3.attn`; `tok_emb.weight` -> `tok_emb`."""
    parts = name.split(".")[:-1] or [name]
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[:i + 2])
    return parts[0]


class GradStats:
    """Decides, step by step, which steps get a per-layer row, and builds it."""

    def __init__(self, names: list[str], every: int = 0, loss_factor: float = 3.0):
        self.layers = list(dict.fromkeys(layer_of(n) for n in names))
        index = {layer: i for i, layer in enumerate(self.layers)}
        self.of = [index[layer_of(n)] for n in names]  # parameter -> its layer
        self.every, self.loss_factor = every, loss_factor
        self.norm_mean: float | None = None
        self.loss_mean: float | None = None
        self.seen = 0

    def row(self, step: int, loss: float, norm: float, sq: list[float]) -> dict | None:
        """The grad_stats fields of this step (without step/event), or None. `sq`: every
        parameter's squared gradient norm, in the order of `names`."""
        why = self._why(step, loss, norm)
        if math.isfinite(loss) and math.isfinite(norm):
            self.seen += 1
            self.norm_mean = norm if self.norm_mean is None else \
                EMA * self.norm_mean + (1 - EMA) * norm
            self.loss_mean = loss if self.loss_mean is None else \
                EMA * self.loss_mean + (1 - EMA) * loss
        if why is None:
            return None
        sums = [0.0] * len(self.layers)
        for i, v in zip(self.of, sq, strict=True):
            sums[i] += v
        out: dict = {"why": why, "grad_norm": norm}
        out.update((f"grad_norm/{layer}", math.sqrt(s) if s >= 0 else math.nan)
                   for layer, s in zip(self.layers, sums, strict=True))
        return out

    def _why(self, step: int, loss: float, norm: float) -> str | None:
        if not (math.isfinite(loss) and math.isfinite(norm)):
            return "nan"
        if self.seen >= WARM_STEPS and (
                norm > GRAD_SPIKE * self.norm_mean or loss > self.loss_factor * self.loss_mean):
            return "spike"
        if self.every and step % self.every == 0:
            return "every"
        return None
