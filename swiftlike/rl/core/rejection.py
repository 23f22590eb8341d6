"""Rejection sampling on the training-inference mismatch (`--rollout_rs`, `--rollout_rs_threshold`), after
verl's rollout-correction design ("When Speed Kills Stability", Liu, Li et al., 2025).

Importance weights (`correction.rollout_is_weights`) reweight every sample; some samples are so far off the
training policy that no bounded weight makes them useful, and the blog's "toxic tails" show a few of them can
swing a whole step. Rejection drops them instead: a token or a whole sequence whose divergence between the
training policy (pi_train, the old log-probs) and the rollout engine's (pi_rollout) is out of bounds gets no
loss. Each rule names a level and a divergence, `LEVEL_DIVERGENCE` with verl's option names:

- level `token` (each token on its own), `seq_sum` (the sequence's sum: the full likelihood ratio),
  `seq_mean` (its mean: the geometric-mean ratio, one threshold for every length), `seq_max` (its worst token).
- divergence, with `d = log(pi_train / pi_rollout)` per token, verl's estimators of KL(pi_rollout || pi_train): `k1`,
  `-d = log(pi_rollout / pi_train)` (its sum or mean at sequence level), kept when
  `log(lower) <= -d <= log(upper)`, i.e. `lower <= pi_rollout / pi_train <= upper`; `k2 = d^2 / 2` and
  `k3 = exp(d) - 1 - d` (Schulman's estimators, >= 0, so only an upper bound), kept when `<= upper`.

Thresholds: one per rule, comma-separated, or one for all; a k1 rule takes `LOWER_UPPER` (`0.5_2.0`) or one
number for the upper bound (lower = its reciprocal), k2/k3 one number. Several rules are ANDed. The flags carry
verl's names and so verl's meaning: a k1 bound is on pi_rollout / pi_train, the ratio verl's `token_k1` is the log
of (`compute_rollout_rejection_mask` in verl/trainer/ppo/rollout_corr_helper.py). With asymmetric bounds the
direction matters: `0.8_1.5` keeps a token the trainer finds up to 1.25x likelier than the engine did and up to
1.5x less likely.

A rejected token leaves the loss as verl's do: verl narrows the response mask with it, so the token neither
contributes nor counts in any normaliser, and the others keep their weight. The trainer narrows the completion
mask the same way (`corrected_policy_loss`) and counts the bnpo/dapo normalisers without the rejected tokens
(decided at sampling time from the old log-probs). Under `--rollout_bypass_mode` the rule compares the current
policy with the engine, in the loss pass itself, so those two normalisers, counted before that pass, still include
the tokens it rejects; grpo's per-sequence counts do not.
"""
from __future__ import annotations

import dataclasses
import math

import torch

from .correction import SAFETY_BOUND

ROLLOUT_RS_OPTIONS = ("token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
                      "seq_mean_k1", "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3")


@dataclasses.dataclass(frozen=True)
class RejectionRule:
    """One `--rollout_rs` option with its bounds; `lower` is None for k2/k3 (upper bound only)."""
    option: str
    upper: float
    lower: float | None = None

    @property
    def level(self) -> str:
        return self.option.rsplit("_", 1)[0]

    @property
    def divergence(self) -> str:
        return self.option.rsplit("_", 1)[1]


def parse_rollout_rs(options: str, thresholds: str | float | None) -> tuple[RejectionRule, ...]:
    """`--rollout_rs` and `--rollout_rs_threshold` as rules, or a ValueError naming the flag and the fix."""
    names = [o.strip() for o in options.split(",") if o.strip()]
    if not names:
        raise ValueError("--rollout_rs is empty; give one or more of " + ", ".join(ROLLOUT_RS_OPTIONS))
    unknown = [n for n in names if n not in ROLLOUT_RS_OPTIONS]
    if unknown:
        raise ValueError(f"--rollout_rs {', '.join(unknown)}: not an option; choose from "
                         + ", ".join(ROLLOUT_RS_OPTIONS))
    if thresholds is None:
        raise ValueError(f"--rollout_rs {options} needs --rollout_rs_threshold (e.g. 0.5_2.0 for a k1 rule, 0.01 "
                         "for k2/k3)")
    specs = [t.strip() for t in str(thresholds).split(",") if t.strip()]
    if len(specs) == 1:
        specs *= len(names)
    if len(specs) != len(names):
        raise ValueError(f"--rollout_rs_threshold gives {len(specs)} thresholds for {len(names)} --rollout_rs "
                         "options; give one for all or one per option, in the same order")
    return tuple(_rule(name, spec) for name, spec in dict(zip(names, specs)).items())


