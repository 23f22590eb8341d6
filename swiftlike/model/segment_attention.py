"""Attention over a packed row, one sequence at a time.

Why: GKD (and anything else that packs sequences end to end in one row, position ids restarting at each)
runs attention through transformers' SDPA with a block-diagonal mask built from the position ids. On CPU no
SDPA kernel skips the masked blocks, so a row of 8 sequences costs 8x the attention of its sequences: 11% of
a SmolLM2 GKD step (docs/benchmarks.md). CUDA users get variable-length attention from flash-attn; on CPU
there is none, so this registers one with transformers' `AttentionInterface`: given the row's sequence
boundaries (`cu_seq_lens_q`, the flash-attn varlen keyword transformers forwards to every attention layer),
it runs causal SDPA on each sequence and concatenates; without them it is transformers' SDPA, mask and all,
so a model switched to it still takes padded batches. The logits equal the masked path's within 1e-5
(tests/unit/model/test_segment_attention.py).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

SEGMENT_ATTENTION = "swiftlike_segments"


def _segment_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                       is_causal=None, **kwargs):
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
    bounds = kwargs.get("cu_seq_lens_q")
    if bounds is None or query.shape[0] != 1 or query.shape[2] != key.shape[2]:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    groups = query.shape[1] // key.shape[1]
    if groups > 1:
        key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    dropout = dropout if module.training else 0.0
    edges = bounds.tolist()
    pieces = [F.scaled_dot_product_attention(query[:, :, start:end], key[:, :, start:end], value[:, :, start:end],
                                             dropout_p=dropout, scale=scaling, is_causal=True)
              for start, end in zip(edges[:-1], edges[1:]) if end > start]
    return torch.cat(pieces, dim=2).transpose(1, 2).contiguous(), None


def register_segment_attention() -> str:
    """Register the implementation (and transformers' SDPA mask for it: padded batches still need one) under
    SEGMENT_ATTENTION; idempotent. Returns the name, for `model.set_attn_implementation`."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
    AttentionInterface.register(SEGMENT_ATTENTION, _segment_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(SEGMENT_ATTENTION, sdpa_mask)
    return SEGMENT_ATTENTION


def _implementation(model):
    """The transformers model under DDP and PEFT wrappers, and its attention implementation (None when it is
    not a transformers model: the Megatron backend)."""
    model = getattr(model, "module", model)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base, getattr(getattr(base, "config", None), "_attn_implementation", None)


def use_segment_attention(model) -> bool:
    """Switch a transformers model (or the model under a PEFT wrapper) from SDPA to segment attention; models on
    another implementation (eager, flash-attn on a GPU, Megatron) keep it. True when switched."""
    base, implementation = _implementation(model)
    if implementation not in ("sdpa", SEGMENT_ATTENTION):
        return False
    base.set_attn_implementation(register_segment_attention())
    return True


def on_segment_attention(model) -> bool:
    return _implementation(model)[1] == SEGMENT_ATTENTION


def segment_bounds(lengths: list[int], device=None) -> dict[str, torch.Tensor | int]:
    """The keywords that tell segment attention (and flash-attn's varlen path) where each packed sequence
    starts: cumulative lengths from 0, and the longest."""
    cumulative = torch.tensor([0, *lengths], dtype=torch.int32, device=device).cumsum(0, dtype=torch.int32)
    longest = max(lengths, default=0)
    return {"cu_seq_lens_q": cumulative, "cu_seq_lens_k": cumulative, "max_length_q": longest,
            "max_length_k": longest}
