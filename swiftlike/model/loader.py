"""Loading a resolved model for the transformers (pt) side: dtype choice, tokenizer, adapters."""
from __future__ import annotations

from pathlib import Path

from .resolve import ResolvedModel

DTYPES = ("auto", "float32", "bfloat16", "float16")


def pick_dtype(torch_dtype: str, device: str):
    """`auto` means fp32 on CPU (bf16 is ~4x slower there without AVX-512) and bf16 on GPU."""
    import torch
    if torch_dtype == "auto":
        return torch.float32 if device == "cpu" else torch.bfloat16
    return getattr(torch, torch_dtype)


def default_device() -> str:
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


def load_tokenizer(resolved: ResolvedModel):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(resolved.model_dir)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(resolved: ResolvedModel, torch_dtype: str = "auto", device: str | None = None):
    from transformers import AutoModelForCausalLM
    device = device or default_device()
    model = AutoModelForCausalLM.from_pretrained(resolved.model_dir, dtype=pick_dtype(torch_dtype, device))
    return model.to(device).eval()


def is_adapter_dir(path: str | Path) -> bool:
    return (Path(path) / "adapter_config.json").is_file()


def check_adapter_dir(path: str | Path) -> Path:
    path = Path(path).expanduser()
    if not path.is_dir():
        raise ValueError(f"--adapters {path}: no such directory")
    if not is_adapter_dir(path):
        raise ValueError(f"--adapters {path}: not a LoRA adapter (no adapter_config.json in it)")
    return path.resolve()
