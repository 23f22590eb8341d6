"""Model registry and resolution: every command turns `--model` into a directory here."""
from .loader import (ATTN_IMPLS, attn_implementation, check_adapter_dir, default_device, load_model, load_tokenizer,
                     pick_dtype)
from .packaged import PACKAGED_MODELS
from .registry import MODEL_REGISTRY, ModelMeta, get_model_meta, register_model
from .resolve import ResolvedModel, resolve_model
from .tiny import build_tiny_random

__all__ = ["ATTN_IMPLS", "MODEL_REGISTRY", "ModelMeta", "PACKAGED_MODELS", "ResolvedModel", "attn_implementation",
           "build_tiny_random", "check_adapter_dir", "default_device", "get_model_meta", "load_model",
           "load_tokenizer", "pick_dtype", "register_model", "resolve_model"]
