"""Megatron-core model backend: HF Llama / Qwen2 checkpoints as tensor-parallel GPTModels (docs/megatron.md).

Nothing here imports megatron-core until it is used, so `import swiftlike` works without the `megatron` extra.
"""
from .convert import gpt_model_kwargs, hf_to_mcore, mcore_to_hf, padded_vocab_size, transformer_config
from .model import MegatronCausalLM
from .parallel import destroy_parallel, initialize_parallel
from .shims import apply_cpu_shims

__all__ = ["MegatronCausalLM", "apply_cpu_shims", "destroy_parallel", "gpt_model_kwargs", "hf_to_mcore",
           "initialize_parallel", "mcore_to_hf", "padded_vocab_size", "transformer_config"]
