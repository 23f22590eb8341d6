"""Log-probs of the sampled tokens taken from the final hidden states a chunk of rows at a time.

`sampling.selected_logps` takes the LM head's logits (rows, vocab). With unfiltered sampling it needs of them only
the log-sum-exp and the sampled token's logit per row, yet the plain path holds the whole float32 logits, their
log-softmax and the gradients of both: for 16 rows x 200 tokens over SmolLM2's 49k vocabulary that is 630 MB per
tensor, allocated, written and read several times a step. `linear_selected_logps` computes
`log_softmax(h W^T / T)[token]` from the hidden states `h` and the head's weight `W` a chunk of rows at a time, so
at most a chunk's logits exist at once.

Each row's log-prob depends on that row's hidden state alone, so the gradient with respect to it is the upstream
gradient times a vector known at forward time, `(onehot - p) W / T`. The forward pass computes it (one matmul per
chunk, the one the plain path's backward does) and keeps it, (rows, hidden) like the input, and the backward only
scales it. Recomputing the chunk's logits in the backward instead adds a third vocabulary-wide matmul: on 1024 rows
of SmolLM2's shapes on a 2-core CPU that took 2.96 s against 2.07 s precomputed (the plain path 2.7 s). The head's
weight gradient mixes every row, weighted by the upstream gradient, so when the weight trains (full fine-tuning with
a tied head; under LoRA the head is frozen) the backward recomputes each chunk's probabilities for it, accumulating
in float32. Precomputing in the forward pays the gradient's matmul even when nothing is backpropagated; the trainer
computes with gradients only what it backpropagates, and without them (old / reference log-probs) nothing is
precomputed.

The logits are the head's output in the model's dtype, then float32, as the head computes them on the logits path:
in float32 the two paths agree to rounding, values and gradients.

Libraries checked that did not serve. Liger-Kernel (not a dependency): its fused linear cross entropy is a Triton
GPU kernel for a loss, without a sampling temperature or per-token entropy; its chunked `LigerFusedLinearGRPOLoss`
takes a temperature but is a whole GRPO loss, with its own clipping, KL and normalisers, where our loss
(rl/core/losses.py: loss types, IS weights, rejection, the KL on unfiltered log-probs) takes per-token log-probs
as inputs. Apple's cut-cross-entropy is a Triton loss too. PyTorch 2.13's
`torch.nn.functional.linear_cross_entropy(reduction="none", options=...)` gives a chunked per-token cross entropy,
but without entropy or temperature (the input would be scaled by 1/T before the head, rounding differently in
bfloat16); on the CPU its default chunks of a few rows took 10x the plain path's time in the measurement above, and
with 256-row chunks it recomputes the logits in the backward (about 1.5x the plain path's time).

Only unfiltered sampling takes this path (top-k <= 0 or >= vocab and top-p 1, or greedy): top-k and top-p need the
whole sorted row to rebuild vLLM's kept set, which the logits path (`sampling.selected_logps`) does.
"""
from __future__ import annotations

import torch

from .sampling import SAMPLING_EPS, SampledLogps

# Rows per chunk: a chunk's float32 logits take about this many bytes (64 MiB, 341 rows of a 49k vocabulary).
CHUNK_BYTES = 64 << 20


def _chunk_logps(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                 temperature: float) -> torch.Tensor:
    """The chunk's float32 logits scaled by the temperature: the head's output in its dtype, then float32."""
    logits = torch.nn.functional.linear(hidden, weight, bias).float()
    return logits.div_(temperature) if temperature != 1.0 else logits


def _unit_grad_logits(logps: torch.Tensor, ids: torch.Tensor, temperature: float) -> torch.Tensor:
    """d log p(token) / d logits for an upstream gradient of 1, (onehot - p) / T, in place of `logps` (a chunk's
    scaled log-probs, float32)."""
    grad = logps.exp_().neg_()
    grad.scatter_add_(-1, ids.unsqueeze(-1), torch.ones_like(grad[:, :1]))
    return grad.div_(temperature) if temperature != 1.0 else grad


