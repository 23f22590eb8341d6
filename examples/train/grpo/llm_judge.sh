#!/usr/bin/env bash
# GRPO scored by a generative judge (`--reward_funcs llm_judge`): a chat model served by `swiftlike deploy` (any
# OpenAI-compatible server works: `vllm serve`, a hosted API) is asked about each completion with the prompt template
# judge_template.txt ({prompt}, {solution}, {completion} filled from the row), and the last verdict line
# `{score_label}: N` of its reply (a label drawn per run, which the completion cannot forge), 0-10, becomes a reward in
# [0, 1] beside format_hash. A reply without a verdict, or cut at --judge_max_tokens, is missing, not 0: left out of its
# group's advantage and counted in rewards/llm_judge/missing. With `--reward_on_error skip` a judge that stops
# answering for --reward_server_timeout seconds drops the affected groups (reward_on_error/dropped_groups) instead
# of stopping the run. The default judge is the tiny random-weight model, which never writes a score: every judge
# reward is missing, and the script shows the wiring only; JUDGE=HuggingFaceTB/SmolLM2-135M-Instruct (or a larger
# chat model) gives scores. Offline (MODEL=, JUDGE= to change). Smoke mode (EXAMPLE_SMOKE=1): 2 steps.
set -euo pipefail
source "$(dirname "$0")/../../_common.sh"
OUT=$EXAMPLE_OUTPUT/llm_judge
MODEL=${MODEL:-tiny-random/qwen2_5}
JUDGE=${JUDGE:-tiny-random/qwen2_5}
PORT=$(free_port)

start_server "$OUT/judge.log" swiftlike deploy \
    --model "$JUDGE" \
    --infer_backend pt \
    --torch_dtype float32 \
    --api_key judge-key \
    --port "$PORT"
JUDGE_PID=$SERVER_PID
wait_for_server "http://127.0.0.1:$PORT/health" "$JUDGE_PID" "$OUT/judge.log"

swiftlike rlhf \
    --rlhf_type grpo \
    --model "$MODEL" \
    --dataset "swiftlike/arithmetic#$(smoke 8 64)" \
    --reward_funcs llm_judge format_hash \
    --reward_weights 1.0 0.5 \
    --judge_model_server "http://127.0.0.1:$PORT/v1" \
    --judge_model_server_api_key judge-key \
    --judge_prompt_template "$(dirname "$0")/judge_template.txt" \
    --judge_temperature 0 \
    --judge_max_tokens "$(smoke 16 256)" \
    --reward_server_timeout 30 \
    --reward_on_error skip \
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

stop_server "$JUDGE_PID"
RUN=$(last_run "$OUT/grpo")
echo "GRPO run: $RUN"
echo "judge rewards, missing ones and dropped groups per step:"
grep -o '"rewards/llm_judge/[a-z]*": [0-9.e+-]*\|"reward_on_error/dropped_groups": [0-9.]*' "$RUN/logging.jsonl" || true
