"""Model types declared as data: architecture, chat template, default LoRA targets, known ids.

Every command asks this registry (through `resolve_model`) so that a model id means the
same thing to `infer`, `sft`, `rlhf`, `deploy` and `eval`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..utils.registry import Registry

LLM_LINEAR_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class ModelMeta:
    model_type: str
    architecture: str
    template: str
    hf_model_type: str
    model_ids: tuple[str, ...] = ()
    lora_target_modules: tuple[str, ...] = LLM_LINEAR_MODULES
    description: str = ""
    id_keywords: tuple[str, ...] = field(default=())


MODEL_REGISTRY: Registry[ModelMeta] = Registry("model_type", "--model_type")


def register_model(meta: ModelMeta) -> ModelMeta:
    return MODEL_REGISTRY.register(meta.model_type, meta)


def get_model_meta(model_type: str) -> ModelMeta:
    return MODEL_REGISTRY.lookup(model_type)


def find_model_type_by_id(model_id: str) -> str | None:
    """Exact match of a known hub id (case-insensitive), else None."""
    wanted = model_id.strip("/").lower()
    for meta in MODEL_REGISTRY.values():
        if any(m.lower() == wanted for m in meta.model_ids):
            return meta.model_type
    return None


def guess_model_type(hf_model_type: str, name: str, special_tokens: set[str]) -> str | None:
    """Pick a registered type from a directory's config and tokenizer when the id is not known.

    Several registered types share one HF architecture (llama3 and smollm2 are both `llama`),
    so the tokenizer's special tokens and keywords in the name break the tie. A `llama` model with
    neither family's tokens (Llama 2, TinyLlama chat, ...) is neither: None lets its tokenizer's own
    chat template serve.
    """
    candidates = [m for m in MODEL_REGISTRY.values() if m.hf_model_type == hf_model_type]
    if not candidates:
        return None
    lowered = name.lower()
    for meta in candidates:
        if any(k in lowered for k in meta.id_keywords):
            return meta.model_type
    if hf_model_type == "llama":
        if "<|eot_id|>" in special_tokens:
            return "llama3"
        if "<|im_start|>" in special_tokens:
            return "smollm2"
        return None
    return candidates[0].model_type


def _register_builtin() -> None:
    register_model(ModelMeta(
        "qwen2", "Qwen2ForCausalLM", "qwen", "qwen2",
        model_ids=("Qwen/Qwen2-0.5B-Instruct", "Qwen/Qwen2-1.5B-Instruct", "Qwen/Qwen2-7B-Instruct"),
        description="Qwen2 chat models", id_keywords=("qwen2-",)))
    register_model(ModelMeta(
        "qwen2_5", "Qwen2ForCausalLM", "qwen2_5", "qwen2",
        model_ids=tuple(f"Qwen/Qwen2.5-{s}-Instruct" for s in ("0.5B", "1.5B", "3B", "7B", "14B", "32B", "72B"))
        + tuple(f"Qwen/Qwen2.5-Math-{s}-Instruct" for s in ("1.5B", "7B")),
        description="Qwen2.5 chat models", id_keywords=("qwen2.5", "qwen2_5")))
    register_model(ModelMeta(
        "qwen3", "Qwen3ForCausalLM", "qwen3", "qwen3",
        model_ids=tuple(f"Qwen/Qwen3-{s}" for s in ("0.6B", "1.7B", "4B", "8B", "14B", "32B")),
        description="Qwen3 dense models (thinking template)", id_keywords=("qwen3",)))
    register_model(ModelMeta(
        "llama3", "LlamaForCausalLM", "llama3", "llama",
        model_ids=("LLM-Research/Meta-Llama-3-8B-Instruct", "meta-llama/Meta-Llama-3-8B-Instruct",
                   "LLM-Research/Meta-Llama-3-70B-Instruct", "meta-llama/Meta-Llama-3-70B-Instruct"),
        description="Llama 3 instruct models", id_keywords=("llama-3", "llama3")))
    register_model(ModelMeta(
        "smollm2", "LlamaForCausalLM", "smollm2", "llama",
        model_ids=tuple(f"HuggingFaceTB/SmolLM2-{s}-Instruct" for s in ("135M", "360M", "1.7B")),
        description="SmolLM2 instruct models (ChatML)", id_keywords=("smollm2",)))


_register_builtin()
