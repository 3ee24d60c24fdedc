"""The run's progress (`TrainState`, what a checkpoint's state.json restores) and one
step's numbers as the device holds them until the host settles them (`StepResult`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TrainState:
    """Everything about the run's progress; saved in and restored from state.json as is."""

    step: int = 0            # optimizer steps done (including skipped non-finite ones)
    tokens: int = 0          # tokens of the steps kept (a rollback takes its steps back)
    position: int = 0        # windows the job has consumed (never rewound)
    lr_scale: float = 1.0    # halved by each spike rollback
    bad_streak: int = 0      # consecutive non-finite steps
    ema_loss: float | None = None  # running mean of the loss, for spike detection

    @classmethod
    def from_checkpoint(cls, state: dict) -> TrainState:
        if "train_state" in state:
            return cls(**state["train_state"])
        return cls(step=state["step"], tokens=state["tokens"],  # before TrainState existed
                   position=state["data_position"], lr_scale=state["lr_scale"])


@dataclass
class StepResult:
    """One optimizer step's numbers, on the device until settled."""

    step: int                # 1-based
    lr: float
    values: object           # tensor [loss, grad_norm, not_finite]
    sq: object               # tensor (P,): each parameter's squared gradient norm
