"""PPO with a critic: per-token rewards with the KL penalty folded in, GAE, whitening, the clipped policy and
value losses, and the critic's explained variance.

Definitions follow TRL's `PPOTrainer` (the one ms-swift's `--rlhf_type ppo` runs on; its last release is
trl 1.12.0, `trl.experimental.ppo`, removed in 1.13), by the PPOConfig names: `kl_coef`, `kl_estimator`,
`whiten_rewards`, `gamma`, `lam`, `cliprange`, `cliprange_value`, `vf_coef`. TRL writes them inline in its
training loop; here each is a function so that the trainer, the tests and any placement (colocated, served,
several ranks) compute them the same way.

Shapes: per-token tensors are (batch, seq) over the completion; `mask` marks the positions that count. A mask
may have holes, not only right padding: in a multi-turn trajectory the tool results between turns are not
sampled by the policy, so they get neither reward nor advantage, and GAE bridges them (the value after a hole is
the value of the next sampled token), as verl's multi-turn GAE does.
"""
from __future__ import annotations

from typing import Literal, get_args

import torch

KlEstimator = Literal["k1", "k3"]
KL_ESTIMATORS = get_args(KlEstimator)
# TRL's whitening epsilon, inside the square root; with advantages of any sensible scale it only matters for
# a batch whose advantages are all equal, which it maps to zeros instead of NaN.
WHITEN_EPS = 1e-8


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of the entries of `x` where `mask` is set (over `dim`, or all of them). `where`, not `x * mask`:
    a masked position may hold inf or NaN (a log-prob of a pad), and NaN * 0 is NaN."""
    mask = mask.bool()
    total = torch.where(mask, x, torch.zeros_like(x)).sum(dim=dim)
    return total / mask.sum(dim=dim).clamp(min=1)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of the entries of `x` where `mask` is set, Bessel-corrected by default (TRL's choice).

    Raises ValueError on fewer than two entries when unbiased: the variance of one number is not defined, and
    TRL's 0/0 there would whiten the whole batch into NaN. The fix is a larger mini-batch."""
    mask = mask.bool()
    count = mask.sum()
    mean = masked_mean(x, mask)
    variance = masked_mean((x - mean) ** 2, mask)
    if unbiased:
        if count < 2:
            raise ValueError(f"the variance of {int(count)} masked value(s) is undefined: whitening needs at "
                             "least two completion tokens per mini-batch (raise the batch size or "
                             "--max_completion_length)")
        variance = variance * count / (count - 1)
    return variance


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True,
                  stats: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """`(x - mean) / sqrt(var + 1e-8)` over the masked entries; with `shift_mean=False` the mean is added back
    (TRL whitens rewards that way, scaling them without moving their level). Masked-out entries are 0. `stats`:
    the (mean, unbiased variance) to use instead of this tensor's, e.g. those of the batch over every process."""
    mask = mask.bool()
    mean, variance = stats if stats is not None else (masked_mean(x, mask), masked_var(x, mask))
    whitened = (x - mean) * torch.rsqrt(variance + WHITEN_EPS)
    if not shift_mean:
        whitened = whitened + mean
    return torch.where(mask, whitened, torch.zeros_like(whitened))


def per_token_kl(logps: torch.Tensor, ref_logps: torch.Tensor, estimator: KlEstimator = "k1") -> torch.Tensor:
    """Single-sample estimate of KL(pi || pi_ref) at each sampled token: k1 = `logp - ref` (unbiased, may be
    negative), k3 = `exp(ref - logp) - 1 - (ref - logp)` (unbiased, never negative, lower variance)."""
    log_ratio = ref_logps - logps
    if estimator == "k1":
        return -log_ratio
    if estimator == "k3":
        return torch.expm1(log_ratio) - log_ratio
    raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")


