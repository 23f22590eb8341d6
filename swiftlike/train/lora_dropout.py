"""LoRA dropout whose CPU mask comes from a counter hash instead of torch's `bernoulli_`.

Why: PEFT's LoRA dropout is a plain `nn.Dropout`, and on CPU torch draws its mask one element at a time
from mt19937 on a single thread (it takes MKL's vectorised generator only on Intel CPUs). On this 2-core
AMD machine that draw costs as much as the projection it regularises: `aten::bernoulli_` was 13% of a
SmolLM2 LoRA SFT step (docs/benchmarks.md, "Where the time goes"). Neither PEFT nor torch offers another
generator for dropout, so the mask is made here: each element's index is hashed (lowbias32, a bijective
32-bit mixer), keyed by a 32-bit seed drawn from torch's default generator (so `torch.manual_seed` and
transformers' `set_seed` still make a run repeatable), and the low 16 bits compared with p. That is a
handful of vectorised, multi-threaded integer passes. The kept values are `x * 1/(1-p)` as in torch, and the
dropped ones are zeroed by masking their bits, so the mask never has to be turned into floats.

The distribution is torch's, up to p's 16-bit quantisation (< 1e-5); only the random stream differs.
On CUDA and for dtypes other than fp32/bf16/fp16/fp64 the module is torch's dropout unchanged.
"""
from __future__ import annotations

import torch
from torch import nn

from ..utils import get_logger

logger = get_logger("swiftlike.train")

_PROBABILITY_SCALE = 1 << 16
_BITS_OF = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16,
            torch.float64: torch.int64}
_hashed_indices = torch.empty(0, dtype=torch.int32)


def _lowbias32_(h: torch.Tensor) -> torch.Tensor:
    """Chris Wellons' lowbias32 mixer, in place on int32 (multiplications wrap; shifts made logical)."""
    h ^= (h >> 16) & 0xFFFF
    h *= 0x7FEB352D
    h ^= (h >> 15) & 0x1FFFF
    h *= 0x846CA68B - (1 << 32)
    h ^= (h >> 16) & 0xFFFF
    return h


def _indices_hashed(count: int) -> torch.Tensor:
    """hash(0..count-1), kept and grown: the per-call work is then one xor with the seed and one more hash,
    and masks of two seeds are unrelated (a seed added to the raw index would make them shifted copies)."""
    global _hashed_indices
    if _hashed_indices.numel() < count:
        _hashed_indices = _lowbias32_(torch.arange(max(count, 2 * _hashed_indices.numel()), dtype=torch.int32))
    return _hashed_indices[:count]


def keep_bits(count: int, p: float, bits: torch.dtype = torch.int32) -> torch.Tensor:
    """A flat mask of `count` integers: all ones (keep, probability 1 - p) or zero (drop). Each hash gives two
    elements (its low 16 bits to the first half of the mask, its high 16 bits to the second), which halves
    the hashing."""
    seed = int(torch.randint(-(1 << 31), (1 << 31) - 1, (), dtype=torch.int64))
    half = (count + 1) // 2
    hashed = _lowbias32_(_indices_hashed(half) ^ seed)
    fields = torch.empty(2 * half, dtype=torch.int32)
    torch.bitwise_and(hashed, 0xFFFF, out=fields[:half])
    torch.bitwise_right_shift(hashed, 16, out=fields[half:])
    fields[half:] &= 0xFFFF
    fields -= round(p * _PROBABILITY_SCALE)
    fields >>= 31
    keep = fields.bitwise_not_()[:count]
    return keep if bits == torch.int32 else keep.to(bits)


def apply_keep_bits(values: torch.Tensor, keep: torch.Tensor, scale: float) -> torch.Tensor:
    """values with the dropped elements' bits cleared (+0.0) and the kept ones scaled."""
    values = values.contiguous()
    masked = values.view(keep.dtype).view(-1) & keep
    return masked.view(values.dtype).view(values.shape).mul_(scale)


class _HashedDropoutFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float) -> torch.Tensor:
        keep = keep_bits(x.numel(), p, _BITS_OF[x.dtype])
        ctx.save_for_backward(keep)
        ctx.scale = 1.0 / (1.0 - p)
        return apply_keep_bits(x, keep, ctx.scale)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (keep,) = ctx.saved_tensors
        return apply_keep_bits(grad, keep, ctx.scale), None


class HashedDropout(nn.Dropout):
    """`nn.Dropout` with the hashed CPU mask. A subclass, so that code zeroing every `nn.Dropout` (TRL's
    `disable_dropout`, ours) still finds and zeroes it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (not self.training or self.p == 0 or self.inplace or x.device.type != "cpu"
                or x.dtype not in _BITS_OF or x.numel() == 0):
            return super().forward(x)
        return _HashedDropoutFunction.apply(x, self.p)


def use_hashed_lora_dropout(model) -> int:
    """Swap every PEFT LoRA dropout of the model for `HashedDropout` (same p); returns how many."""
    from peft.tuners.lora import LoraLayer
    swapped = 0
    for layer in model.modules():
        if not isinstance(layer, LoraLayer):
            continue
        for adapter, dropout in layer.lora_dropout.items():
            if type(dropout) is nn.Dropout:
                layer.lora_dropout[adapter] = HashedDropout(dropout.p)
                swapped += 1
    if swapped:
        logger.info("LoRA dropout: %d layers draw their CPU masks from a counter hash instead of torch's "
                    "bernoulli_ (train/lora_dropout.py)", swapped)
    return swapped
