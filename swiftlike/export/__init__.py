"""Export: merge LoRA adapters into full models that any HF-format loader (vLLM included) reads."""
from .merge import merge_lora

__all__ = ["merge_lora"]
