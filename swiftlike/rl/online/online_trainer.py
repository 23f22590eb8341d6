"""What GRPO and GKD share on transformers' Trainer: a rollout worker kept in step with the policy, metrics
collected between logs and combined over processes, the non-finite guard, and dropout off."""
from __future__ import annotations

from collections import defaultdict

import torch

from ...train.guard import NonFiniteGuard
from ...train.trainer import SwiftlikeTrainer
from ..core.options import PolicyTrainingOptions
from .distributed import reduce_metrics
from .rollout_worker import RolloutWorker


def load_policy(args, resolved, device: str):
    """The model GRPO or GKD trains, on the --train_backend it names (RlhfArguments)."""
    if args.train_backend == "megatron":
        from ...train.megatron import load_megatron_model
        return load_megatron_model(args, resolved, device)
    from ...train.tuner import prepare_model
    return prepare_model(args, resolved, device)


def release_policy(model) -> None:
    """Undo what `load_policy` set up for the whole process, at the end of the run however it ends: on the Megatron
    backend its parallel groups (megatron's process-wide registry) and the process group it started, so a second
    run in the same process (the Python API) sets up its own."""
    from ...train.megatron.model import MegatronCausalLM
    if isinstance(model, MegatronCausalLM):
        from ...train.megatron import destroy_parallel
        destroy_parallel()


def disable_dropout(model: torch.nn.Module) -> None:
    """Zero every dropout rate (nn.Dropout modules, PEFT's lora_dropout, attention-dropout attributes).

    RL compares log-probs of the same tokens taken at different times: old and reference log-probs in
    eval mode, the new ones in train mode. With dropout on, the importance ratio is not 1 before any
    update and the KL is not 0 at the start, so the clip and the KL act on noise (TRL's
    `disable_dropout`; same rule). Attention dropout in transformers is a float attribute read at
    call time, not a module, so it is zeroed too.
    """
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        if isinstance(getattr(module, "attention_dropout", None), float):
            module.attention_dropout = 0.0


def has_active_dropout(model: torch.nn.Module) -> bool:
    """Whether a forward pass in train mode differs from one in eval mode (what `disable_dropout` zeroes)."""
    return any((isinstance(module, torch.nn.Dropout) and module.p > 0)
               or (isinstance(getattr(module, "attention_dropout", None), float) and module.attention_dropout > 0)
               for module in model.modules())


class RolloutTrainer(SwiftlikeTrainer):
    """`policy_training`: what a non-finite step does and whether dropout is off; `worker` the RolloutWorker, or
    None when nothing is generated."""

    def __init__(self, *a, policy_training: PolicyTrainingOptions, worker: RolloutWorker | None, **kw):
        super().__init__(*a, **kw)
        self.worker = worker
        self._last_synced_step = -1
        self._metrics: dict[str, list[float]] = defaultdict(list)
        self.nonfinite = NonFiniteGuard(policy_training.on_nonfinite)
        self.add_callback(self.nonfinite)
        if policy_training.disable_dropout:
            disable_dropout(self.model)

    def _sync_weights(self) -> None:
        """Push the policy to the engine once per optimizer step, before its first generation."""
        if self.worker.needs_sync and self._last_synced_step != self.state.global_step:
            for k, v in self.worker.sync(self.accelerator.unwrap_model(self.model),
                                                  self.state.global_step).items():
                self._metrics[k].append(v)
            self._last_synced_step = self.state.global_step

    def _record(self, metrics: dict[str, torch.Tensor]) -> None:
        """Keep this micro-batch's metrics for the next log; a non-finite one goes to the guard instead."""
        for k, v in metrics.items():
            value = float(v)
            if self.nonfinite.check_metric(self.state.global_step + 1, k, value):
                self._metrics[k].append(value)

    def log(self, logs: dict, start_time: float | None = None) -> None:
        """A training log gets the metrics since the last one, averaged over time here and then combined over
        processes (`reduce_metrics`); every rank calls this at the same steps, as the Trainer does. The
        non-finite check reads the combined values, so every rank stops (or drops a metric) alike."""
        if "loss" in logs:
            step = self.state.global_step
            local = {k: sum(vals) / len(vals) for k, vals in self._metrics.items() if vals}
            logs.update({k: v for k, v in reduce_metrics(local).items() if self.nonfinite.check_metric(step, k, v)})
            self._metrics.clear()
            logs.update(self.nonfinite.metrics())  # loss and grad norm were checked where they were computed
            # The Trainer resets its loss accumulator by subtracting it from itself, which leaves a NaN a NaN:
            # after one skipped step every later logged loss would read NaN.
            if not bool(torch.isfinite(self._tr_loss).all()):
                self._tr_loss.zero_()
        super().log(logs, start_time)
