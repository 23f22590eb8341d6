#!/usr/bin/env bash
# Multi-turn GRPO on a verifiers environment, unchanged: verifiers_guess/ is a verifiers environment package
# (guess a number, told higher or lower; its rubric pays for finding it in few guesses), installed into
# .venv-verifiers by `make setup` as any verifiers environment is installed. The `verifiers` environment plays
# each row's entry there through the environment's own rollout and rubric, while swiftlike samples every turn
# (token in, token out). Rows come from the environment's own dataset: scripts/make_verifiers_dataset.py.
# LoRA on SmolLM2-135M-Instruct, vLLM colocated. Smoke mode (EXAMPLE_SMOKE=1): 2 steps of 2 entries x 4.
set -euo pipefail
source "$(dirname "$0")/../../../_common.sh"
OUT=$EXAMPLE_OUTPUT/grpo_multi_turn_verifiers
ROWS=$EXAMPLE_OUTPUT/verifiers_guess_rows.jsonl
mkdir -p "$EXAMPLE_OUTPUT"

python scripts/make_verifiers_dataset.py guess-number-vf --env_args '{"size": 256, "max_turns": 4}' --out "$ROWS"

swiftlike rlhf \
    --rlhf_type grpo \
    --model "${MODEL:-HuggingFaceTB/SmolLM2-135M-Instruct}" \
    --tuner_type lora \
    --dataset "$ROWS#$(smoke 8 256)" \
    --multi_turn_scheduler gym_scheduler \
    --use_gym_env true \
    --max_turns 4 \
    --use_vllm true \
    --vllm_mode colocate \
    --vllm_gpu_memory_utilization 0.3 \
    --vllm_max_model_len 1024 \
    --torch_dtype float32 \
    --num_generations 4 \
    --per_device_train_batch_size "$(smoke 4 8)" \
    --gradient_accumulation_steps 1 \
    --max_completion_length "$(smoke 32 48)" \
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

# Each episode's rubric metrics and stop condition: rollout_infos.env_infos in completions.jsonl.
echo "completions: $(last_run "$OUT")/completions.jsonl"
echo "checkpoint: $(last_checkpoint "$OUT")"
