"""The GRPO-family policy loss: clipped surrogate, CISPO, SAPO, KL to the reference, and the loss normalisations.

Definitions follow ms-swift's GRPO trainer (`--loss_type`, `--epsilon`, `--epsilon_high`,
`--importance_sampling_level`, `--beta`, `--tau_pos`, `--tau_neg`) and TRL's `GRPOTrainer.compute_loss`,
which ms-swift builds on. Shapes: per-token tensors are (batch, seq) with `mask` marking completion tokens;
advantages are per sequence (batch,) or already per token (batch, seq).
"""
from __future__ import annotations

from typing import Literal, get_args

import torch

LossType = Literal["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "clip_cov", "kl_cov"]
ImportanceSamplingLevel = Literal["token", "sequence", "sequence_token"]

LOSS_TYPES = get_args(LossType)
# The normalisation each surrogate is reduced with (ms-swift's and TRL's pairing): CISPO's per-token REINFORCE
# weights every token of the step alike, as DAPO does; SAPO's soft gate replaces GRPO's clip, and keeps its
# per-sequence mean; verl's Clip-Cov and KL-Cov use its default token mean, dapo's here.
_AGGREGATION = {"cispo": "dapo", "sapo": "grpo", "clip_cov": "dapo", "kl_cov": "dapo"}


def aggregation_of(loss_type: LossType) -> LossType:
    """The loss type whose normalisation `loss_type` uses (itself for the four that define one)."""
    return _AGGREGATION.get(loss_type, loss_type)
IMPORTANCE_SAMPLING_LEVELS = get_args(ImportanceSamplingLevel)

# ms-swift clamps the reference log-ratio and the k3 value for numerical safety: exp(20) is
# already 5e8, and a token 10 nats of KL away from the reference is a broken run either way.
_KL_LOG_RATIO_BOUND = 20.0
_KL_VALUE_BOUND = 10.0


def _masked_fill_zero(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    # `where` rather than `x * mask`: padding positions may hold inf/NaN log-probs, and
    # NaN * 0 is NaN, which would poison every sum (and gradient) it touches.
    return torch.where(mask, x, torch.zeros_like(x))


def k3_kl(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi_theta || pi_ref) on tokens sampled from pi_theta.

    `exp(ref - logp) - (ref - logp) - 1` (Schulman's k3): unbiased, never negative, and much
    lower variance than the plain log-ratio, which is why GRPO uses it as its KL penalty.
    Clamped as ms-swift does (log-ratio to +-20, value to <= 10).
    """
    d = torch.clamp(ref_logps - logps, min=-_KL_LOG_RATIO_BOUND, max=_KL_LOG_RATIO_BOUND)
    return torch.clamp(torch.exp(d) - d - 1, min=-_KL_VALUE_BOUND, max=_KL_VALUE_BOUND)


def importance_ratio(logps: torch.Tensor, old_logps: torch.Tensor, mask: torch.Tensor,
                     level: ImportanceSamplingLevel = "token") -> torch.Tensor:
    """pi_theta / pi_old per token, (batch, seq), at token or GSPO sequence level (ms-swift's
    `--importance_sampling_level`).

    "token": `exp(logp_t - old_t)`, the PPO/GRPO ratio.

    "sequence" (GSPO): `s_i = exp(mean_t(logp_t - old_t))`, the length-normalised sequence likelihood ratio,
    because the reward is per sequence and a per-token ratio, each from a single sample, is mostly noise. It is
    one number per sequence broadcast over its tokens, as ms-swift's (batch, 1) ratio is, with the gradient
    flowing through the mean: d s_i / d logp_t = s_i / |y_i| for every token, whatever the token's own weight.
    So when the per-token terms carry different multipliers (the entropy mask, rollout IS weights, the
    `--rollout_rs` mask, OPD's per-token advantages), each token's gradient is the sequence's average of them,
    as in ms-swift, not its own.

    "sequence_token" (GSPO-token): the stop-gradient form `sg[s_i] * exp(logp_t - sg[logp_t])`, the same value,
    but the gradient with respect to `logp_t` is `s_i` times that token's own multiplier. It equals "sequence"
    only while every token of a sequence has the same multiplier (ms-swift's two levels, kept apart).
    """
    mask = mask.bool()
    logps = _masked_fill_zero(logps, mask)
    log_ratio = _masked_fill_zero(logps - old_logps, mask)
    if level == "token":
        return torch.exp(log_ratio)
    if level in ("sequence", "sequence_token"):
        seq_log_ratio = (log_ratio.sum(-1) / mask.sum(-1).clamp(min=1)).unsqueeze(-1)
        if level == "sequence":
            return torch.exp(seq_log_ratio).expand_as(logps)
        log_weight = logps - logps.detach() + seq_log_ratio.detach()
        return torch.exp(_masked_fill_zero(log_weight, mask))
    raise ValueError(f"importance_sampling_level must be one of {IMPORTANCE_SAMPLING_LEVELS}, got {level!r}")


def aggregate(per_token_loss: torch.Tensor, mask: torch.Tensor, loss_type: LossType, *,
              max_completion_length: int | None = None,
              num_items_in_batch: float | torch.Tensor | None = None,
              num_processes: int = 1, rows: torch.Tensor | None = None) -> torch.Tensor:
    """Reduce a (batch, seq) per-token loss to a scalar; the loss types differ only here.

    - grpo: mean over each sequence's tokens, then mean over sequences. Every sequence weighs
      the same, so a token of a short answer counts more than one of a long answer (the length
      bias DAPO and Dr. GRPO point out).
    - bnpo: sum / the completion-token count of this micro-batch. Every token of a micro-batch weighs
      the same; a micro-batch with fewer tokens gets larger per-token weights.
    - dr_grpo: sum / (batch * max_completion_length). A constant denominator, so no length bias
      at all and no dependence on what else is in the batch.
    - dapo: sum / the token count of the whole optimizer step, so every token of the step weighs
      the same however tokens are spread over ranks and accumulation steps.

    bnpo and dapo take that count as `num_items_in_batch`, summed over all processes (for dapo also
    over the micro-batches of the optimizer step, which may come from two generation batches), and
    divide it here by `num_processes` because DDP averages gradients over processes: the effective
    denominator is then the global count. The trainer counts the completion mask before the off-policy
    sequence mask narrows it, so a sequence that mask drops still counts (`correction.py`). With
    `num_items_in_batch` left None the local count of `mask` is used (one process, and dapo with one
    micro-batch, then equals bnpo). The caller must not divide the dapo loss by the accumulation steps
    again; for the other types that division is the caller's job, as in TRL.

    `rows` (bool (batch,), default all): the sequences that are in the batch for grpo's mean over sequences
    and dr_grpo's batch size. A completion without a valid reward is not (the trainer zeroes its mask too, so
    it is in no token count either): it is as if it had not been generated. A sequence that is in the batch but
    has no token left (the off-policy sequence mask, the overlong filter, a rejected sequence) counts with 0,
    as in TRL and ms-swift.

    bnpo deliberately deviates from TRL here: TRL normalises by the *local* micro-batch's tokens, so
    with several processes each rank's tokens weigh by that rank's own count and the update depends on
    how the global batch happens to be split across ranks; it cannot match one process training on the
    same batch. Counting the micro-batch's tokens on all ranks gives the update of one process whose
    micro-batch is the union of the ranks' micro-batches (which the trainer's sampler arranges).
    """
    mask = mask.bool() if rows is None else mask.bool() & rows.bool().unsqueeze(-1)
    summed = _masked_fill_zero(per_token_loss, mask)
    loss_type = aggregation_of(loss_type)
    sequences = per_token_loss.shape[0] if rows is None else rows.bool().sum().clamp(min=1)
    if loss_type == "grpo":
        return (summed.sum(-1) / mask.sum(-1).clamp(min=1)).sum() / sequences
    if loss_type == "dr_grpo":
        if max_completion_length is None:
            raise ValueError("loss_type='dr_grpo' needs max_completion_length")
        return summed.sum() / (sequences * max_completion_length)
    if loss_type in ("bnpo", "dapo"):
        if num_items_in_batch is None:
            normaliser = mask.sum().clamp(min=1)
        else:
            normaliser = torch.as_tensor(num_items_in_batch, dtype=per_token_loss.dtype,
                                         device=per_token_loss.device).clamp(min=1) / num_processes
        return summed.sum() / normaliser
    raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return _masked_fill_zero(x, mask).sum() / mask.sum().clamp(min=1)


def surrogate_loss(ratio: torch.Tensor, logps: torch.Tensor, advantages: torch.Tensor, loss_type: LossType, *,
                   epsilon_low: float, epsilon_high: float, tau_pos: float = 1.0, tau_neg: float = 1.05,
                   old_logps: torch.Tensor | None = None, kl_cov_tokens: torch.Tensor | None = None,
                   ppo_kl_coef: float = 1.0) -> torch.Tensor:
    """The per-token policy term of each loss type, before the KL, the rollout correction and the reduction
    (see `policy_loss` for what each is and why)."""
    if loss_type == "kl_cov":
        if old_logps is None or kl_cov_tokens is None:
            raise ValueError("loss_type='kl_cov' needs old_logps and the selected tokens (selection.kl_cov_mask)")
        penalty = ppo_kl_coef * (logps - old_logps).abs() * kl_cov_tokens.to(logps.dtype)
        return -advantages * ratio + penalty
    if loss_type == "cispo":
        return -torch.clamp(ratio, max=epsilon_high).detach() * advantages * logps
    if loss_type == "sapo":
        tau = torch.where(advantages > 0, torch.full_like(advantages, tau_pos), torch.full_like(advantages, tau_neg))
        return -torch.sigmoid(tau * (ratio - 1)) * (4.0 / tau) * advantages
    clipped_ratio = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    return -torch.min(ratio * advantages, clipped_ratio * advantages)


def policy_loss(logps: torch.Tensor, old_logps: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *,
                loss_type: LossType = "grpo", epsilon_low: float = 0.2, epsilon_high: float | None = None,
                tau_pos: float = 1.0, tau_neg: float = 1.05,
                importance_sampling_level: ImportanceSamplingLevel = "token",
                token_mask: torch.Tensor | None = None, kl_cov_tokens: torch.Tensor | None = None,
                ppo_kl_coef: float = 1.0,
                ref_logps: torch.Tensor | None = None, beta: float = 0.0,
                kl_logps: torch.Tensor | None = None,
                max_completion_length: int | None = None,
                rollout_is_weights: torch.Tensor | None = None,
                num_items_in_batch: float | torch.Tensor | None = None,
                num_processes: int = 1, rows: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GRPO-family loss and its clip/KL metrics.

    Per token: `-min(r * A, clip(r, 1 - epsilon_low, 1 + epsilon_high) * A)` with `r` from
    `importance_ratio`. The min makes the objective pessimistic: once `r` has moved past the
    bound in the direction the advantage rewards, the token stops contributing gradient, so
    one batch cannot push the policy far from the one that sampled it. Separate low and high
    bounds are DAPO's clip-higher: a larger `epsilon_high` (e.g. 0.28) lets low-probability
    tokens with positive advantage grow, which keeps entropy from collapsing.
    `epsilon_high=None` means symmetric (ms-swift's `--epsilon_high` default).

    The other surrogates (`surrogate_loss`): cispo, `-sg(min(r, epsilon_high)) * A * logp` (MiniMax-M1: the
    weight is clipped, not the token, so every token keeps a gradient; ms-swift suggests epsilon_high 5.0);
    sapo, `-sigmoid(tau * (r - 1)) * 4 / tau * A` with tau `tau_pos` where A > 0 and `tau_neg` elsewhere
    (a soft trust region: the gradient fades smoothly as r leaves 1 instead of stopping at a clip edge);
    clip_cov, GRPO's clipped surrogate with `token_mask` from `selection.clip_cov_mask`; kl_cov, the unclipped
    `-r * A` plus `ppo_kl_coef * |logp - old_logp|` on `kl_cov_tokens` (`selection.kl_cov_mask`), verl's.

    `token_mask` (entropy- or covariance-selected tokens, `selection.py`) zeroes the surrogate of the
    tokens it leaves out while they still count in the normaliser, as TRL and ms-swift apply theirs: the
    step stays the same size whatever share of tokens gets gradient.

    `beta > 0` adds `beta * k3_kl(kl_logps, ref_logps)` per token, keeping the policy near the
    reference model. `kl_logps` are the policy's log-probs on the reference's footing
    (temperature-scaled, without top-k/top-p: see `sampling.py`); they default to `logps`,
    which is the same thing when no top-k/top-p filter is on. `rollout_is_weights` (see `correction.rollout_is_weights`) then multiply
    the whole per-token loss, KL term included, as current ms-swift does (TRL multiplies before
    adding the KL); they are detached, being a correction for where the samples came from and
    not something to optimise. The result is reduced by `aggregate` (see there for the four
    normalisations, `num_items_in_batch` / `num_processes` and `rows`).

    `old_logps` are the log-probs of the policy that generated the batch as the *training*
    engine computes them; with one update per generation they equal `logps.detach()` and the
    ratio is exactly 1 in value (the gradient is then the plain policy gradient).

    Metrics (detached 0-dim tensors, so the trainer can all-reduce them before `.item()`):
    `clip_ratio/low_mean` (fraction of completion tokens where r < 1 - epsilon_low and A < 0,
    i.e. clipped from below), `clip_ratio/high_mean` (r > 1 + epsilon_high and A > 0),
    `clip_ratio/region_mean` (either), each a completion-token mean as in ms-swift (at
    sequence level every token of a sequence shares the sequence's ratio, so this is the
    token-weighted fraction of clipped sequences), and `kl` (completion-token mean of the
    per-token k3 KL) when beta > 0.
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    if epsilon_high is None:
        epsilon_high = epsilon_low
    mask = mask.bool()
    # Zero the padding first: inf/NaN there would not change the loss (it is masked) but would
    # turn gradients to NaN through exp (0 * NaN upstream of a `where` is still NaN).
    logps = _masked_fill_zero(logps, mask)
    old_logps = _masked_fill_zero(old_logps, mask)
    if ref_logps is not None:
        ref_logps = _masked_fill_zero(ref_logps, mask)
    kl_logps = logps if kl_logps is None else _masked_fill_zero(kl_logps, mask)
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    advantages = advantages.to(logps.dtype)

    ratio = importance_ratio(logps, old_logps, mask, importance_sampling_level)
    per_token_loss = surrogate_loss(ratio, logps, advantages, loss_type, epsilon_low=epsilon_low,
                                    epsilon_high=epsilon_high, tau_pos=tau_pos, tau_neg=tau_neg, old_logps=old_logps,
                                    kl_cov_tokens=kl_cov_tokens, ppo_kl_coef=ppo_kl_coef)
    if token_mask is not None:
        per_token_loss = per_token_loss * token_mask.to(per_token_loss.dtype)

    metrics: dict[str, torch.Tensor] = {}
    if beta != 0.0:
        if ref_logps is None:
            raise ValueError("beta != 0 needs ref_logps")
        per_token_kl = k3_kl(kl_logps, ref_logps)
        per_token_loss = per_token_loss + beta * per_token_kl
        metrics["kl"] = _masked_mean(per_token_kl.detach(), mask)
    if rollout_is_weights is not None:
        per_token_loss = per_token_loss * rollout_is_weights.detach().to(per_token_loss.dtype)

    loss = aggregate(per_token_loss, mask, loss_type, max_completion_length=max_completion_length,
                     num_items_in_batch=num_items_in_batch, num_processes=num_processes, rows=rows)

    with torch.no_grad():
        r = ratio.detach()
        if loss_type == "cispo":
            metrics["cispo_clip_ratio"] = _masked_mean(((r > epsilon_high) & (advantages > 0)).to(r.dtype), mask)
        low = (r < 1 - epsilon_low) & (advantages < 0)
        high = (r > 1 + epsilon_high) & (advantages > 0)
        metrics["clip_ratio/low_mean"] = _masked_mean(low.to(r.dtype), mask)
        metrics["clip_ratio/high_mean"] = _masked_mean(high.to(r.dtype), mask)
        metrics["clip_ratio/region_mean"] = _masked_mean((low | high).to(r.dtype), mask)
    return loss, metrics
