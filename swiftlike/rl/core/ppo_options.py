"""PPO's option group: TRL's PPOConfig names and defaults as ms-swift passes them (`--num_ppo_epochs`, `--kl_coef`,
...), plus the critic's checkpoint. The rollout (vLLM, server mode, weight sync) and reward flags are GRPO's
groups, shared (options.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ...utils.fields import arg, check_choices
from .ppo import KlEstimator

PPO = ("ppo",)


@dataclass(frozen=True)
class PpoOptions:
    """PPO with a critic: how a rollout batch is cut and reused, the per-token KL penalty in the reward, GAE and
    the clipped policy and value losses."""

    num_ppo_epochs: int = arg(4, "ppo: passes over each rollout batch (TRL's num_ppo_epochs).", only=PPO)
    num_mini_batches: int = arg(1, "ppo: mini-batches a rollout batch is cut into, one optimizer step each. A "
                                "rollout batch is --per_device_train_batch_size x --gradient_accumulation_steps x "
                                "--num_mini_batches completions per process.", only=PPO)
    whiten_rewards: bool = arg(False, "ppo: scale the per-token rewards to unit variance over the batch (their mean "
                               "kept) before GAE.", only=PPO)
    kl_coef: float = arg(0.05, "ppo: weight of the per-token KL to the reference, subtracted from each token's "
                         "reward (0: no reference model).", only=PPO)
    kl_estimator: KlEstimator = arg("k1", "ppo: the per-token KL estimate: k1 (logp - ref_logp, unbiased) or k3 "
                                    "(lower variance, never negative).", only=PPO)
    cliprange: float = arg(0.2, "ppo: clip range of the policy's importance ratio.", only=PPO)
    cliprange_value: float = arg(0.2, "ppo: how far one update may move a value prediction from the one the "
                                 "advantages were computed with.", only=PPO)
    vf_coef: float = arg(0.1, "ppo: weight of the value loss in the total loss.", only=PPO)
    gamma: float = arg(1.0, "ppo: discount factor of GAE.", only=PPO)
    lam: float = arg(0.95, "ppo: lambda of GAE (1: Monte-Carlo returns minus the value; 0: one-step TD).",
                     only=PPO)
    missing_eos_penalty: float | None = arg(None, "ppo: subtracted from the score of a completion that did not "
                                            "end with the end-of-turn token (cut by the length limit); default "
                                            "none.", only=PPO)
    stop_token: Literal["eos"] | None = arg(None, "ppo: TRL's; our engines always end a completion at the "
                                            "end-of-turn token, so `eos` and the default behave alike.", only=PPO)
    local_rollout_forward_batch_size: int = arg(
        64, "ppo: most completions in one no-grad forward pass of the rollout phase (the critic's values, the "
        "old and reference log-probs); a micro-batch larger than this is scored in slices.", only=PPO)
    value_model: str | None = arg(None, "ppo: checkpoint the critic starts from (its backbone, and its one-label "
                                  "score head if it has one, else a fresh one). Default: the --reward_model, as "
                                  "ms-swift does; with no reward model, --model with a fresh value head.", only=PPO)
    value_model_type: str | None = arg(None, "ppo: model type of --value_model; default detected.", only=PPO)

    def __post_init__(self) -> None:
        check_choices(self)
        for name in ("num_ppo_epochs", "num_mini_batches", "local_rollout_forward_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be >= 1, got {getattr(self, name)}")
        for name in ("gamma", "lam"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"--{name} must be in [0, 1], got {getattr(self, name)}")
        for name in ("cliprange", "cliprange_value"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name} must be > 0, got {getattr(self, name)}")
        for name in ("kl_coef", "vf_coef"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name} must be >= 0, got {getattr(self, name)}")
        if self.missing_eos_penalty is not None and self.missing_eos_penalty < 0:
            raise ValueError(f"--missing_eos_penalty is subtracted from the score; it must be >= 0, got "
                             f"{self.missing_eos_penalty}")
