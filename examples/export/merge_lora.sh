#!/usr/bin/env bash
# Merge a LoRA checkpoint into a standalone model directory (<checkpoint>-merged), which infer, deploy, eval and
# vLLM load like any model. To have a checkpoint, the script first trains a LoRA adapter on the tiny random-weight
# Qwen2.5 model for a few steps, then merges it and answers one question with the merged model.
# Smoke mode (EXAMPLE_SMOKE=1): 2 training steps.
set -euo pipefail
source "$(dirname "$0")/../_common.sh"
OUT=$EXAMPLE_OUTPUT/export

swiftlike sft \
    --model tiny-random/qwen2_5 \
    --dataset "swiftlike/alpaca-mini#$(smoke 8 50)" \
    --max_steps "$(smoke 2 20)" \
    --per_device_train_batch_size 2 \
    --gradient_accumulation_steps 1 \
    --save_steps "$(smoke 2 20)" \
    --gradient_checkpointing false \
    --report_to none \
    --output_dir "$OUT"
CHECKPOINT=$(last_checkpoint "$OUT")

swiftlike export \
    --adapters "$CHECKPOINT" \
    --merge_lora true

swiftlike infer \
    --model "$CHECKPOINT-merged" \
    --val_dataset swiftlike/alpaca-mini#1 \
    --max_new_tokens 16 \
    --result_path "$OUT/merged_answer.jsonl"

echo "merged model: $CHECKPOINT-merged"
