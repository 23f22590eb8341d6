"""Random-weight models for tests: real architecture and trained tokenizer, tiny sizes.

The tokenizer is SmolLM2's (a real trained BPE), extended with the special tokens of the
requested family and given that family's chat template, so template and engine code runs
exactly as it would on the real model. head_dim is 64 because vLLM's CPU attention rejects 16.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from ..template import get_template_meta
from ..utils import cache_dir, get_logger
from .packaged import MARKER_FILE, find_packaged, materialize_packaged, write_marker
from .registry import get_model_meta

logger = get_logger("swiftlike.model")

TINY_PREFIX = "tiny-random/"
_EXTRA_SPECIAL = {
    "llama3": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
}
_EXTRA_TOKENS = {"qwen3": ["<think>", "</think>"]}


def tiny_model_dir(model_type: str) -> Path:
    return cache_dir() / "tiny-random" / model_type


def build_tiny_random(model_type: str, out_dir: str | Path | None = None, seed: int = 0,
                      hidden_size: int = 128, num_layers: int = 2) -> Path:
    """Build (once) and return a tiny random model of `model_type`."""
    meta = get_model_meta(model_type)
    target = Path(out_dir) if out_dir else tiny_model_dir(model_type)
    if (target / MARKER_FILE).is_file():
        return target
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    base = materialize_packaged(find_packaged("HuggingFaceTB/SmolLM2-135M-Instruct"))
    tokenizer = AutoTokenizer.from_pretrained(base)
    if model_type in _EXTRA_SPECIAL:
        tokenizer.add_special_tokens({"additional_special_tokens": _EXTRA_SPECIAL[model_type]})
    if model_type in _EXTRA_TOKENS:
        tokenizer.add_tokens(_EXTRA_TOKENS[model_type])
    template = get_template_meta(meta.template)
    tokenizer.chat_template = template.chat_template
    eos = template.stop_words[0]
    tokenizer.eos_token = eos
    tokenizer.pad_token = eos
    vocab = (len(tokenizer) + 63) // 64 * 64
    heads = hidden_size // 64
    config = AutoConfig.for_model(
        meta.hf_model_type, vocab_size=vocab, hidden_size=hidden_size, intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers, num_attention_heads=heads, num_key_value_heads=heads, head_dim=64,
        max_position_embeddings=4096, tie_word_embeddings=True, rms_norm_eps=1e-6,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.convert_tokens_to_ids(eos),
        pad_token_id=tokenizer.convert_tokens_to_ids(eos), architectures=[meta.architecture],
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():  # a wider init than the default 0.02 gives varied, non-degenerate sampling
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.08)
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        write_marker(tmp, model_type=model_type, source="tiny-random", seed=seed)
        try:
            tmp.rename(target)
        except OSError:
            if not (target / MARKER_FILE).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    logger.info("built tiny random %s model in %s", model_type, target)
    return target
