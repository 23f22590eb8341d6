"""Rotary frequencies from per-token position ids, as transformers computes them for Llama and Qwen2.

megatron-core's RotaryEmbedding gives one table for positions 0..s-1, shared by the whole batch, and moves its
frequencies to CUDA on first use. Callers of a CausalLM pass position ids per row (left padding, packed rows,
GRPO's prompt / completion split), so the table is built here from those ids, in megatron's layout
[s, b, 1, head_dim] with the halves concatenated (non-interleaved), which its attention applies as given.
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from .convert import attention_dims, rope_settings


def _llama3_scaled(inv_freq: Tensor, params: dict[str, Any]) -> Tensor:
    """Llama 3.1's frequency-dependent stretch: long wavelengths slowed by `factor`, short ones kept, a linear
    blend (in 1/wavelength) between the two bands."""
    factor, low, high = params["factor"], params["low_freq_factor"], params["high_freq_factor"]
    context = params["original_max_position_embeddings"]
    wavelength = 2 * math.pi / inv_freq
    blend = ((context / wavelength - low) / (high - low)).clamp(0.0, 1.0)
    return (1 - blend) * inv_freq / factor + blend * inv_freq


def inverse_frequencies(hf_config: Any, device: torch.device | str = "cpu") -> Tensor:
    params = rope_settings(hf_config)
    head_dim = attention_dims(hf_config)[2]
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim
    inv_freq = 1.0 / (params["rope_theta"] ** exponents)
    if params["rope_type"] == "llama3":
        inv_freq = _llama3_scaled(inv_freq, params)
    return inv_freq


def rotary_table(inv_freq: Tensor, position_ids: Tensor) -> Tensor:
    """(batch, seq) positions -> [seq, batch, 1, head_dim] angles, in float32 whatever the model dtype."""
    angles = position_ids.to(torch.float32).transpose(0, 1)[..., None] * inv_freq.to(position_ids.device)
    return torch.cat([angles, angles], dim=-1)[:, :, None, :]
