"""Training-inference mismatch: diagnostics and rollout importance-sampling correction.

Completions are sampled by vLLM, but the loss is computed with the training engine's
log-probs. Even with identical weights the two differ (kernels, precision, batch
composition), so the samples are slightly off-policy for the model being trained. ms-swift
("Training-Inference-Mismatch" in its GRPO docs) logs how large the gap is (`mismatch_metrics`,
logged under `rollout_correction/`) and can reweight the loss by pi_train / pi_rollout
(`--rollout_importance_sampling_mode`, `--rollout_importance_sampling_threshold`), and can drop
stale negative samples (`--off_policy_sequence_mask_delta`). Definitions here follow
ms-swift's implementation of those options.

`train_logps` are the training engine's log-probs of the sampled tokens (ms-swift uses the
no-grad "old" log-probs computed right after generation); `rollout_logps` are the log-probs
vLLM returned while sampling (with `logprobs_mode="processed_logprobs"`, so temperature and
top-k/top-p are included; see `sampling.py`). Both (batch, seq), with `mask` marking
completion tokens.
"""
from __future__ import annotations

from typing import Literal, get_args

import torch

RolloutISMode = Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]
ROLLOUT_IS_MODES = get_args(RolloutISMode)

# ms-swift clamps log-ratios to +-20 before exponentiating: padding or a token vLLM gave ~0
# probability would otherwise overflow, and exp(20) ~ 5e8 is already "infinitely off-policy".
SAFETY_BOUND = 20.0