class ChunkedLinearLogps(torch.autograd.Function):
    """(chosen log-prob, entropy) per row of `log_softmax((hidden @ weight.T + bias) / temperature)`.

    Inputs: hidden (N, H), weight (V, H), bias (V,) or None, ids (N,), temperature (1.0 when greedy), rows per
    chunk, whether to compute the entropy (else an empty tensor), whether to precompute the hidden states'
    gradient (the caller passes `hidden.requires_grad and torch.is_grad_enabled()`). The entropy has no gradient.
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, ids, temperature, chunk, with_entropy, grad_hidden):
        n = hidden.shape[0]
        chosen = torch.empty(n, dtype=torch.float32, device=hidden.device)
        lse = torch.empty_like(chosen)
        entropy = torch.empty_like(chosen) if with_entropy else chosen.new_empty(0)
        unit_grad = torch.empty_like(hidden) if grad_hidden else None
        for start in range(0, n, chunk):
            rows = slice(start, start + chunk)
            logps = _chunk_logps(hidden[rows], weight, bias, temperature)
            lse[rows] = logps.logsumexp(-1)
            logps.sub_(lse[rows].unsqueeze(-1))
            chosen[rows] = logps.gather(-1, ids[rows].unsqueeze(-1)).squeeze(-1)
            if with_entropy:
                entropy[rows] = -(logps.exp() * logps).sum(-1)
            if grad_hidden:
                unit_grad[rows] = _unit_grad_logits(logps, ids[rows], temperature).to(weight.dtype) @ weight
        ctx.save_for_backward(hidden, weight, bias, ids, lse, unit_grad)
        ctx.temperature, ctx.chunk = temperature, chunk
        ctx.mark_non_differentiable(entropy)
        return chosen, entropy

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_chosen, _grad_entropy):
        hidden, weight, bias, ids, lse, unit_grad = ctx.saved_tensors
        need_hidden, need_weight, need_bias = ctx.needs_input_grad[:3]
        grad_hidden = (unit_grad * grad_chosen.unsqueeze(-1)).to(hidden.dtype) if need_hidden else None
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_weight else None
        grad_bias = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if need_bias else None
        if need_weight or need_bias:
            for start in range(0, hidden.shape[0], ctx.chunk):
                rows = slice(start, start + ctx.chunk)
                logps = _chunk_logps(hidden[rows], weight, bias, ctx.temperature).sub_(lse[rows].unsqueeze(-1))
                grad_logits = _unit_grad_logits(logps, ids[rows], ctx.temperature).mul_(grad_chosen[rows].unsqueeze(-1))
                if need_weight:
                    grad_weight.addmm_(grad_logits.T, hidden[rows].float())
                if need_bias:
                    grad_bias += grad_logits.sum(0)
        return (grad_hidden, None if grad_weight is None else grad_weight.to(weight.dtype),
                None if grad_bias is None else grad_bias.to(bias.dtype), None, None, None, None, None)


def linear_selected_logps(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                          token_ids: torch.Tensor, temperature: float = 1.0, *, with_entropy: bool = False,
                          with_unfiltered: bool = False, chunk_rows: int | None = None) -> SampledLogps:
    """`selected_logps(hidden @ weight.T + bias, token_ids, temperature)` for unfiltered sampling, in chunks.

    hidden (..., H) and token_ids (...) as the logits path's logits (..., V) and ids; the outputs are shaped like
    `token_ids`. A temperature below vLLM's 1e-5 is greedy: the unscaled log-softmax, as `selected_logps`. With no
    filter the sampling distribution is the unfiltered one, so `unfiltered` is `logps` itself (its gradient adds up
    in the same tensor, as on the logits path) and nothing is ever `forced`.
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    scale = 1.0 if temperature < SAMPLING_EPS else temperature
    flat = hidden.reshape(-1, hidden.shape[-1])
    ids = token_ids.long().reshape(-1)
    chunk = chunk_rows or max(1, CHUNK_BYTES // (4 * weight.shape[0]))
    grad_hidden = flat.requires_grad and torch.is_grad_enabled()
    chosen, entropy = ChunkedLinearLogps.apply(flat, weight, bias, ids, scale, chunk, with_entropy, grad_hidden)
    shape = token_ids.shape
    logps = chosen.reshape(shape)
    return SampledLogps(logps, torch.zeros(shape, dtype=torch.bool, device=logps.device),
                        logps if with_unfiltered else None, entropy.reshape(shape) if with_entropy else None)
