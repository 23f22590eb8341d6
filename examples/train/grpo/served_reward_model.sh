#!/usr/bin/env bash
# GRPO scored by a served reward model: a LoRA reward model (`--rlhf_type rm`) on the built-in preference pairs,
# served by `swiftlike deploy` (detected as a sequence classifier from the checkpoint: POST /classify, vLLM's
# route), then GRPO with `--reward_model_server` beside a rule reward. The served scores equal what
# `--reward_model <checkpoint>` would give in-process. The script starts the server in the background, trains, then
# stops it. Offline, tiny model (MODEL= to change). Smoke mode (EXAMPLE_SMOKE=1): 2 steps of each.
set -euo pipefail
source "$(dirname "$0")/../../_common.sh"
OUT=$EXAMPLE_OUTPUT/served_reward_model
MODEL=${MODEL:-tiny-random/qwen2_5}
PORT=$(free_port)

swiftlike rlhf \
    --rlhf_type rm \
    --model "$MODEL" \
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

start_server "$OUT/rm_server.log" swiftlike deploy \
    --model "$RM" \
    --infer_backend pt \
    --torch_dtype float32 \
    --api_key rm-key \
    --port "$PORT"
RM_PID=$SERVER_PID
wait_for_server "http://127.0.0.1:$PORT/health" "$RM_PID" "$OUT/rm_server.log"
curl -sf "http://127.0.0.1:$PORT/classify" -H 'Authorization: Bearer rm-key' -H 'content-type: application/json' \
    -d '{"messages": [{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "#### 4"}],
         "use_activation": false}'
echo

swiftlike rlhf \
    --rlhf_type grpo \
    --model "$MODEL" \
    --dataset "swiftlike/arithmetic#$(smoke 8 64)" \
    --reward_funcs format_hash \
    --reward_model_server "http://127.0.0.1:$PORT" \
    --reward_model_server_api_key rm-key \
    --reward_weights 1.0 0.5 \
    --num_generations 4 \
    --per_device_train_batch_size 4 \
    --gradient_accumulation_steps 1 \
    --max_completion_length "$(smoke 16 64)" \
    --max_steps "$(smoke 2 50)" \
    --logging_steps 1 \
    --log_completions true \
    --gradient_checkpointing false \
    --report_to none \
    --output_dir "$OUT/grpo"

stop_server "$RM_PID"
echo "reward model: $RM"
echo "GRPO run: $(last_run "$OUT/grpo")"
