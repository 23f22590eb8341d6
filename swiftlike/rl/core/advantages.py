"""Group-relative advantages (GRPO, RLOO, REINFORCE++, GDPO scaling) and the DAPO dynamic-sampling filter.

Rewards arrive flat, shape (num_prompts * num_generations,), with the completions of one prompt
contiguous: that is the order the repeat sampler (TRL's `RepeatSampler`, ms-swift's the same)
hands them out, so a `view(-1, num_generations)` recovers the groups.

A completion may have no valid reward (`valid` False: a judge reply without a score, or a group dropped because a
reward server failed). Such a reward is not a 0: it is left out of its group's mean and std and of the batch
statistics, and the completion gets advantage 0, so it gives no policy-gradient signal. A group with one valid
reward has nothing to compare it with (advantage 0 too); a group with none is all zeros, never NaN.
"""
from __future__ import annotations

import math
from typing import Literal, get_args

import torch

from .losses import k3_kl

ScaleRewards = Literal["group", "batch", "none", "gdpo"]
SCALE_REWARDS = get_args(ScaleRewards)
# ms-swift's --advantage_estimator values.
AdvantageEstimator = Literal["grpo", "rloo", "reinforce_plus_plus"]
ADVANTAGE_ESTIMATORS = get_args(AdvantageEstimator)

# TRL and ms-swift both add this to the std before dividing. It is not a tiny "avoid 0/0"
# epsilon: with rewards in [0, 1] it is what keeps a group whose completions differ by a hair
# from getting advantages of +-1 out of rounding noise.
STD_EPS = 1e-4
# GDPO's own epsilon (ms-swift's): each reward function's group z-score, then the batch z-score of their sum.
GDPO_EPS = 1e-8


def default_scale_rewards(estimator: AdvantageEstimator) -> ScaleRewards:
    """ms-swift's --scale_rewards default per estimator: each paper's own normalisation (GRPO divides by the
    group std, RLOO's leave-one-out baseline is used unscaled, REINFORCE++ whitens over the batch)."""
    return {"grpo": "group", "rloo": "none", "reinforce_plus_plus": "batch"}[estimator]


def default_kl_in_reward(estimator: AdvantageEstimator) -> bool:
    """ms-swift's --kl_in_reward default: RLOO and REINFORCE++ fold the KL to the reference into the reward,
    as their papers do; GRPO keeps it as a loss term."""
    return estimator != "grpo"


