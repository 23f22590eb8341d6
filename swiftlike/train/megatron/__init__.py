"""Megatron-core model backend: HF Llama / Qwen2 checkpoints as tensor-parallel GPTModels (docs/megatron.md).

Nothing here imports megatron-core until it is used, so `import swiftlike` works without the `megatron` extra.
"""
from .convert import gpt_model_kwargs, hf_to_mcore, mcore_to_hf, padded_vocab_size, transformer_config
from .model import MegatronCausalLM
from .parallel import destroy_parallel, initialize_parallel
from .shims import apply_cpu_shims

__all__ = ["MegatronCausalLM", "apply_cpu_shims", "destroy_parallel", "gpt_model_kwargs", "hf_to_mcore",
           "initialize_parallel", "mcore_to_hf", "padded_vocab_size", "transformer_config"]


def load_megatron_model(args, resolved, device: str):
    """The train role's model on the Megatron backend: megatron's groups (TP 1, the world is data parallel), the
    checkpoint converted into a GPTModel in the training dtype, and LoRA adapters for --tuner_type lora."""
    from ...model import pick_dtype
    from .lora import DEFAULT_TARGETS, apply_lora
    from .model import MegatronCausalLM
    from .parallel import initialize_parallel
    import torch.distributed as dist

    from ...utils import get_logger
    initialize_parallel(1, 1, seed=args.seed)
    model = MegatronCausalLM(resolved, params_dtype=pick_dtype(args.torch_dtype, device)).to(device)
    if args.tuner_type == "lora":
        targets = DEFAULT_TARGETS if "all-linear" in args.target_modules else tuple(args.target_modules)
        apply_lora(model, args.lora_rank, args.lora_alpha, args.lora_dropout, targets)
    get_logger("swiftlike.train").info("train role on the Megatron backend: megatron-core GPTModel of %s, TP 1, %d "
                                       "data-parallel rank(s)", resolved.model_id, dist.get_world_size())
    return model
