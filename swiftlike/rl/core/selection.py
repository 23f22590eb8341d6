"""Which completion tokens get a policy gradient: entropy-selected (`--top_entropy_quantile`) and
covariance-selected (`--loss_type clip_cov` / `kl_cov`, verl's Clip-Cov and KL-Cov).

Both come from one observation about RL on reasoning: a small share of tokens decides where a solution
goes. "Beyond the 80/20 rule" (Wang et al., 2025) finds the high-entropy "forking" tokens carry the useful
gradient, so training only the top 20% by entropy matches or beats training all; "The Entropy Mechanism of RL
for Reasoning LMs" (Cui et al., 2025) traces entropy collapse to the few tokens whose log-prob and advantage
covary most, and either stops their gradient (Clip-Cov) or pulls them back with a KL term (KL-Cov).

Every function here returns a mask over the (batch, seq) completion positions; the loss multiplies its
per-token surrogate by it and keeps its normaliser (`losses.policy_loss`'s `token_mask`), as TRL, ms-swift and
verl do. The entropy threshold is a quantile over the tokens of every rank (the caller gathers them), as TRL
computes it, so two processes select what one process would.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

# 1-D local values -> (every rank's, concatenated in rank order; this rank's slice of that)
Gather = Callable[[torch.Tensor], tuple[torch.Tensor, slice]]


def _same(values: torch.Tensor) -> tuple[torch.Tensor, slice]:
    return values, slice(0, values.numel())


def entropy_threshold(valid_entropies: torch.Tensor, top_quantile: float) -> torch.Tensor:
    """The entropy at or above which a token is in the top `top_quantile` share: the (1 - q) quantile of the
    completion tokens' entropies (linear interpolation, torch.quantile's and TRL's). `valid_entropies` is 1-D:
    every completion token of the micro-batch, gathered over ranks."""
    if not 0.0 < top_quantile <= 1.0:
        raise ValueError(f"top_entropy_quantile must be in (0, 1], got {top_quantile}")
    if valid_entropies.numel() == 0:
        return torch.tensor(float("inf"))
    return torch.quantile(valid_entropies.detach().float(), 1.0 - top_quantile)


def top_entropy_mask(entropies: torch.Tensor, mask: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """Completion tokens whose entropy is at least `threshold` (`entropy_threshold`); bool (batch, seq)."""
    return (entropies.detach() >= threshold.to(entropies.device)) & mask.bool()


def _per_token(advantages: torch.Tensor, logps: torch.Tensor) -> torch.Tensor:
    """Per-sequence (batch,) or per-token (batch, seq) advantages as a (batch, seq) float tensor."""
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    return advantages.expand_as(logps).detach().float()


def _centred_covariance(advantages: torch.Tensor, logps: torch.Tensor, mask: torch.Tensor,
                        gather: Gather) -> tuple[torch.Tensor, torch.Tensor, slice]:
    """Each token's term of cov(A, logp), (A - mean A)(logp - mean logp), with the means over the completion
    tokens of the micro-batch on every rank (`gather`: see `Gather`; identity in one process), as one process
    holding the whole micro-batch computes them. Returns the local terms (batch, seq), every rank's valid terms
    (1-D, rank order) and this rank's slice of those."""
    mask = mask.bool()
    adv = _per_token(advantages, logps)
    lp = logps.detach().float()
    (all_adv, mine), (all_lp, _) = gather(adv[mask]), gather(lp[mask])
    adv_mean = all_adv.mean() if all_adv.numel() else adv.new_zeros(())
    lp_mean = all_lp.mean() if all_lp.numel() else lp.new_zeros(())
    return (adv - adv_mean) * (lp - lp_mean), (all_adv - adv_mean) * (all_lp - lp_mean), mine


def clip_cov_mask(advantages: torch.Tensor, logps: torch.Tensor, old_logps: torch.Tensor, mask: torch.Tensor, *,
                  clip_ratio: float, lower: float, upper: float, epsilon_low: float, epsilon_high: float,
                  generator: torch.Generator | None = None, gather: Gather = _same) -> torch.Tensor:
    """Clip-Cov: 0 on a random `clip_ratio` share of the completion tokens (at least one) among those whose
    covariance term lies strictly between `lower` and `upper` and that PPO's clip has not already cut; 1
    elsewhere. Float (batch, seq): the surrogate is multiplied by it, so those tokens lose their gradient.

    Random rather than the top of the covariance: stopping exactly the largest terms every step would bias
    the update; a random share of the high-covariance band slows the collapse without picking a side. The
    share and the draw are over every rank's tokens (`gather`), with a `generator` seeded alike on every rank,
    so two processes stop the same tokens one process would (verl draws per rank, from its own tokens).
    """
    mask = mask.bool()
    cov, _, _ = _centred_covariance(advantages, logps, mask, gather)
    ratio = torch.exp(logps.detach() - old_logps.detach())
    adv = _per_token(advantages, logps)
    already_clipped = -adv * torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high) > -adv * ratio
    band = (cov > lower) & (cov < upper) & mask & ~already_clipped
    every_band, mine = gather(band[mask].float())
    keep_every = torch.ones(every_band.numel(), dtype=torch.float32)
    candidates = every_band.cpu().nonzero()[:, 0]
    if len(candidates):
        n = max(int(clip_ratio * every_band.numel()), 1)
        keep_every[candidates[torch.randperm(len(candidates), generator=generator)[:n]]] = 0.0
    keep = torch.ones_like(logps, dtype=torch.float32)
    keep[mask] = keep_every[mine].to(keep.device)
    return keep


def kl_cov_mask(advantages: torch.Tensor, logps: torch.Tensor, mask: torch.Tensor, *,
                kl_ratio: float, gather: Gather = _same) -> torch.Tensor:
    """KL-Cov: the `kl_ratio` share of completion tokens (at least one) with the largest covariance terms;
    bool (batch, seq). The loss adds `ppo_kl_coef * |logp - old_logp|` on exactly these, pulling back the
    tokens that drive entropy down fastest while leaving the rest unclipped. The share is of every rank's
    tokens, picked once from all of them (every rank picks the same), so two processes select what one would;
    exactly that many even when terms tie (a group whose rewards are all equal has advantage 0, and so a term
    of 0, on every token)."""
    mask = mask.bool()
    _, every, mine = _centred_covariance(advantages, logps, mask, gather)
    selected = torch.zeros_like(mask)
    if every.numel() == 0:
        return selected
    chosen = torch.zeros(every.numel(), dtype=torch.bool, device=every.device)
    chosen[torch.topk(every, max(int(kl_ratio * every.numel()), 1)).indices] = True
    selected[mask] = chosen[mine].to(mask.device)
    return selected
