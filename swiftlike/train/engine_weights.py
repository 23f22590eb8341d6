"""The HF-named weights a trained model hands to an inference engine (weight sync, base fingerprints), with its
LoRA adapter folded in or left out, computed without writing into the model.

Why not PEFT's `merge_adapter()` then `unmerge_adapter()` (what TRL's weight sync does): they add the adapter's
delta into the base weights in place and subtract it again after a cast to the weights' dtype, and in bf16 the
subtraction does not give the base back. Every sync moved the base a little (10 syncs of the tiny model in bf16:
155,725 of its 328,448 adapted base elements changed, by up to 1.9e-2), and that drifted base is also the KL
reference (adapter disabled) and the base the saved adapter is applied to. Here each adapted layer's merged weight
is a new tensor: PEFT's own delta (`get_delta_weight`) added to the base as PEFT's merge adds it (in the promoted
dtype, rounded once to the weight's dtype), so the engine gets what PEFT's merge gives, bit for bit, and the base is
never written. Adapter variants whose merge is not a plain addition (DoRA and PEFT's other variants, or a LoRA bias)
are merged by PEFT one layer at a time and that layer's tensors restored from a copy, bit for bit.

A Megatron-backend model has its own LoRA layers (train/megatron/lora.py) and HF conversion, and answers the same
question itself (`MegatronCausalLM.merged_hf_state_dict`).
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch
from torch import Tensor

from ..utils.errors import NotBuiltError

BASE_LAYER = ".base_layer"


def engine_weights(model, merged: bool = True, dtype: torch.dtype | None = None) -> Iterable[tuple[str, Tensor]]:
    """(HF name, tensor) of every weight of `model` under the names the engine's checkpoint has.

    `merged`: the active LoRA adapter (and --modules_to_save copies) folded in, what the engine must generate
    with; else the base weights, what the engine's checkpoint holds before any training. `dtype`: the dtype the
    new (merged) tensors are made in, the engine's, so no second full-precision copy is held; the other tensors
    are the parameters themselves (detached), which the engine casts as it loads them. A PEFT model's weights come
    as an iterable that computes each merged tensor as it is reached, and may be iterated again (a transport that
    falls back from a delta to a full update does).
    """
    from peft import PeftModel

    from .megatron.model import MegatronCausalLM
    if isinstance(model, MegatronCausalLM):
        state = model.merged_hf_state_dict() if merged else model.hf_state_dict()
        return list(state.items())
    if isinstance(model, PeftModel):
        return PeftEngineWeights(model, merged, dtype)
    return [(name, p.detach()) for name, p in model.named_parameters()]


class PeftEngineWeights:
    """A PEFT model's weights under the base model's HF names (see `engine_weights`)."""

    def __init__(self, model, merged: bool, dtype: torch.dtype | None = None):
        from peft.utils.other import AuxiliaryTrainingWrapper, ModulesToSaveWrapper

        self.model, self.merged, self.dtype = model, merged, dtype
        self.base = model.get_base_model()
        self.adapter = model.active_adapter
        self.copies = {}  # --modules_to_save: module name -> its wrapper (the original and a trained copy)
        for name, module in self.base.named_modules():
            if isinstance(module, ModulesToSaveWrapper):
                self.copies[name] = module
            elif isinstance(module, AuxiliaryTrainingWrapper):
                raise NotBuiltError(f"{name}: PEFT's {type(module).__name__} is not built for weight sync to an "
                                    "engine (plain LoRA and --modules_to_save are)")

    def __iter__(self) -> Iterator[tuple[str, Tensor]]:
        from peft.tuners.lora import LoraLayer

        layers = {name: m for name, m in self.base.named_modules() if isinstance(m, LoraLayer)}
        merged_layer: tuple[str, dict[str, Tensor]] | None = None  # the last adapted layer's merged tensors
        with torch.no_grad():
            for name, param in self.base.named_parameters():
                module, _, leaf = name.rpartition(".")
                owner = module[:-len(BASE_LAYER)] if module.endswith(BASE_LAYER) else None
                if owner in layers:
                    if self.merged:
                        if merged_layer is None or merged_layer[0] != owner:
                            merged_layer = (owner, self._merge_layer(layers[owner]))
                        yield f"{owner}.{leaf}", merged_layer[1].get(leaf, param.detach())
                    else:
                        yield f"{owner}.{leaf}", param.detach()
                elif ".lora_" in f".{name}":
                    continue  # the adapter's own matrices
                else:
                    renamed = self._copy_name(name)
                    if renamed is not None:
                        yield renamed, param.detach()

    def _copy_name(self, name: str) -> str | None:
        """The HF name of a parameter, or None where it is not what the engine gets: of a --modules_to_save
        module, the trained copy when merged and the original otherwise."""
        for wrapper in self.copies:
            original, copies = f"{wrapper}.original_module.", f"{wrapper}.modules_to_save."
            if name.startswith(original):
                return None if self.merged else wrapper + "." + name[len(original):]
            if name.startswith(copies):
                adapter, _, rest = name[len(copies):].partition(".")
                return wrapper + "." + rest if self.merged and adapter == self.adapter else None
        return name

    def _merge_layer(self, layer) -> dict[str, Tensor]:
        """The base layer's tensors that merging the active adapter changes, as new tensors (the rest stay)."""
        base = layer.get_base_layer()
        if layer.merged or layer.disable_adapters or self.adapter not in layer.lora_A:
            return {}
        if self.adapter in layer.lora_variant or layer.lora_bias.get(self.adapter):
            return self._merged_by_peft(layer, base)
        weight = base.weight
        merged = (weight + layer.get_delta_weight(self.adapter)).to(weight.dtype)  # PEFT's in-place `+=`, out of place
        return {"weight": merged.to(self.dtype) if self.dtype is not None else merged}

    def _merged_by_peft(self, layer, base) -> dict[str, Tensor]:
        """PEFT's own merge of one layer, copied out, and the layer's tensors put back bit for bit."""
        kept = {n: p.detach().clone() for n, p in base.named_parameters(recurse=False)}
        layer.merge(adapter_names=[self.adapter])
        try:
            merged = {n: p.detach().to(self.dtype or p.dtype, copy=True)
                      for n, p in base.named_parameters(recurse=False)}
        finally:
            layer.unmerge()
            for n, p in base.named_parameters(recurse=False):
                p.copy_(kept[n])
        return merged