def sequence_kl(old_logps: torch.Tensor, ref_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """KL to the reference of each sampled sequence, (batch,): the sum over its completion tokens of
    `old - ref` (k1, the single-sample estimate of KL(pi_old || pi_ref) on tokens drawn from pi_old).

    `--kl_in_reward` subtracts `beta` times this from the reward before the advantage (ms-swift's definition).
    The sum, not the mean: the reward is per sequence, and so is the log-likelihood ratio it penalises. k1
    rather than the loss's k3 because k1 summed over a sequence is exactly that ratio's log, unbiased; k3's
    per-token bias correction assumes an expectation over each token that a single sequence does not give."""
    mask = mask.bool()
    diff = old_logps.detach().float() - ref_logps.detach().float()
    return torch.where(mask, diff, torch.zeros_like(diff)).sum(-1)


def _grouped(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D (one scalar per completion), got shape {tuple(rewards.shape)}")
    if num_generations < 1 or rewards.numel() % num_generations:
        raise ValueError(f"{rewards.numel()} rewards cannot be split into groups of num_generations="
                         f"{num_generations}")
    if not rewards.is_floating_point():
        rewards = rewards.float()
    return rewards.view(-1, num_generations)


def _valid_mask(valid: torch.Tensor | None, grouped: torch.Tensor) -> torch.Tensor:
    """`valid` in the groups' shape (all True when None)."""
    if valid is None:
        return torch.ones_like(grouped, dtype=torch.bool)
    if valid.shape != (grouped.numel(),):
        raise ValueError(f"valid must hold one flag per reward ({grouped.numel()}), got shape {tuple(valid.shape)}")
    return valid.bool().view_as(grouped)


def _masked_mean_std(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and Bessel-corrected std of the entries of `x` where `mask` is set, over `dim` (None: all of them).
    0, not NaN, where fewer than two entries are set (a group of one, a group whose rewards are all missing)."""
    count = mask.sum() if dim is None else mask.sum(dim=dim, keepdim=True)
    mean = torch.where(mask, x, 0.0).sum(dim=dim, keepdim=dim is not None) / count.clamp(min=1)
    square = torch.where(mask, (x - mean) ** 2, 0.0).sum(dim=dim, keepdim=dim is not None)
    std = torch.sqrt(square / (count - 1).clamp(min=1))
    return (mean, std) if dim is None else (mean.squeeze(dim), std.squeeze(dim))


def _gdpo_z(x: torch.Tensor, present: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """GDPO's z-score `(x - mean) / (std + 1e-8)` of the present entries over `dim` (None: all of them), 0 off
    `present` and exactly 0 where the present entries are all equal.

    With an epsilon of 1e-8 the z-score amplifies rounding: eight float32 0.1s sum to a mean 7e-9 off 0.1, whose
    std of 8e-9 turns each value into a z-score of -0.41 (ms-swift gets 0 there only by the order its strided
    column happens to be summed in). The statistics are therefore taken in float64, where the mean of equal
    values is exact, and a set whose values are all equal, which carries no comparison, is 0 by construction."""
    x = x.double()
    mean, std = _masked_mean_std(x, present, dim)
    top, bottom = torch.where(present, x, -math.inf), torch.where(present, x, math.inf)
    if dim is None:
        spread = top.max() > bottom.min()
    else:
        mean, std = mean.unsqueeze(dim), std.unsqueeze(dim)
        spread = top.amax(dim=dim, keepdim=True) > bottom.amin(dim=dim, keepdim=True)
    return torch.where(present & spread, (x - mean) / (std + GDPO_EPS), 0.0)


def gdpo_advantages(per_func_rewards: torch.Tensor, reward_weights: torch.Tensor, num_generations: int,
                    valid: torch.Tensor | None = None) -> torch.Tensor:
    """GDPO (`--scale_rewards gdpo`): each reward function is z-scored within its group first, then the
    weighted sum is z-scored over the batch (ms-swift's `compute_advantages`, epsilons 1e-8 on both stds).

    Summing rewards before normalising lets the function with the widest spread decide every advantage; a 0/1
    accuracy next to a 0-0.2 format reward drowns it. Normalising each function in its group gives each the
    weight the user set. A NaN reward (the function does not apply to that row) counts as 0 after its
    group's z-score, as does every value of a group whose rewards for that function are all NaN or all equal
    (exactly 0, not rounding noise blown up by the epsilon: `_gdpo_z`). A row without a valid reward (`valid`
    False) is left out of every statistic and gets 0. `per_func_rewards` is (N, num_funcs), `reward_weights`
    (num_funcs,); the result is float32."""
    if per_func_rewards.dim() != 2 or per_func_rewards.shape[1] != reward_weights.numel():
        raise ValueError(f"per_func_rewards must be (N, {reward_weights.numel()}), got "
                         f"{tuple(per_func_rewards.shape)}")
    rows = torch.ones(per_func_rewards.shape[0], dtype=torch.bool) if valid is None else valid.bool()
    summed = torch.zeros(per_func_rewards.shape[0], dtype=torch.float64)
    for i in range(per_func_rewards.shape[1]):
        grouped = _grouped(per_func_rewards[:, i].double(), num_generations)
        present = ~grouped.isnan() & rows.view_as(grouped)
        summed += float(reward_weights[i]) * _gdpo_z(grouped, present, dim=1).reshape(-1)
    return _gdpo_z(summed, rows).float()


def group_advantages(rewards: torch.Tensor, num_generations: int, scale_rewards: ScaleRewards = "group",
                     estimator: AdvantageEstimator = "grpo", per_func_rewards: torch.Tensor | None = None,
                     reward_weights: torch.Tensor | None = None, valid: torch.Tensor | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantage of each completion relative to the other completions of its prompt.

    No value model, so the baseline comes from the prompt's own group. `estimator`
    (ms-swift's `--advantage_estimator`) picks the baseline and `scale_rewards` the denominator:

    - grpo: `A_i = r_i - mean(group)`.
    - rloo: the mean of the *other* completions, `A_i = r_i - mean_{j != i} r_j = K / (K - 1) * (r_i - mean)`:
      a baseline independent of `r_i`, so the estimate is unbiased. A group of one has no others: 0.
    - reinforce_plus_plus: `r_i - mean(group)` as grpo; only its batch scaling differs (below).

    Denominators (+1e-4, Bessel-corrected std):

    - "group": the group's reward std (the original GRPO; up-weights prompts whose rewards barely differ,
      Dr. GRPO's critique).
    - "batch": for grpo and rloo the std of all rewards in the batch; for reinforce_plus_plus the std of the
      group-centred advantages over the batch (REINFORCE++'s global whitening: the spread *within* groups,
      which the grpo form mixes with the spread *between* prompts' means).
    - "none": undivided (Dr. GRPO; RLOO's default).
    - "gdpo": `gdpo_advantages` on the per-function rewards, replacing the estimator's baseline (grpo only).

    A group of one completion has std 0 here rather than NaN, as TRL does for eval with one generation.

    `valid` (bool, shaped like `rewards`; default all True): which rewards exist. The others (any value, NaN
    included) are left out of every mean and std above, so `mean`, `K` and the leave-one-out baseline count the
    group's valid rewards only, and their advantage is 0.

    Returns `(advantages, group_std)`: advantages shaped like `rewards`, and the per-group std of the valid
    `rewards` (num_prompts,) whatever the settings, because it is what the trainer logs (`frac_reward_zero_std`)
    and what dynamic sampling looks at.
    """
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards must be one of {SCALE_REWARDS}, got {scale_rewards!r}")
    if estimator not in ADVANTAGE_ESTIMATORS:
        raise ValueError(f"advantage_estimator must be one of {ADVANTAGE_ESTIMATORS}, got {estimator!r}")
    grouped = _grouped(rewards, num_generations)
    mask = _valid_mask(valid, grouped)
    k = num_generations
    mean, group_std = _masked_mean_std(grouped, mask, dim=1)
    # 0 off the mask; a group with one valid reward is already 0 when centred: it has nothing to compare with
    centred = torch.where(mask, grouped - mean.unsqueeze(1), 0.0)
    if scale_rewards == "gdpo":
        if estimator != "grpo":
            raise ValueError("scale_rewards='gdpo' replaces the estimator's baseline; use advantage_estimator "
                             f"'grpo', not {estimator!r}")
        if per_func_rewards is None or reward_weights is None:
            raise ValueError("scale_rewards='gdpo' needs the per-function rewards and their weights")
        return gdpo_advantages(per_func_rewards, reward_weights, k, mask.reshape(-1)), group_std
    if estimator == "rloo":  # K / (K - 1) with K the group's valid rewards
        count = mask.sum(dim=1, keepdim=True)
        centred = centred * count / (count - 1).clamp(min=1)
    advantages = centred.reshape(-1)
    if scale_rewards == "group":
        advantages = advantages / (group_std.repeat_interleave(k) + STD_EPS)
    elif scale_rewards == "batch":
        spread = (torch.where(mask, grouped - mean.unsqueeze(1), 0.0) if estimator == "reinforce_plus_plus"
                  else grouped)
        advantages = advantages / (_masked_mean_std(spread, mask)[1] + STD_EPS)
    return advantages, group_std


def groups_with_signal(rewards: torch.Tensor, num_generations: int, valid: torch.Tensor | None = None) -> torch.Tensor:
    """Which groups carry a learning signal, for DAPO's dynamic sampling (`--dynamic_sample`).

    A group whose completions all got the same reward has zero advantage everywhere, so it adds
    nothing to the policy gradient but still dilutes the batch; DAPO drops such groups and
    resamples. ms-swift's criterion is "group reward std > 0". This tests `max > min` instead,
    which is the same condition in exact arithmetic but not in floating point: the mean of
    seven copies of 0.1 is not exactly 0.1, so `std()` of a constant group can come out as
    ~1e-8 and would wrongly count as "has signal".

    Only valid rewards count (`valid`, as in `group_advantages`): a group whose valid rewards are all equal, or
    that has fewer than two, has no signal.

    Returns a bool tensor (num_prompts,); a group of one completion never has signal.
    """
    grouped = _grouped(rewards, num_generations)
    mask = _valid_mask(valid, grouped)
    top = torch.where(mask, grouped, -math.inf).amax(dim=1)
    bottom = torch.where(mask, grouped, math.inf).amin(dim=1)
    return top > bottom


def whole_groups(rows: torch.Tensor, num_generations: int) -> torch.Tensor:
    """Every row of each group in which any of `rows` is set: a reward that failed drops its whole group
    (`--reward_on_error skip`), since the group's other rewards alone would give a baseline of a different group."""
    return rows.bool().view(-1, num_generations).any(dim=1).repeat_interleave(num_generations)


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


def teacher_token_advantages(advantages: torch.Tensor, teacher_logps: torch.Tensor, old_logps: torch.Tensor,
                             mask: torch.Tensor, teacher_kl_coef: float) -> torch.Tensor:
    """On-policy distillation inside GRPO (OPD-RL, ms-swift's `--teacher_model` with `--rlhf_type grpo`): the
    per-sequence advantage broadcast to each completion token, plus `teacher_kl_coef * (teacher_logp - old_logp)`
    there. (batch, seq), 0 off the mask.

    The teacher's log-ratio on the token the student sampled is the single-sample reverse-KL estimate (k1)
    with its sign flipped: used as a per-token reward it is the policy gradient of `-KL(student || teacher)`,
    so tokens the teacher finds likelier than the student are pushed up, one by one, where a sequence reward
    could only say the whole answer was good. With no reward functions the base advantage is 0 and this is
    pure distillation. k1 rather than k3: k3 is never negative, so as a reward it would only ever push down."""
    mask = mask.bool()
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    signal = teacher_logps.detach().float() - old_logps.detach().float()
    per_token = advantages.float() + teacher_kl_coef * torch.where(mask, signal, torch.zeros_like(signal))
    return torch.where(mask, per_token, torch.zeros_like(per_token))


def teacher_kl(teacher_logps: torch.Tensor, old_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean k3 estimate of KL(student || teacher) over the completion tokens: the `teacher_kl` metric, a
    distance that falls as the student nears the teacher (`losses.k3_kl`, the reference KL's estimator, with the
    teacher in the reference's place)."""
    mask = mask.bool()
    k3 = k3_kl(old_logps.detach().float(), teacher_logps.detach().float())
    return torch.where(mask, k3, torch.zeros_like(k3)).sum() / mask.sum().clamp(min=1)
