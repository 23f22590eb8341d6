"""Loading a resolved model for the transformers (pt) side: dtype choice, tokenizer, adapters."""
from __future__ import annotations

from pathlib import Path

from ..utils import get_logger, warn_once
from ..utils.errors import MissingInputError, UsageError
from .resolve import ResolvedModel

logger = get_logger("swiftlike.model")

DTYPES = ("auto", "float32", "bfloat16", "float16")
# --attn_impl values: ms-swift's spellings of transformers' attention implementations
ATTN_IMPLS = ("sdpa", "eager", "flex_attention", "flash_attn", "flash_attention_2", "flash_attention_3",
              "flash_attention_4")


def pick_dtype(torch_dtype: str, device: str):
    """`auto` means fp32 on CPU (bf16 is ~4x slower there without AVX-512) and bf16 on GPU."""
    import torch
    if torch_dtype == "auto":
        return torch.float32 if device == "cpu" else torch.bfloat16
    return getattr(torch, torch_dtype)


def attn_implementation(attn_impl: str | None, device: str) -> str | None:
    """transformers' `attn_implementation` for --attn_impl on `device`; None keeps config.json's choice.

    FlashAttention kernels exist only for CUDA. On a machine without one a flash request runs as sdpa,
    which computes the same attention, with one warning: ms-swift command lines (which ask for
    flash_attn with --packing / --padding_free) then run unchanged, and packed samples stay apart
    because transformers builds their mask from the restarting position_ids.
    """
    if attn_impl is None:
        return None
    if attn_impl not in ATTN_IMPLS:
        raise UsageError(f"--attn_impl {attn_impl!r}: choose from {', '.join(ATTN_IMPLS)}")
    impl = "flash_attention_2" if attn_impl == "flash_attn" else attn_impl
    if impl.startswith("flash_attention") and device != "cuda":
        warn_once(logger, f"--attn_impl {attn_impl}: FlashAttention needs a CUDA GPU, which this machine lacks; "
                          "using sdpa (the same attention, without the fused kernel)")
        return "sdpa"
    return impl


def default_device() -> str:
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


def load_tokenizer(resolved: ResolvedModel):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(resolved.model_dir)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(resolved: ResolvedModel, torch_dtype: str = "auto", device: str | None = None,
               attn_impl: str | None = None):
    from transformers import AutoModelForCausalLM
    device = device or default_device()
    model = AutoModelForCausalLM.from_pretrained(resolved.model_dir, dtype=pick_dtype(torch_dtype, device),
                                                 attn_implementation=attn_implementation(attn_impl, device))
    return model.to(device).eval()


def is_adapter_dir(path: str | Path) -> bool:
    return (Path(path) / "adapter_config.json").is_file()


def check_adapter_dir(path: str | Path) -> Path:
    path = Path(path).expanduser()
    if not path.is_dir():
        raise MissingInputError(f"--adapters {path}: no such directory")
    if not is_adapter_dir(path):
        raise UsageError(f"--adapters {path}: not a LoRA adapter (no adapter_config.json in it)")
    return path.resolve()