def token_rewards(scores: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor, score_index: torch.Tensor,
                  kl_coef: float) -> torch.Tensor:
    """The per-token reward PPO's advantages are computed from: `-kl_coef * kl` at every masked token, plus each
    sequence's scalar score at `score_index` (one position per row).

    The score goes where the sequence ends, so GAE discounts it back over the tokens that earned it. We put it on
    the last sampled token; TRL puts it one position later (on the first pad, whose value it also trains), which
    `score_index` can express so that the two are compared on the same tensors."""
    mask = mask.bool()
    rewards = torch.where(mask, -kl_coef * kl, torch.zeros_like(kl))
    rows = torch.arange(rewards.shape[0], device=rewards.device)
    return rewards.index_put((rows, score_index.long()), scores.to(rewards.dtype), accumulate=True)


def last_token_index(mask: torch.Tensor) -> torch.Tensor:
    """Index of the last set position of each row of `mask` (0 for a row with none)."""
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    return torch.where(mask.bool(), positions, torch.zeros_like(positions)).amax(dim=1)


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float,
        ) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation over the masked tokens: `(advantages, returns)`, both 0 off the mask.

    `delta_t = r_t + gamma * V_next - V_t`, `A_t = delta_t + gamma * lam * A_next`, `returns = A + V`, where
    "next" is the next masked position of the row (0 after the last one). With gamma = lam = 1 the advantage is
    the Monte-Carlo return minus the value, and the return is the sum of the rewards still to come."""
    mask = mask.bool()
    rewards = torch.where(mask, rewards, torch.zeros_like(rewards))
    values = torch.where(mask, values, torch.zeros_like(values))
    next_value = torch.zeros_like(values[:, 0])
    next_advantage = torch.zeros_like(values[:, 0])
    advantages = torch.zeros_like(values)
    for t in reversed(range(values.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        advantage = delta + gamma * lam * next_advantage
        here = mask[:, t]
        advantages[:, t] = torch.where(here, advantage, torch.zeros_like(advantage))
        next_value = torch.where(here, values[:, t], next_value)
        next_advantage = torch.where(here, advantage, next_advantage)
    returns = torch.where(mask, advantages + values, torch.zeros_like(values))
    return advantages, returns


def _token_mean(x: torch.Tensor, mask: torch.Tensor, num_tokens: torch.Tensor | float | None) -> torch.Tensor:
    if num_tokens is None:
        return masked_mean(x, mask)
    return torch.where(mask, x, torch.zeros_like(x)).sum() / max(float(num_tokens), 1.0)


def clipped_policy_loss(logps: torch.Tensor, old_logps: torch.Tensor, advantages: torch.Tensor,
                        mask: torch.Tensor, cliprange: float, num_tokens: torch.Tensor | float | None = None,
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate, averaged over the masked tokens of the batch: `(loss, clip_fraction)`, the
    fraction of tokens where the clipped term was the larger loss (so its gradient was cut). `num_tokens`
    divides the sum instead of this batch's token count: several processes' micro-batches then add up to the
    loss of their union in one process."""
    mask = mask.bool()
    ratio = torch.exp(torch.where(mask, logps - old_logps, torch.zeros_like(logps)))
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)
    loss = _token_mean(torch.maximum(unclipped, clipped), mask, num_tokens)
    clip_fraction = masked_mean((clipped > unclipped).float(), mask)
    return loss, clip_fraction


def clipped_value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
                       cliprange_value: float, num_tokens: torch.Tensor | float | None = None,
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """The critic's clipped squared error, `0.5 * mean(max((V - R)^2, (clip(V, V_old +- c) - R)^2))` over the
    masked tokens: `(loss, clip_fraction)`. The clip keeps one update from moving a value estimate further than
    `cliprange_value` from the one the advantages were computed with."""
    mask = mask.bool()
    clipped_values = torch.clamp(values, old_values - cliprange_value, old_values + cliprange_value)
    unclipped = (values - returns) ** 2
    clipped = (clipped_values - returns) ** 2
    loss = 0.5 * _token_mean(torch.maximum(unclipped, clipped), mask, num_tokens)
    clip_fraction = masked_mean((clipped > unclipped).float(), mask)
    return loss, clip_fraction


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`1 - Var(returns - values) / Var(returns)` over the masked tokens: 1 for a critic that predicts the
    returns, 0 for one no better than their mean, negative for a worse one. NaN when the returns do not vary."""
    mask = mask.bool()
    return 1.0 - masked_var(returns - values, mask, unbiased=False) / masked_var(returns, mask, unbiased=False)
