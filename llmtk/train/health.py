"""The run's health: the host settles the steps' device-side numbers, logs non-finite
steps with the parameters whose gradients were bad, stops after a streak of them, and
rolls a loss spike back to the last checkpoint (PaLM's remedy).

The steps' numbers stay on the device (`pending`) until the host settles them, once per
logging row (and before a checkpoint, an evaluation or the end; --on-spike rollback
settles every step): one device read for all of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llmtk.train.runtime import CollectiveError


@dataclass(frozen=True)
class HealthRules:
    """--on-nan, --max-bad-steps, --on-spike, --spike-factor and --warmup (no spike is
    judged while the rate warms up)."""

    on_nan: str
    max_bad_steps: int
    on_spike: str
    spike_factor: float
    warmup: int


class Health:
    """`log`: the run's StepLog; `ckpt`: its Checkpointer; `restore(path)`: load a
    checkpoint everywhere and return its TrainState; `zero_grad()`: the optimizer's;
    `documents(start, stop)`: the documents of windows [start, stop) (for the rollback's
    event); `param_names`: the squared norms' names; `grad_stats`: --grad-stats or None."""

    def __init__(self, rules: HealthRules, log, ckpt, *, restore, zero_grad, documents,
                 param_names: list[str], grad_stats=None):
        self.rules, self.log, self.ckpt = rules, log, ckpt
        self.restore, self.zero_grad, self.documents = restore, zero_grad, documents
        self.param_names, self.grad_stats = param_names, grad_stats
        self.pending: list = []   # StepResults not yet settled by the host
        self.last_row = None      # (step, [loss, norm, not_finite], lr) settled

    @property
    def every_step(self) -> bool:
        """Whether every step must be settled (a spike is rolled back at its step)."""
        return self.rules.on_spike == "rollback"

    def settle(self, st) -> bool:
        """Bring the host up to date with the pending steps (one device read): log
        non-finite steps, stop after too many, detect spikes. False if it rolled back."""
        import torch

        if not self.pending:
            return True
        pending, self.pending = self.pending, []
        rows = torch.stack([torch.cat([r.values, r.sq]) for r in pending])
        values = rows.tolist()  # the one device -> host read
        for r, (loss, norm, not_finite, *sq) in zip(pending, values, strict=True):
            if self.grad_stats and (row := self.grad_stats.row(r.step, loss, norm, sq)):
                self.log.event("grad_stats", r.step, **row)
            if not_finite:
                self._non_finite(st, r.step, loss, norm, [not math.isfinite(v) for v in sq])
            elif self._is_spike(st, loss):
                self._rollback(st, r.step, loss)
                return False
            else:
                st.bad_streak = 0
                st.ema_loss = loss if st.ema_loss is None else 0.95 * st.ema_loss + 0.05 * loss
        self.last_row = (pending[-1].step, values[-1][:3], pending[-1].lr)
        return True

    def _non_finite(self, st, step: int, loss: float, norm: float, bad) -> None:
        rules = self.rules
        st.bad_streak += 1
        names = [n for n, b in zip(self.param_names, bad, strict=True) if b]
        stop = rules.on_nan == "stop" or st.bad_streak >= rules.max_bad_steps
        self.log.event("nan", step=step, loss=loss, grad_norm=norm, bad_params=names,
                       action="stop" if stop else "skip", consecutive=st.bad_streak)
        self.log.say(f"step {step}: non-finite loss/gradients (loss {loss}, grad norm "
                     f"{norm}); skipped the update; bad gradients in: "
                     f"{', '.join(names[:8]) or 'none (loss only)'}")
        if stop:
            self.log.sync()
            why = ("--on-nan stop" if rules.on_nan == "stop"
                   else f"{st.bad_streak} consecutive non-finite steps")
            raise CollectiveError(
                f"stopped at step {step}: {why}; first bad parameters: "
                f"{', '.join(names[:5]) or 'none (the loss itself)'}. Lower --lr, raise "
                f"--warmup or lower --grad-clip; the last checkpoint is kept")

    def _is_spike(self, st, loss: float) -> bool:
        return (self.every_step and st.ema_loss is not None
                and st.step > self.rules.warmup and loss > self.rules.spike_factor * st.ema_loss
                and self.ckpt.last_step > 0)

    def _rollback(self, st, step: int, loss: float) -> None:
        """PaLM-style: back to the last checkpoint, half the learning rate, and skip the
        batches that led to the spike (the data position is not rewound)."""
        self.ckpt.wait()
        saved = self.restore(self.ckpt.latest())
        self.zero_grad()
        # Rows after the checkpoint describe steps that are being redone: drop them.
        self.log.cut_after(saved.step)
        docs = self.documents(saved.position, st.position) \
            if self.log.metrics is not None else None  # rank 0 writes the events
        self.log.event("rollback", step=step - 1, loss=loss, ema_loss=st.ema_loss,
                       from_step=step, to_step=saved.step,
                       skipped_windows=st.position - saved.position, position=saved.position,
                       documents=docs)
        self.log.say(f"step {step - 1}: loss spike {loss:.3f} (avg {st.ema_loss:.3f}); "
                     f"rolled back to step {saved.step} with half the learning rate")
        st.step, st.tokens, st.ema_loss = saved.step, saved.tokens, saved.ema_loss
        st.bad_streak = saved.bad_streak
        st.lr_scale *= 0.5
        if st.lr_scale < 1 / 16:
            raise CollectiveError(f"loss spikes persist after 4 rollbacks (now step {st.step}, "
                                  "lr x 1/32); lower --lr or check the data near this position")
