"""Export: merge LoRA adapters into full models that any HF-format loader (vLLM included) reads."""
from .merge import export_main, merge_lora

__all__ = ["export_main", "merge_lora"]
