#!/usr/bin/env bash
# Multi-turn GRPO against a gym environment from a plugin file (ms-swift's GYM training: examples/train/grpo/
# external/vllm_gym.sh, colocated here): gym_plugin.py registers `guess_number` with register_env, and each row
# of guess_number.jsonl names it in its env_config column with the game's settings. gym_scheduler builds one
# environment per trajectory; its step rewards, summed, are the only reward (--use_gym_env true: the rows name the
# environment, so no --gym_env sets it by default). LoRA on SmolLM2-135M-Instruct, vLLM colocated. Smoke mode
# (EXAMPLE_SMOKE=1): 2 steps of 1 game x 4 trajectories, 3 turns of at most 32 tokens.
set -euo pipefail
source "$(dirname "$0")/../../../_common.sh"
HERE="$(dirname "$0")"
OUT=$EXAMPLE_OUTPUT/grpo_multi_turn_gym

swiftlike rlhf \
    --rlhf_type grpo \
    --model "${MODEL:-HuggingFaceTB/SmolLM2-135M-Instruct}" \
    --tuner_type lora \
    --dataset "$HERE/guess_number.jsonl#$(smoke 8 64)" \
    --external_plugins "$HERE/gym_plugin.py" \
    --multi_turn_scheduler gym_scheduler \
    --use_gym_env true \
    --max_turns "$(smoke 3 6)" \
    --use_vllm true \
    --vllm_mode colocate \
    --vllm_gpu_memory_utilization 0.3 \
    --vllm_max_model_len 1024 \
    --torch_dtype float32 \
    --num_generations 4 \
    --per_device_train_batch_size 4 \
    --gradient_accumulation_steps "$(smoke 1 4)" \
    --max_completion_length "$(smoke 32 64)" \
    --temperature 1.0 \
    --beta 0.0 \
    --learning_rate 5e-5 \
    --max_steps "$(smoke 2 40)" \
    --logging_steps 1 \
    --save_steps "$(smoke 2 20)" \
    --gradient_checkpointing false \
    --log_completions true \
    --report_to "$(smoke none tensorboard)" \
    --output_dir "$OUT"

# Each game's guesses and verdicts: rollout_infos.env_infos in completions.jsonl.
echo "completions: $(last_run "$OUT")/completions.jsonl"
echo "checkpoint: $(last_checkpoint "$OUT")"
