#!/usr/bin/env bash
# PPO with a critic (ms-swift's examples/train/rlhf/ppo.sh, on vLLM): a reward model (--rlhf_type rm, LoRA) from
# the built-in preference pairs, then PPO with LoRA on a colocated vLLM engine with LoRA-only weight sync. The
# critic starts from the reward model (ms-swift's choice); the reward is the reward model's score plus the
# accuracy rule, which TRL's PPO could not take. Offline, tiny model (MODEL=HuggingFaceTB/SmolLM2-135M-Instruct for
# a real one). Smoke mode (EXAMPLE_SMOKE=1): 2 steps of each.
set -euo pipefail
source "$(dirname "$0")/../../_common.sh"
OUT=$EXAMPLE_OUTPUT/ppo
MODEL=${MODEL:-tiny-random/qwen2_5}

swiftlike rlhf \
    --rlhf_type rm \
    --model "$MODEL" \
    --tuner_type lora \
    --dataset "swiftlike/arithmetic-preference#$(smoke 16 400)" \
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
    --rlhf_type ppo \
    --model "$MODEL" \
    --tuner_type lora \
    --dataset "swiftlike/arithmetic#$(smoke 16 400)" \
    --reward_model "$RM" \
    --reward_funcs accuracy \
    --use_vllm true \
    --vllm_mode colocate \
    --vllm_enable_lora true \
    --vllm_max_model_len 1024 \
    --per_device_train_batch_size 4 \
    --gradient_accumulation_steps 1 \
    --num_mini_batches 2 \
    --num_ppo_epochs 2 \
    --max_completion_length 64 \
    --kl_coef 0.05 \
    --cliprange 0.2 \
    --vf_coef 0.1 \
    --gamma 1.0 \
    --lam 0.95 \
    --learning_rate 1e-4 \
    --torch_dtype float32 \
    --max_steps "$(smoke 2 100)" \
    --logging_steps 1 \
    --save_steps "$(smoke 2 50)" \
    --gradient_checkpointing false \
    --report_to none \
    --output_dir "$OUT/ppo"

echo "reward model: $RM"
echo "PPO run: $(last_run "$OUT/ppo")"
