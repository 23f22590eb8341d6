#!/usr/bin/env bash
# Accuracy over a training run: a short LoRA SFT on the tiny random-weight model saves a checkpoint every few steps,
# then `swiftlike eval --eval_all_checkpoints` scores the base model (step 0) and every checkpoint on the same
# questions, writing a table (report.md) and accuracy_over_checkpoints.png. Point it at any run directory.
# Smoke mode (EXAMPLE_SMOKE=1): 4 steps, a checkpoint every 2, 4 questions.
set -euo pipefail
source "$(dirname "$0")/../_common.sh"
OUT=$EXAMPLE_OUTPUT/eval_all_checkpoints

swiftlike sft \
    --model tiny-random/qwen2_5 \
    --dataset "swiftlike/arithmetic-sft#$(smoke 16 200)" \
    --torch_dtype float32 \
    --max_steps "$(smoke 4 40)" \
    --per_device_train_batch_size 4 \
    --gradient_accumulation_steps 1 \
    --save_steps "$(smoke 2 10)" \
    --report_to none \
    --output_dir "$OUT/train"

swiftlike eval \
    --eval_all_checkpoints "$(last_run "$OUT/train")" \
    --eval_dataset math rg:basic_arithmetic \
    --eval_limit "$(smoke 4 50)" \
    --max_new_tokens "$(smoke 16 64)" \
    --torch_dtype float32 \
    --eval_output_dir "$OUT/eval"