def _rule(option: str, spec: str) -> RejectionRule:
    try:
        bounds = [float(x) for x in spec.split("_")]
    except ValueError:
        raise ValueError(f"--rollout_rs_threshold {spec!r} for {option}: not a number or LOWER_UPPER pair") from None
    if option.endswith("k1"):
        if len(bounds) == 1 and bounds[0] > 0:
            bounds = [1.0 / bounds[0], bounds[0]]
        lower, upper = bounds if len(bounds) == 2 else (None, None)
        if lower is None or not 0 < lower <= 1 <= upper:
            raise ValueError(f"--rollout_rs_threshold {spec!r} for {option}: a ratio rule needs LOWER_UPPER with "
                             "0 < LOWER <= 1 <= UPPER (e.g. 0.5_2.0), or one UPPER >= 1")
        return RejectionRule(option, upper=upper, lower=lower)
    if len(bounds) != 1 or bounds[0] <= 0:
        raise ValueError(f"--rollout_rs_threshold {spec!r} for {option}: a k2/k3 rule takes one upper bound > 0")
    return RejectionRule(option, upper=bounds[0])


def _statistic(rule: RejectionRule, log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The rule's statistic per token (batch, seq) or per sequence (batch,): verl's, k1 as log(pi_rollout /
    pi_train); a sequence without completion tokens reads 0."""
    per_token = {"k1": -log_ratio, "k2": 0.5 * log_ratio ** 2,
                 "k3": torch.exp(log_ratio) - 1.0 - log_ratio}[rule.divergence]
    per_token = torch.where(mask, per_token, torch.zeros_like(per_token))
    if rule.level == "token":
        return per_token
    if rule.level == "seq_sum":
        return per_token.sum(-1)
    if rule.level == "seq_mean":
        return per_token.sum(-1) / mask.sum(-1).clamp(min=1)
    worst = torch.where(mask, per_token, torch.full_like(per_token, -math.inf)).amax(-1)
    return torch.where(mask.any(-1), worst, torch.zeros_like(worst))


def rollout_rejection_mask(train_logps: torch.Tensor, rollout_logps: torch.Tensor, mask: torch.Tensor,
                           rules: tuple[RejectionRule, ...]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Which completion tokens survive every rule: bool (batch, seq), False off the mask. `train_logps` and
    `rollout_logps` are log pi_train and log pi_rollout of the sampled tokens.

    Metrics (detached 0-dim tensors, `rollout_rs/` in the logs): per rule `<option>/masked_fraction` (of the
    completion tokens) and `<option>/seq_masked_fraction` (of the sequences losing any token), and the same
    two for all rules together, `masked_fraction` and `seq_masked_fraction`: how much was rejected and why.
    """
    mask = mask.bool()
    dtype = torch.promote_types(torch.promote_types(train_logps.dtype, rollout_logps.dtype), torch.float32)
    log_ratio = train_logps.detach().to(dtype) - rollout_logps.detach().to(dtype)
    log_ratio = torch.where(mask, log_ratio, torch.zeros_like(log_ratio)).clamp(-SAFETY_BOUND, SAFETY_BOUND)
    rows = mask.any(-1)
    keep_all = mask.clone()
    metrics: dict[str, torch.Tensor] = {}
    for rule in rules:
        stat = _statistic(rule, log_ratio, mask)
        if rule.divergence == "k1":
            keep = (stat >= math.log(rule.lower)) & (stat <= math.log(rule.upper))
        else:
            keep = stat <= rule.upper
        if keep.dim() == 1:
            keep = keep.unsqueeze(-1).expand_as(mask)
        keep = keep & mask
        metrics.update(_fractions(f"{rule.option}/", keep, mask, rows))
        keep_all &= keep
    metrics.update(_fractions("", keep_all, mask, rows))
    return keep_all, metrics


def _fractions(prefix: str, keep: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor) -> dict[str, torch.Tensor]:
    rejected = mask & ~keep
    tokens = rejected.sum().float() / mask.sum().clamp(min=1)
    sequences = (rejected.any(-1) & rows).sum().float() / rows.sum().clamp(min=1)
    return {f"{prefix}masked_fraction": tokens, f"{prefix}seq_masked_fraction": sequences}
