#!/usr/bin/env bash
# A reward model (Bradley-Terry, ms-swift's --rlhf_type rm) with LoRA on the tiny model from the built-in
# preference pairs, then the same checkpoint as GRPO's --reward_model: it scores GRPO's sampled completions as
# one more reward column. Smoke mode (EXAMPLE_SMOKE=1): 2 steps of each.
set -euo pipefail
source "$(dirname "$0")/../../_common.sh"
OUT=$EXAMPLE_OUTPUT/rm

swiftlike rlhf \
    --rlhf_type rm \
    --model tiny-random/qwen2_5 \
    --tuner_type lora \
    --dataset "swiftlike/arithmetic-preference#$(smoke 16 400)" \
    --center_rewards_coefficient 0.01 \
    --per_device_train_batch_size 8 \
    --gradient_accumulation_steps 1 \
    --learning_rate 1e-4 \
    --max_steps "$(smoke 2 50)" \
    --logging_steps 1 \
    --save_steps "$(smoke 2 50)" \
    --gradient_checkpointing false \
    --report_to none \
    --output_dir "$OUT/rm"
RM=$(last_checkpoint "$OUT/rm")

swiftlike rlhf \
    --rlhf_type grpo \
    --model tiny-random/qwen2_5 \
    --dataset "swiftlike/arithmetic#$(smoke 8 64)" \
    --reward_funcs format_hash \
    --reward_model "$RM" \
    --num_generations 2 \
    --per_device_train_batch_size 4 \
    --gradient_accumulation_steps 1 \
    --max_completion_length 16 \
    --max_steps 2 \
    --logging_steps 1 \
    --gradient_checkpointing false \
    --report_to none \
    --output_dir "$OUT/grpo"

echo "reward model: $RM"
echo "GRPO run: $(last_run "$OUT/grpo")"
