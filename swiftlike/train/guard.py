"""Stop (or skip the update of) a training step whose loss, gradient norm or metrics are not finite.

transformers' Trainer lets such a step through: with its default `logging_nan_inf_filter` it even logs
the average of earlier losses in place of a NaN, so a run whose every step is NaN reads as a calm loss
curve and exits 0. A NaN gradient then reaches the optimizer and the weights. Nothing in the Trainer or
accelerate stops this on CPU (their overflow skipping belongs to fp16 loss scaling), hence this guard.
"""
from __future__ import annotations

import math
from typing import Literal

import torch
from transformers import TrainerCallback

from ..utils import get_logger

logger = get_logger("swiftlike.train")

NonFiniteAction = Literal["error", "skip"]


class NonFiniteError(RuntimeError):
    """A loss, gradient norm or metric was NaN or infinite (the message names the step and the value)."""


class NonFiniteGuard(TrainerCallback):
    """`error`: raise at the step that produced the value. `skip`: drop that step's update (gradients are
    cleared before the optimizer runs, so the weights and optimizer moments stay as they were; the
    learning-rate schedule still advances) and count it in `skipped_steps`; a non-finite metric is
    dropped from the log with a warning and counted in `dropped_metrics`."""

    def __init__(self, action: NonFiniteAction = "error"):
        if action not in ("error", "skip"):
            raise ValueError(f"non-finite action must be 'error' or 'skip', got {action!r}")
        self.action = action
        self.skipped_steps = 0
        self.dropped_metrics = 0
        self._bad_loss: str | None = None

    def _error(self, step: int, what: str) -> NonFiniteError:
        return NonFiniteError(f"step {step}: {what}. The run stops here rather than train on it; lower the learning "
                              "rate, check the data and rewards, or pass --on_nonfinite skip to drop such steps")

    def check_loss(self, step: int, loss: torch.Tensor) -> None:
        """Called with each micro-batch's loss before its backward pass."""
        if bool(torch.isfinite(loss.detach()).all()):
            return
        what = f"the loss is {float(loss.detach())}"
        if self.action == "error":
            raise self._error(step, what)
        self._bad_loss = what

    def check_metric(self, step: int, name: str, value: float) -> bool:
        """True if `value` may be logged."""
        if math.isfinite(value):
            return True
        if self.action == "error":
            raise self._error(step, f"metric {name} is {value}")
        self.dropped_metrics += 1
        logger.warning("step %d: metric %s is %s; left out of the log", step, name, value)
        return False

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        grads = [p.grad for p in model.parameters() if p.grad is not None] if model is not None else []
        norm = float(torch.nn.utils.get_total_norm(grads)) if grads else 0.0
        what = self._bad_loss or (None if math.isfinite(norm) else f"the gradient norm is {norm}")
        self._bad_loss = None
        if what is None:
            return
        step = state.global_step + 1
        if self.action == "error":
            raise self._error(step, what)
        model.zero_grad(set_to_none=True)
        self.skipped_steps += 1
        logger.warning("step %d: %s; the update is skipped (%d skipped so far)", step, what, self.skipped_steps)

    def metrics(self) -> dict[str, float]:
        if self.action == "error":
            return {}
        return {"nonfinite/skipped_steps": float(self.skipped_steps),
                "nonfinite/dropped_metrics": float(self.dropped_metrics)}
