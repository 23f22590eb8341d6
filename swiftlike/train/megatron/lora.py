"""LoRA on the Megatron backend's linear layers (`--tuner_type lora` with `swiftlike megatron rlhf`).

Why not PEFT: its Megatron dispatch (peft 0.21, `dispatch_megatron`) fails before it builds a layer
(`KeyError: 'fan_in_fan_out'`), and its adapters would carry Megatron's fused names, which neither transformers nor
vLLM load. Here the adapter is two small matrices beside each targeted ColumnParallelLinear / RowParallelLinear,
added to its output by a forward hook, so the base layer keeps its parameter names (`hf_state_dict` and the
HF conversion see plain weights) and `merged_weights` computes exactly the weights a weight sync and an export
read, without writing into the base. Built for tensor parallel size 1, where a parallel linear layer is one whole matrix.
"""
from __future__ import annotations

import contextlib
import math

import torch
from torch import Tensor, nn

# Megatron's fused counterparts of the HF projections LoRA usually targets (q/k/v, o, gate/up, down).
DEFAULT_TARGETS = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")


class LoraAdapter(nn.Module):
    """delta(x) = dropout(x) @ A^T @ B^T * alpha / r; B starts at zero, so a fresh adapter changes nothing."""

    def __init__(self, in_features: int, out_features: int, rank: int, alpha: float, dropout: float,
                 dtype: torch.dtype, device: torch.device):
        super().__init__()
        self.lora_A = nn.Parameter(torch.empty(rank, in_features, dtype=dtype, device=device))
        self.lora_B = nn.Parameter(torch.zeros(out_features, rank, dtype=dtype, device=device))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # PEFT's and the LoRA paper's initialisation
        self.scaling = alpha / rank
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.enabled = True

    def delta(self, x: Tensor) -> Tensor:
        return (self.dropout(x) @ self.lora_A.T @ self.lora_B.T) * self.scaling

    def weight_delta(self) -> Tensor:
        return (self.lora_B @ self.lora_A) * self.scaling


def _add_delta(module: nn.Module, inputs: tuple, output):
    adapter: LoraAdapter = module.lora
    if not adapter.enabled:
        return output
    out, bias = output  # megatron's parallel linear layers return (output, bias)
    return out + adapter.delta(inputs[0]).to(out.dtype), bias


def apply_lora(model: nn.Module, rank: int, alpha: float, dropout: float,
               targets: tuple[str, ...] = DEFAULT_TARGETS) -> list[str]:
    """Freeze `model` and give every linear layer named in `targets` an adapter; returns the adapted names."""
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear

    if parallel_state.get_tensor_model_parallel_world_size() > 1:
        raise NotImplementedError("LoRA on the Megatron backend is built for tensor_model_parallel_size 1")
    for p in model.parameters():
        p.requires_grad_(False)
    adapted = []
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] in targets and isinstance(module, (ColumnParallelLinear, RowParallelLinear)):
            out_features, in_features = module.weight.shape
            module.lora = LoraAdapter(in_features, out_features, rank, alpha, dropout, module.weight.dtype,
                                      module.weight.device)
            module.register_forward_hook(_add_delta)
            adapted.append(name)
    if not adapted:
        raise ValueError(f"--target_modules: no Megatron linear layer named {', '.join(targets)}; the Megatron "
                         f"backend's layers are {', '.join(DEFAULT_TARGETS)} (all-linear means all of them)")
    return adapted


def adapters(model: nn.Module) -> list[tuple[nn.Module, LoraAdapter]]:
    return [(m, m.lora) for m in model.modules() if isinstance(getattr(m, "lora", None), LoraAdapter)]


def merged_weights(model: nn.Module) -> dict[str, Tensor]:
    """Each adapted layer's weight with its adapter folded in, as a new tensor, by the layer's name in `model`
    plus ".weight" (what a weight sync or an export reads). The base weights are not written: adding the delta in
    place and subtracting it again would not give a bf16 base back."""
    with torch.no_grad():
        return {f"{name}.weight": module.weight + module.lora.weight_delta().to(module.weight.dtype)
                for name, module in model.named_modules() if isinstance(getattr(module, "lora", None), LoraAdapter)}


@contextlib.contextmanager
def disabled(model: nn.Module):
    """The base model, adapters off (the GRPO reference and the GKD self-teacher of a LoRA run)."""
    pairs = adapters(model)
    for _, adapter in pairs:
        adapter.enabled = False
    try:
        yield
    finally:
        for _, adapter in pairs:
            adapter.enabled = True
