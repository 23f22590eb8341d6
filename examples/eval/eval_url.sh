#!/usr/bin/env bash
# Evaluation against a running server: the script starts `swiftlike deploy` (pt engine, tiny random-weight Qwen2.5
# model, an API key) in the background, evaluates it over the OpenAI API with pass@2 on the `math` benchmark, and
# stops it. Any OpenAI-compatible endpoint works the same way with --eval_url. Smoke mode (EXAMPLE_SMOKE=1):
# 4 questions, 16 new tokens.
set -euo pipefail
source "$(dirname "$0")/../_common.sh"
OUT=$EXAMPLE_OUTPUT/eval_url
PORT=$(free_port)

start_server "$OUT/deploy.log" swiftlike deploy \
    --model tiny-random/qwen2_5 \
    --infer_backend pt \
    --api_key example-key \
    --port "$PORT"
DEPLOY_PID=$SERVER_PID
wait_for_server "http://127.0.0.1:$PORT/health" "$DEPLOY_PID" "$OUT/deploy.log"

swiftlike eval \
    --eval_url "http://127.0.0.1:$PORT/v1" \
    --eval_api_key example-key \
    --eval_dataset math \
    --eval_limit "$(smoke 4 200)" \
    --eval_num_samples 2 \
    --temperature 0.8 \
    --max_new_tokens "$(smoke 16 256)" \
    --eval_concurrency 4 \
    --eval_output_dir "$OUT"

stop_server "$DEPLOY_PID"