def _where(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(mask, x, torch.zeros_like(x))


def _masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    if dim is None:
        return _where(x, mask).sum() / mask.sum().clamp(min=1)
    return _where(x, mask).sum(dim) / mask.sum(dim).clamp(min=1)


def _log_ratio(train_logps: torch.Tensor, rollout_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log(pi_train / pi_rollout) per token, 0 off the mask, clamped to +-SAFETY_BOUND (float32, or
    float64 when an input is)."""
    dtype = torch.promote_types(torch.promote_types(train_logps.dtype, rollout_logps.dtype), torch.float32)
    lr = _where(train_logps.detach().to(dtype) - rollout_logps.detach().to(dtype), mask)
    return torch.clamp(lr, min=-SAFETY_BOUND, max=SAFETY_BOUND)


def sequence_log_ratio(train_logps: torch.Tensor, rollout_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log of the sequence-level IS ratio, (batch,): the *mean* token log-ratio.

    ms-swift's sequence ratio is the geometric mean of the token ratios,
    `(pi_train(y) / pi_rollout(y)) ** (1 / |y|)`, not the full product (TRL's
    `vllm_importance_sampling_mode="sequence_*"` uses the product, `exp(sum)`). The product
    is the unbiased sequence weight but grows exponentially with length, so any fixed
    threshold would mask nearly every long answer; the geometric mean keeps one threshold
    meaningful across lengths (the same reason GSPO length-normalises its ratio).
    """
    mask = mask.bool()
    return _masked_mean(_log_ratio(train_logps, rollout_logps, mask), mask, dim=-1)


def effective_sample_size(weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Normalised ESS of the masked weights, unclamped: (sum w)^2 / (n * sum w^2) = 1 / E[(w / E[w])^2]; logged as
    `ess_unclamped` (ms-swift's `ess` is `clamped_effective_sample_size`).

    Kish's effective sample size over n, in (0, 1]: the fraction of the n samples that still
    effectively count after weighting. 1 when all weights are equal (on-policy), 1/n when one weight
    carries everything, 0 when every weight is 0 (all masked out); 1 for an empty mask. It is
    scale-free: weights that are all tiny but equal still read 1, so read it beside
    `is_weight_mean`. Computed in float64 without epsilons, so it is exact for weights of any scale.
    """
    mask = mask.bool()
    w = _where(weights.detach().double(), mask)
    n = mask.sum()
    square_sum = w.square().sum()
    if n == 0:
        return torch.ones((), dtype=w.dtype, device=w.device)
    if square_sum == 0:
        return torch.zeros((), dtype=w.dtype, device=w.device)
    return w.sum().square() / (n * square_sum)


def clamped_effective_sample_size(weights: torch.Tensor, mask: torch.Tensor, threshold: float) -> torch.Tensor:
    """ms-swift's `ess`, logged under that name: 1 / E[(w / E[w])^2] over the completion tokens, with the weights
    clamped to [1 / threshold, threshold] (ms-swift's `_compute_is_correction_metrics`), i.e. the ESS over n.

    A metric with ms-swift's name is ms-swift's quantity, so charts of the two compare. The clamp bounds it
    from below: with threshold t it cannot read under 4t^2 / (1 + t^2)^2 (0.64 for t = 2), and a
    masked-to-zero weight is lifted to 1/t, so it says little about how many samples count; hence
    `effective_sample_size` beside it, as `ess_unclamped`. The 1e-8 and 1e-10 are ms-swift's guards against
    empty or zero batches.
    """
    mask = mask.bool()
    clamped = weights.clamp(min=1.0 / threshold, max=threshold)
    normalised = clamped / (_masked_mean(clamped, mask) + 1e-8)
    return 1.0 / _masked_mean(normalised.square(), mask).clamp(min=1e-10)


def mismatch_metrics(train_logps: torch.Tensor, rollout_logps: torch.Tensor, mask: torch.Tensor, *,
                     mode: RolloutISMode | None = None, threshold: float = 2.0) -> dict[str, torch.Tensor]:
    """How far the rollout engine's distribution is from the training engine's, on the sampled tokens.

    With rho_t = pi_train(y_t) / pi_rollout(y_t) and the tokens drawn from pi_rollout
    (token means are over all completion tokens of the batch; "per-sequence" values are
    averaged over the sequences that have at least one completion token):

    - `kl`: mean of (rollout_logp - train_logp), the K1 (plain log-ratio) estimate of
      KL(pi_rollout || pi_train). Unbiased but noisy, and can be negative on a finite batch.
    - `k3_kl`: mean of rho - log(rho) - 1, the K3 estimate of the same KL: never negative,
      lower variance (log-ratio clamped to +-20 and value to <= 10, as ms-swift does).
    - `training_ppl` / `rollout_ppl`: mean over sequences of exp(-mean token log-prob), with
      `training_log_ppl` / `rollout_log_ppl` the same without the exp.
    - `log_ppl_diff`: mean over sequences of (mean rollout logp - mean train logp), i.e. of
      log(PPL_train / PPL_rollout); positive means the trainer finds the samples less likely
      than the sampler did. Also `log_ppl_abs_diff`, `log_ppl_diff_max`, `log_ppl_diff_min`.
    - `ppl_ratio`: mean over sequences of exp(log_ppl_diff) = PPL_train / PPL_rollout.
    - `chi2_token`: E_token[rho^2] - 1, the chi^2 divergence, i.e. the variance of the token IS
      weights. `chi2_seq`: E_seq[rho_geo^2] - 1 with rho_geo the geometric-mean sequence ratio
      (ms-swift's choice, so it is on the same scale as chi2_token).
    - `is_weight_mean`, `ess`, `ess_unclamped`, `clipped_frac`: the IS-weight statistics of
      `rollout_is_weights(..., mode, threshold)` when `mode` is given (`ess` is ms-swift's, on the weights
      clamped to [1/threshold, threshold], see `clamped_effective_sample_size`; `ess_unclamped` Kish's on the
      weights as they are, `effective_sample_size`).
      With `mode=None` (only diagnosing, as ms-swift's `--log_rollout_offpolicy_metrics`)
      they describe the raw token weights rho_t instead: nothing is clipped, so `clipped_frac` is 0.

    All are 1 (ppl_ratio, ess, ess_unclamped) or 0 (the rest of the gaps) when the two engines agree. Values
    are detached 0-dim float32 tensors, to be all-reduced by the caller. They are computed in
    float64: engines that agree to ~1e-7 nats give k3 terms of ~1e-14, which float32's
    exp(d) - d - 1 rounds to exactly 0, hiding how close they are.
    """
    mask = mask.bool()
    train = train_logps.detach().double()
    rollout = rollout_logps.detach().double()
    rows = mask.any(dim=-1)  # sequences with at least one completion token
    metrics: dict[str, torch.Tensor] = {}

    mean_lp_train = _masked_mean(train, mask, dim=-1)[rows]
    mean_lp_rollout = _masked_mean(rollout, mask, dim=-1)[rows]
    metrics["training_log_ppl"] = (-mean_lp_train).mean()
    metrics["training_ppl"] = torch.exp(-mean_lp_train).mean()
    metrics["rollout_log_ppl"] = (-mean_lp_rollout).mean()
    metrics["rollout_ppl"] = torch.exp(-mean_lp_rollout).mean()

    log_ratio = _log_ratio(train, rollout, mask)
    metrics["kl"] = _masked_mean(-_where(train - rollout, mask), mask)
    metrics["k3_kl"] = _masked_mean(torch.clamp(torch.exp(log_ratio) - log_ratio - 1, min=-10, max=10), mask)

    log_ppl_diff = mean_lp_rollout - mean_lp_train
    metrics["log_ppl_diff"] = log_ppl_diff.mean()
    metrics["log_ppl_abs_diff"] = log_ppl_diff.abs().mean()
    metrics["log_ppl_diff_max"] = log_ppl_diff.max() if log_ppl_diff.numel() else log_ppl_diff.new_zeros(())
    metrics["log_ppl_diff_min"] = log_ppl_diff.min() if log_ppl_diff.numel() else log_ppl_diff.new_zeros(())
    metrics["ppl_ratio"] = torch.exp(log_ppl_diff).mean()

    metrics["chi2_token"] = _masked_mean(torch.exp(log_ratio).square(), mask) - 1.0
    seq_lr = torch.clamp(_masked_mean(log_ratio, mask, dim=-1)[rows], min=-SAFETY_BOUND, max=SAFETY_BOUND)
    metrics["chi2_seq"] = torch.exp(seq_lr).square().mean() - 1.0

    if mode is not None:
        _, _, is_metrics = rollout_is_weights(train, rollout, mask, mode=mode, threshold=threshold)
        metrics.update(is_metrics)
    else:
        weights = torch.exp(log_ratio)
        metrics.update(_is_weight_metrics(weights, mask, threshold))
        metrics["clipped_frac"] = torch.zeros((), dtype=weights.dtype, device=weights.device)
    return {k: v.float() for k, v in metrics.items()}


def _is_weight_metrics(weights: torch.Tensor, mask: torch.Tensor, threshold: float) -> dict[str, torch.Tensor]:
    return {
        "is_weight_mean": _masked_mean(weights, mask),
        "ess": clamped_effective_sample_size(weights, mask, threshold),
        "ess_unclamped": effective_sample_size(weights, mask),
    }


def rollout_is_weights(train_logps: torch.Tensor, rollout_logps: torch.Tensor, mask: torch.Tensor, *,
                       mode: RolloutISMode, threshold: float = 2.0
                       ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """Importance weights pi_train / pi_rollout that make the loss on vLLM's samples target pi_train.

    The loss is an expectation under the training policy but the samples come from vLLM's;
    weighting each term by rho corrects that. Raw rho has unbounded variance (one token vLLM
    found unlikely but the trainer did not can get a huge weight), so ms-swift bounds it from
    above at `threshold` (`--rollout_importance_sampling_threshold`, default 2), in one of
    four ways (`--rollout_importance_sampling_mode`):

    - token_truncate: w_t = min(rho_t, threshold). Keeps every token, caps its influence
      (truncated IS: a little bias for bounded variance).
    - token_mask: w_t = rho_t if rho_t <= threshold else 0. Drops the tokens the sampler
      under-sampled badly, keeps the others exactly weighted (masked IS).
    - sequence_truncate: every token of sequence i gets min(rho_i, threshold), with rho_i the
      geometric mean of its token ratios (see `sequence_log_ratio`).
    - sequence_mask: sequences with rho_i > threshold are dropped (all weights 0); the tokens
      of the kept sequences keep their *token* ratios rho_t, not rho_i (this is what ms-swift
      does).

    A weight exactly at the threshold is kept in all modes (the tests are `<=`/`min`). Only
    the upper side is bounded, as in ms-swift (TRL also has a lower bound). Weights are
    detached float32, (batch, seq), 1 off the mask (padding is neutral).

    Returns `(weights, kept_mask, metrics)`. `kept_mask` is `mask` without the dropped tokens
    (mask modes) or `mask` itself (truncate modes). To reproduce ms-swift, multiply the
    per-token loss by `weights` (`policy_loss(..., rollout_is_weights=weights)`) and keep
    normalising by the original `mask`: dropped tokens then count in the denominator with zero
    loss. Passing `kept_mask` instead renormalises over the surviving tokens.

    Metrics: `is_weight_mean` (mean final weight over completion tokens), `ess` (ms-swift's: the
    normalised ESS of the final weights clamped to [1/threshold, threshold]), `ess_unclamped`
    (`effective_sample_size` of the final weights as they are) and `clipped_frac` (token modes: fraction of
    completion tokens truncated/masked; sequence modes: fraction of sequences with rho_i > threshold).
    """
    if mode not in ROLLOUT_IS_MODES:
        raise ValueError(f"rollout_importance_sampling_mode must be one of {ROLLOUT_IS_MODES}, got {mode!r}")
    if threshold <= 0:
        raise ValueError(f"rollout_importance_sampling_threshold must be > 0, got {threshold}")
    mask = mask.bool()
    token_ratio = torch.exp(_log_ratio(train_logps, rollout_logps, mask))
    kept_mask = mask
    if mode == "token_truncate":
        weights = token_ratio.clamp(max=threshold)
        clipped = _masked_mean((token_ratio > threshold).float(), mask)
    elif mode == "token_mask":
        keep = token_ratio <= threshold
        weights = torch.where(keep, token_ratio, torch.zeros_like(token_ratio))
        kept_mask = mask & keep
        clipped = _masked_mean((~keep).float(), mask)
    else:
        seq_ratio = torch.exp(sequence_log_ratio(train_logps, rollout_logps, mask))
        rows = mask.any(dim=-1)
        over = seq_ratio > threshold
        clipped = over[rows].float().mean() if rows.any() else seq_ratio.new_zeros(())
        if mode == "sequence_truncate":
            weights = seq_ratio.clamp(max=threshold).unsqueeze(-1).expand_as(token_ratio).clone()
        else:  # sequence_mask
            keep = ~over
            weights = token_ratio * keep.unsqueeze(-1).to(token_ratio.dtype)
            kept_mask = mask & keep.unsqueeze(-1)
    weights = torch.where(mask, weights, torch.ones_like(weights))
    metrics = _is_weight_metrics(weights, mask, threshold)
    metrics["clipped_frac"] = clipped
    return weights, kept_mask, metrics


def off_policy_sequence_mask(logps: torch.Tensor, old_logps: torch.Tensor, mask: torch.Tensor,
                             advantages: torch.Tensor, delta: float) -> torch.Tensor:
    """Which sequences to keep under `--off_policy_sequence_mask_delta` (DeepSeek-V3.2's OPSM).

    A sequence is dropped when both `mean_t(old_logp_t - logp_t) > delta` (the current policy
    has already moved away from it: it now finds the sample less likely than the policy that
    generated it did, by more than delta nats per token on average; this is a per-sequence
    K1 estimate of KL(pi_old || pi_theta)) and its advantage is negative. Such a sample is a
    stale bad answer the policy no longer produces; pushing its probability down further
    mostly adds off-policy noise. Positive-advantage sequences are always kept, and a mean
    exactly equal to delta is kept (strict `>`), as in ms-swift.

    `old_logps` should be the rollout engine's log-probs when available (so the mask also
    catches training-inference mismatch), else the old training log-probs, as ms-swift does.
    `advantages` are (batch,) or per token (batch, seq), reduced to their per-sequence mean
    over the mask. Returns bool (batch,), True = keep; the trainer ANDs it into the
    completion mask, so a dropped sequence contributes no loss. It stays in every normaliser
    (see `losses.aggregate`): grpo still counts it as one of the batch's sequences (with a zero
    mean); dr_grpo's denominator is a constant; bnpo's and dapo's token counts (`num_items_in_batch`,
    the micro-batch's and the optimizer step's) are taken by the trainer from the completion mask
    before this mask narrows it, so they keep counting the dropped tokens. Dropping a stale sample
    therefore lowers the step's effective size rather than up-weighting the rest.
    """
    mask = mask.bool()
    drift = _masked_mean(old_logps.detach().float() - logps.detach().float(), mask, dim=-1)
    if advantages.dim() == 2:
        advantages = _masked_mean(advantages.detach().float(), mask, dim=-1)
    return ~((drift > delta) & (advantages < 0))
