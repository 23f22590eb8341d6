"""Log-probs of the distribution vLLM actually samples from: temperature, then top-k, then top-p.

The importance ratios of GRPO compare the trainer's log-probs with the rollout engine's. vLLM,
run with `logprobs_mode="processed_logprobs"` (what ms-swift's rollout uses), returns the
log-probs of the distribution it sampled from: logits / temperature, restricted to the top-k /
top-p set and renormalised over it. If the trainer scored the same tokens with a plain
`log_softmax(logits)`, the two would disagree whenever temperature != 1 or a filter is on, and
the "mismatch" would be an artefact. These functions rebuild vLLM's processed distribution
from the trainer's logits, following vLLM v1's sampler (`vllm/v1/sample/sampler.py`) and its
PyTorch top-k/top-p path (`apply_top_k_top_p_pytorch` / `apply_top_k_only` in
`vllm/v1/sample/ops/topk_topp_sampler.py`):

1. logits in float32, divided by the temperature;
2. top-k: keep the logits >= the k-th largest value (so every token tied with the k-th is
   kept; `top_k` <= 0 or >= vocab size means off, as vLLM normalises it);
3. top-p on the softmax of what top-k kept (renormalised): sort ascending, cumulative sum,
   drop the tokens whose cumulative mass is <= 1 - top_p, never drop the most likely one.
   Equivalently: keep the smallest set of most-likely tokens whose mass reaches top_p;
   `top_p` = 1 means off;
4. log_softmax over the kept set (the rest get -inf).

Not modelled: min_p, logit bias and penalties (they run before top-k/top-p in vLLM), and
vLLM's Triton top-k/top-p kernel used on CUDA, which keeps exactly k tokens when several tie
with the k-th value (the PyTorch path, reproduced here, keeps them all). Ties at the top-p
boundary are broken by sort position, so exact ties can differ across devices; with real
float logits exact ties are rare.

The sampled token is always kept. vLLM sampled it, so it was in vLLM's set; but when the trainer's
logits differ from the engine's (bfloat16 kernels, other batch shapes, a policy that moved since
sampling), a token near the top-k / top-p boundary can fall just outside the set the trainer
rebuilds, and its log-prob would be -inf: the importance ratio becomes -inf - (-inf) = NaN and
poisons the whole step. The trainer's set is therefore widened by the one sampled token (and
renormalised over it); `SampledLogps.forced` marks where that happened, logged as
`sampling/forced_keep_frac`. This is the minimal change that keeps the log-prob finite and equal
to the exact value wherever the two sets agree on the token. The exact alternative is SLIME's
mask replay (the engine returns its kept set per position and the trainer reuses it), which
vLLM 0.32 offers only with Model Runner V2 (`return_sampling_mask`, Triton, GPU only): the
rule here approximates replay by assuming the two sets differ at most in the sampled token,
which holds when engine and trainer disagree by rounding rather than by policy drift.

`SampledLogps.unfiltered` is the temperature-scaled log-prob without top-k / top-p. The KL to
the reference model uses it on both sides (as TRL and ms-swift do, neither applies top-k/top-p
in the trainer): the reference's own top-k/top-p set need not contain a token the policy sampled,
and a filtered reference would put -inf there (infinite KL, clamped to a constant with zero
gradient). The unfiltered KL is the divergence of the two models, finite everywhere.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

# vLLM treats temperatures below this as greedy (`_SAMPLING_EPS` in its sampler).
SAMPLING_EPS = 1e-5


def _kept_set(scaled: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor | None:
    """Bool mask (rows, vocab) of the tokens vLLM can sample, or None when nothing is filtered."""
    vocab = scaled.shape[-1]
    use_k = 0 < top_k < vocab
    use_p = top_p < 1.0
    if not (use_k or use_p):
        return None
    with torch.no_grad():
        sorted_logits, order = scaled.sort(dim=-1, descending=False)
        keep_sorted = torch.ones_like(sorted_logits, dtype=torch.bool)
        if use_k:
            kth_largest = sorted_logits[:, vocab - top_k].unsqueeze(-1)
            keep_sorted &= sorted_logits >= kth_largest
        if use_p:
            probs = sorted_logits.masked_fill(~keep_sorted, float("-inf")).softmax(dim=-1)
            cumulative = probs.cumsum(dim=-1)
            # 1 - p in float32, as vLLM computes it from its float32 top_p tensor: the double
            # 1 - p rounds differently (0.1 vs 0.10000002 for p = 0.9) and would move the boundary.
            drop = cumulative <= 1 - torch.tensor(top_p, dtype=torch.float32, device=probs.device)
            drop[:, -1] = False  # at least one token survives
            keep_sorted &= ~drop
        return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)


def _check_sampling(temperature: float, top_p: float) -> None:
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")


def filters_vocabulary(temperature: float, top_k: int, top_p: float, vocab: int) -> bool:
    """Whether the sampling restricts the vocabulary (top-k / top-p on, not greedy), the rule `_kept_set` and
    `selected_logps` apply: without a filter the log-probs need no sorted logits and can be taken in chunks from
    the hidden states (chunked_logps.py)."""
    _check_sampling(temperature, top_p)
    return temperature >= SAMPLING_EPS and (0 < top_k < vocab or top_p < 1.0)


def apply_temperature_and_filter(logits: torch.Tensor, temperature: float = 1.0, top_k: int = -1,
                                 top_p: float = 1.0) -> torch.Tensor:
    """Log-probs (float32, same shape as `logits` (..., vocab)) of vLLM's sampling distribution.

    Tokens outside the top-k/top-p set get -inf. Differentiable with respect to `logits`
    through the kept tokens (which tokens are kept is a discrete choice and carries no
    gradient). A temperature below 1e-5 is greedy decoding in vLLM, for which it returns
    the unscaled, unfiltered `log_softmax(logits)` (what vLLM reports for an all-greedy batch).
    To score tokens that were actually sampled, use `selected_logps`, which keeps them.
    """
    _check_sampling(temperature, top_p)
    shape = logits.shape
    flat = logits.float().reshape(-1, shape[-1])
    if temperature < SAMPLING_EPS:
        return flat.log_softmax(dim=-1).reshape(shape)
    scaled = flat / temperature
    keep = _kept_set(scaled, top_k, top_p)
    if keep is not None:
        scaled = scaled.masked_fill(~keep, float("-inf"))
    return scaled.log_softmax(dim=-1).reshape(shape)


class SampledLogps(NamedTuple):
    """Per-token values for the chosen tokens, each shaped like `token_ids`."""

    logps: torch.Tensor  # log-prob under vLLM's sampling distribution, the sampled token kept
    forced: torch.Tensor  # bool: the trainer's top-k/top-p set lacked the sampled token and was widened
    unfiltered: torch.Tensor | None  # log_softmax(logits / temperature): what the reference KL compares
    entropy: torch.Tensor | None  # entropy (nats, no gradient) of the sampling distribution at each position


def selected_logps(logits: torch.Tensor, token_ids: torch.Tensor, temperature: float = 1.0, top_k: int = -1,
                   top_p: float = 1.0, with_entropy: bool = False, with_unfiltered: bool = False) -> SampledLogps:
    """Log-prob of each sampled token under vLLM's sampling distribution: logits (..., vocab), ids (...).

    The kept set always includes the sampled token (see the module docstring), so every value is
    finite for finite logits. Entropy and unfiltered log-probs come from the same pass over the
    vocabulary, so asking for them costs one extra log_softmax at most.
    """
    _check_sampling(temperature, top_p)
    shape = logits.shape
    flat = logits.float().reshape(-1, shape[-1])
    ids = token_ids.long().reshape(-1, 1)
    greedy = temperature < SAMPLING_EPS
    scaled = flat if greedy else flat / temperature
    keep = None if greedy else _kept_set(scaled, top_k, top_p)
    if keep is None:
        all_logps = scaled.log_softmax(dim=-1)
        unfiltered_all = all_logps
        forced = torch.zeros(ids.shape[0], dtype=torch.bool, device=flat.device)
    else:
        forced = ~keep.gather(-1, ids).squeeze(-1)
        keep = keep.scatter(-1, ids, True)
        all_logps = scaled.masked_fill(~keep, float("-inf")).log_softmax(dim=-1)
        unfiltered_all = scaled.log_softmax(dim=-1) if with_unfiltered else None  # a vocab-wide pass: only on demand
    out_shape = token_ids.shape
    chosen = all_logps.gather(-1, ids).reshape(out_shape)
    unfiltered = unfiltered_all.gather(-1, ids).reshape(out_shape) if with_unfiltered else None
    entropy = distribution_entropy(all_logps.detach()).reshape(out_shape) if with_entropy else None
    return SampledLogps(chosen, forced.reshape(out_shape), unfiltered, entropy)


def distribution_entropy(logps: torch.Tensor) -> torch.Tensor:
    """-sum p log p over the last dim; filtered-out tokens (-inf, p = 0) contribute 0, not NaN."""
    with torch.no_grad():
        terms = logps.exp() * logps
        return -torch.where(torch.isfinite(logps), terms, torch.zeros_like(terms)).sum(-1)
