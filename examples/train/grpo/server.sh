#!/usr/bin/env bash
# GRPO in server mode: a `swiftlike rollout` vLLM server generates, the trainer (another process) learns and pushes
# its new weights to the server after every step (full fine-tuning here: every weight travels over HTTP). The
# script starts the server in the background, trains, then stops the server. Offline, on the tiny random-weight
# Qwen2.5 model (MODEL=HuggingFaceTB/SmolLM2-135M-Instruct for a real one). Smoke mode (EXAMPLE_SMOKE=1): 2 steps.
set -euo pipefail
source "$(dirname "$0")/../../_common.sh"
OUT=$EXAMPLE_OUTPUT/grpo_server
MODEL=${MODEL:-tiny-random/qwen2_5}
PORT=$(free_port)

start_server "$OUT/rollout.log" swiftlike rollout \
    --model "$MODEL" \
    --torch_dtype float32 \
    --vllm_gpu_memory_utilization 0.3 \
    --vllm_max_model_len 1024 \
    --port "$PORT"
ROLLOUT_PID=$SERVER_PID
wait_for_server "http://127.0.0.1:$PORT/health" "$ROLLOUT_PID" "$OUT/rollout.log"

swiftlike rlhf \
    --rlhf_type grpo \
    --model "$MODEL" \
    --tuner_type full \
    --dataset "swiftlike/arithmetic#$(smoke 8 2000)" \
    --reward_funcs accuracy format_hash \
    --use_vllm true \
    --vllm_mode server \
    --vllm_server_host 127.0.0.1 \
    --vllm_server_port "$PORT" \
    --async_generate "$(smoke false true)" \
    --torch_dtype float32 \
    --num_generations 4 \
    --per_device_train_batch_size 4 \
    --gradient_accumulation_steps 2 \
    --max_completion_length "$(smoke 16 64)" \
    --learning_rate 1e-5 \
    --max_steps "$(smoke 2 50)" \
    --logging_steps 1 \
    --save_steps "$(smoke 2 25)" \
    --gradient_checkpointing false \
    --log_rollout_offpolicy_metrics true \
    --report_to "$(smoke none tensorboard)" \
    --output_dir "$OUT"

stop_server "$ROLLOUT_PID"
echo "checkpoint: $(last_checkpoint "$OUT")"
