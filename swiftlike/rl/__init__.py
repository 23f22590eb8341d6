"""The math of GRPO-family RL (`swiftlike rlhf --rlhf_type grpo`) as small pure torch functions.

advantages: group-relative advantages and the DAPO dynamic-sampling filter.
losses: the clipped policy loss with clip-higher, GSPO sequence ratios, KL and the loss types.
correction: training-inference mismatch metrics, rollout IS weights, off-policy sequence mask.
sampling: vLLM's temperature / top-k / top-p distribution, to score tokens as vLLM sampled them.
rewards / plugins: reward functions by name (--reward_funcs) and user files that register more.
"""
from .advantages import group_advantages, groups_with_signal, select_groups
from .correction import (effective_sample_size, mismatch_metrics, off_policy_sequence_mask, rollout_is_weights,
                         sequence_log_ratio)
from .losses import aggregate, importance_ratio, k3_kl, policy_loss
from .plugins import load_external_plugins
from .rewards import (REWARD_REGISTRY, CosineReward, MathAccuracy, RepetitionPenalty, SoftOverlong,
                      build_reward_funcs, combine_rewards, format_hash_reward, format_reward, register_reward)
from .sampling import apply_temperature_and_filter, selected_logps

__all__ = [
    "REWARD_REGISTRY",
    "CosineReward",
    "MathAccuracy",
    "RepetitionPenalty",
    "SoftOverlong",
    "aggregate",
    "build_reward_funcs",
    "combine_rewards",
    "format_hash_reward",
    "format_reward",
    "load_external_plugins",
    "register_reward",
    "apply_temperature_and_filter",
    "effective_sample_size",
    "group_advantages",
    "groups_with_signal",
    "importance_ratio",
    "k3_kl",
    "mismatch_metrics",
    "off_policy_sequence_mask",
    "policy_loss",
    "rollout_is_weights",
    "select_groups",
    "selected_logps",
    "sequence_log_ratio",
]
