"""Model FLOPs of a decoder-only transformer, counted from its config and the token counts: what a training or
generation step asks of the machine, to set beside the peak rate benchmarks/roofline.py measures (the
training benchmarks' fraction of peak).

Counted: every matmul of the layers (q, k, v, o projections with grouped-query heads; the gated MLP's three), the
output head (computed in full even when tied to the embedding), and causal attention's QKᵀ and AV over each
token's own prefix. Not counted: norms, rotary embeddings, softmax and activations (a few percent at these
widths). A multiply-add is 2 FLOPs. The backward pass costs twice the forward (gradients of inputs and of
weights); with LoRA the frozen weights get no weight gradient, so it costs once the forward (the adapters' own
work is left out); gradient checkpointing adds one more forward."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class DecoderShape:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int

    @classmethod
    def of(cls, config) -> DecoderShape:
        """From a transformers config (or its dict): Llama / Qwen2 / Mistral field names."""
        get = config.get if isinstance(config, dict) else lambda k, d=None: getattr(config, k, d)
        heads = get("num_attention_heads")
        return cls(layers=get("num_hidden_layers"), hidden=get("hidden_size"), heads=heads,
                   kv_heads=get("num_key_value_heads") or heads,
                   head_dim=get("head_dim") or get("hidden_size") // heads,
                   intermediate=get("intermediate_size"), vocab=get("vocab_size"))

    @property
    def layer_params(self) -> int:
        """Weights of one layer's matmuls: q and o (heads), k and v (kv heads), gate, up and down."""
        attention = 2 * self.hidden * self.heads * self.head_dim + 2 * self.hidden * self.kv_heads * self.head_dim
        return attention + 3 * self.hidden * self.intermediate

    @property
    def matmul_params(self) -> int:
        return self.layers * self.layer_params + self.hidden * self.vocab


def forward_flops(shape: DecoderShape, seq_lens: Iterable[int]) -> int:
    """One forward pass over sequences of these lengths (padding excluded: count the real tokens)."""
    total = 0
    for n in seq_lens:
        attention = 4 * shape.layers * shape.heads * shape.head_dim * n * (n + 1) // 2
        total += 2 * shape.matmul_params * n + attention
    return total


def train_flops(shape: DecoderShape, seq_lens: Iterable[int], *, lora: bool = False,
                gradient_checkpointing: bool = False) -> int:
    """Forward and backward over the sequences (see the module docstring for the multipliers)."""
    forward = forward_flops(shape, seq_lens)
    passes = 1 + (1 if lora else 2) + (1 if gradient_checkpointing else 0)
    return passes * forward
