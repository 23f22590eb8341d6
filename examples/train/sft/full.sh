#!/usr/bin/env bash
# Full-parameter fine-tuning (every weight trains) on the tiny random-weight Qwen2.5 model: the fastest check that
# the training loop, checkpoints and the run directory work. Swap in --model HuggingFaceTB/SmolLM2-135M-Instruct
# for a real (slower) run. Smoke mode (EXAMPLE_SMOKE=1): 2 steps.
set -euo pipefail
source "$(dirname "$0")/../../_common.sh"
OUT=$EXAMPLE_OUTPUT/sft_full

swiftlike sft \
    --model tiny-random/qwen2_5 \
    --tuner_type full \
    --dataset "swiftlike/arithmetic-sft#$(smoke 16 1000)" \
    --torch_dtype float32 \
    --max_steps "$(smoke 2 100)" \
    --per_device_train_batch_size 4 \
    --gradient_accumulation_steps 2 \
    --learning_rate 1e-4 \
    --max_length 256 \
    --split_dataset_ratio "$(smoke 0 0.05)" \
    --logging_steps "$(smoke 1 10)" \
    --save_steps "$(smoke 2 50)" \
    --gradient_checkpointing false \
    --report_to "$(smoke none tensorboard)" \
    --output_dir "$OUT"

echo "checkpoint: $(last_checkpoint "$OUT")"
