"""TRL 1.16's own GRPO loss (`GRPOTrainer._compute_loss`) on given per-token log-probs, for comparing our loss
types with TRL's implementation rather than with a re-derivation.

The subclass replaces only the model's forward (`_get_per_token_logps_and_entropies`) with the tensors the
test hands in, and sets the attributes `_compute_loss` reads; everything from the log-probs on (ratios, the
CISPO / SAPO surrogates, the entropy mask, the normalisers, the metrics) is TRL's code, run in one process on
the CPU with a real `accelerate.Accelerator`."""
from __future__ import annotations

import types
from collections import defaultdict

import torch
from accelerate import Accelerator
from trl.trainer.grpo_trainer import GRPOTrainer


class TrlLoss(GRPOTrainer):
    def __init__(self, logps: torch.Tensor, entropies: torch.Tensor, *, loss_type: str, epsilon_low: float = 0.2,
                 epsilon_high: float = 0.2, tau_pos: float = 1.0, tau_neg: float = 1.05,
                 top_entropy_quantile: float = 1.0):
        self._given = (logps, entropies)
        self.accelerator = Accelerator(cpu=True)
        self.model = torch.nn.Linear(1, 1)  # only its .training is read
        self.args = types.SimpleNamespace(delta=None, sapo_temperature_pos=tau_pos, sapo_temperature_neg=tau_neg,
                                          use_bias_correction_kl=False, steps_per_generation=1)
        self.loss_type, self.epsilon_low, self.epsilon_high = loss_type, epsilon_low, epsilon_high
        self.beta = 0.0
        self.importance_sampling_level = "token"
        self.top_entropy_quantile = top_entropy_quantile
        self.off_policy_mask_threshold = None
        self.use_vllm = self.vllm_importance_sampling_correction = False
        self._entropy_bonus_enabled = self.aux_loss_enabled = False
        self.current_gradient_accumulation_steps = 1
        self.max_completion_length = logps.shape[1]
        self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        return self._given[0], self._given[1], None

    def loss(self, old_logps: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        rows, width = mask.shape
        inputs = {"prompt_ids": torch.zeros(rows, 1, dtype=torch.long),
                  "prompt_mask": torch.ones(rows, 1, dtype=torch.long),
                  "completion_ids": torch.zeros(rows, width, dtype=torch.long), "completion_mask": mask.long(),
                  "advantages": advantages, "old_per_token_logps": old_logps, "num_items_in_batch": mask.sum()}
        return self._compute_loss(None, inputs)
