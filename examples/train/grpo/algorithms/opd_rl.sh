#!/usr/bin/env bash
# On-policy distillation inside GRPO (OPD-RL, ms-swift's --teacher_model / --teacher_model_server with
# --rlhf_type grpo): the teacher's log-prob of each sampled token, less the student's, joins that token's
# advantage (--teacher_kl_coef), beside the task reward. Here the teacher is served: `swiftlike deploy` in the
# background, asked for the sampled tokens' prompt log-probs of each micro-batch in one request (ms-swift's
# prompt_logprobs=0). A served teacher answers at temperature 1, so GRPO samples at 1.0. Offline, tiny model
# (MODEL= and TEACHER= to change; the teacher must share the student's tokenizer; for an in-process teacher,
# pass --teacher_model "$TEACHER" instead of the server). Smoke mode (EXAMPLE_SMOKE=1): 2 steps.
set -euo pipefail
source "$(dirname "$0")/../../../_common.sh"
OUT=$EXAMPLE_OUTPUT/grpo_opd_rl
MODEL=${MODEL:-tiny-random/qwen2_5}
TEACHER=${TEACHER:-$MODEL}
PORT=$(free_port)

start_server "$OUT/teacher.log" swiftlike deploy \
    --model "$TEACHER" \
    --infer_backend vllm \
    --torch_dtype float32 \
    --vllm_max_model_len 1024 \
    --port "$PORT"
TEACHER_PID=$SERVER_PID
wait_for_server "http://127.0.0.1:$PORT/health" "$TEACHER_PID" "$OUT/teacher.log"

swiftlike rlhf \
    --rlhf_type grpo \
    --model "$MODEL" \
    --tuner_type lora \
    --dataset "swiftlike/arithmetic#$(smoke 8 2000)" \
    --reward_funcs accuracy format_hash \
    --teacher_model_server "http://127.0.0.1:$PORT" \
    --teacher_kl_coef 1.0 \
    --temperature 1.0 \
    --torch_dtype float32 \
    --num_generations 4 \
    --per_device_train_batch_size "$(smoke 4 16)" \
    --gradient_accumulation_steps 1 \
    --max_completion_length "$(smoke 16 64)" \
    --beta 0 \
    --learning_rate 1e-4 \
    --max_steps "$(smoke 2 50)" \
    --logging_steps 1 \
    --save_steps "$(smoke 2 25)" \
    --gradient_checkpointing false \
    --report_to "$(smoke none tensorboard)" \
    --output_dir "$OUT"

stop_server "$TEACHER_PID"
echo "checkpoint: $(last_checkpoint "$OUT")"
