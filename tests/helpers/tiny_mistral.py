"""A tiny random Mistral with a Zephyr chat template: a chat model of a type no registered template knows, saved
offline (tests/unit/template/test_tokenizer_template.py, tests/e2e/test_template_runs.py)."""
from model_ids import TINY

from swiftlike.model import resolve_model

ZEPHYR = ("{% for m in messages %}{{ '<|' + m['role'] + '|>\\n' + m['content'] + eos_token + '\\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}")


def save_tiny_mistral(path, chat_template):
    """A 2-layer random Mistral with SmolLM2's trained BPE (taken from TINY, tiny-random/qwen2_5) and the Zephyr tokens."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig, MistralConfig, MistralForCausalLM
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(TINY).model_dir)
    tokenizer.add_special_tokens({"eos_token": "</s>", "pad_token": "</s>",
                                  "additional_special_tokens": ["<|system|>", "<|user|>", "<|assistant|>"]})
    tokenizer.chat_template = chat_template
    eos = tokenizer.convert_tokens_to_ids("</s>")
    config = MistralConfig(vocab_size=(len(tokenizer) + 63) // 64 * 64, hidden_size=64, intermediate_size=128,
                           num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, head_dim=32,
                           max_position_embeddings=1024, tie_word_embeddings=True, sliding_window=None,
                           bos_token_id=tokenizer.bos_token_id, eos_token_id=eos, pad_token_id=eos)
    torch.manual_seed(0)
    model = MistralForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=eos)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
