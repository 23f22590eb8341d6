"""Group-relative advantages (GRPO family) and the DAPO dynamic-sampling filter.

Rewards arrive flat, shape (num_prompts * num_generations,), with the completions of one prompt
contiguous: that is the order the repeat sampler (TRL's `RepeatSampler`, ms-swift's the same)
hands them out, so a `view(-1, num_generations)` recovers the groups.
"""
from __future__ import annotations

from typing import Literal, get_args

import torch

ScaleRewards = Literal["group", "batch", "none"]
SCALE_REWARDS = get_args(ScaleRewards)
# ms-swift's --advantage_estimator values; group_advantages computes grpo's (the others are not built).
AdvantageEstimator = Literal["grpo", "rloo", "reinforce_plus_plus"]

# TRL and ms-swift both add this to the std before dividing. It is not a tiny "avoid 0/0"
# epsilon: with rewards in [0, 1] it is what keeps a group whose completions differ by a hair
# from getting advantages of +-1 out of rounding noise.
STD_EPS = 1e-4


def _grouped(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D (one scalar per completion), got shape {tuple(rewards.shape)}")
    if num_generations < 1 or rewards.numel() % num_generations:
        raise ValueError(f"{rewards.numel()} rewards cannot be split into groups of num_generations="
                         f"{num_generations}")
    if not rewards.is_floating_point():
        rewards = rewards.float()
    return rewards.view(-1, num_generations)


def group_advantages(rewards: torch.Tensor, num_generations: int,
                     scale_rewards: ScaleRewards = "group") -> tuple[torch.Tensor, torch.Tensor]:
    """Advantage of each completion relative to the other completions of its prompt.

    GRPO has no value model, so the baseline is the mean reward of the prompt's own group:
    `A_i = r_i - mean(group)`. `scale_rewards` (ms-swift / TRL `--scale_rewards`) then picks the
    denominator:

    - "group": divide by the group's std (+1e-4). The original GRPO; every prompt gets the same
      advantage scale, which up-weights prompts whose rewards barely differ (Dr. GRPO's critique).
    - "batch": divide by the std of all rewards in the batch (+1e-4), still subtracting the group
      mean. Keeps one scale for the batch, so near-constant groups are not blown up.
    - "none": do not divide (Dr. GRPO). Advantages keep the reward's units.

    The std is the Bessel-corrected one (`torch.std`, as TRL's `nanstd` and ms-swift use); a
    group of one completion has std 0 here rather than NaN, as TRL does for eval with one
    generation.

    Returns `(advantages, group_std)`: advantages shaped like `rewards`, and the per-group std
    (num_prompts,) whatever `scale_rewards` is, because it is what the trainer logs
    (`frac_reward_zero_std`) and what dynamic sampling looks at.
    """
    grouped = _grouped(rewards, num_generations)
    flat = grouped.reshape(-1)
    mean = grouped.mean(dim=1)
    if num_generations > 1:
        group_std = grouped.std(dim=1)
    else:
        group_std = torch.zeros_like(mean)
    advantages = flat - mean.repeat_interleave(num_generations)
    if scale_rewards == "group":
        advantages = advantages / (group_std.repeat_interleave(num_generations) + STD_EPS)
    elif scale_rewards == "batch":
        batch_std = flat.std() if flat.numel() > 1 else torch.zeros((), dtype=flat.dtype, device=flat.device)
        advantages = advantages / (batch_std + STD_EPS)
    elif scale_rewards != "none":
        raise ValueError(f"scale_rewards must be 'group', 'batch' or 'none', got {scale_rewards!r}")
    return advantages, group_std


def groups_with_signal(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """Which groups carry a learning signal, for DAPO's dynamic sampling (`--dynamic_sample`).

    A group whose completions all got the same reward has zero advantage everywhere, so it adds
    nothing to the policy gradient but still dilutes the batch; DAPO drops such groups and
    resamples. ms-swift's criterion is "group reward std > 0". This tests `max > min` instead,
    which is the same condition in exact arithmetic but not in floating point: the mean of
    seven copies of 0.1 is not exactly 0.1, so `std()` of a constant group can come out as
    ~1e-8 and would wrongly count as "has signal".

    Returns a bool tensor (num_prompts,); a group of one completion never has signal.
    """
    grouped = _grouped(rewards, num_generations)
    return grouped.amax(dim=1) > grouped.amin(dim=1)


def select_groups(has_signal: torch.Tensor, needed: int) -> list[int]:
    """Group indices to train on after dynamic sampling: groups with signal first, in pool order.

    `has_signal` covers every group generated for this batch (the original ones first, then each
    resampling round's), and `needed` is the batch's group count. When fewer than `needed` groups
    have signal, the batch is filled with zero-std groups, again in pool order, so its size never
    changes. (ms-swift instead falls back to the whole original batch in that case, discarding what
    resampling found; keeping the groups with signal wastes none of the extra generation.)
    """
    if has_signal.numel() < needed:
        raise ValueError(f"{has_signal.numel()} groups cannot fill a batch of {needed}")
    flags = has_signal.tolist()
    with_signal = [i for i, s in enumerate(flags) if s]
    without = [i for i, s in enumerate(flags) if not s]
    return (with_signal + without)[:needed]
