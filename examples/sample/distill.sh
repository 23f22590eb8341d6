#!/usr/bin/env bash
# Distillation data from a served teacher (ms-swift's `--sampler_type distill`): `swiftlike deploy` serves the
# teacher in the background, and `swiftlike sample` asks it over the OpenAI API (--sampler_engine client, the URL in
# --engine_kwargs) for 2 answers per prompt; a reasoning model's reasoning_content would be kept in <think> tags.
# Offline, tiny model (TEACHER= to change). Smoke mode (EXAMPLE_SMOKE=1): 4 prompts, 16 new tokens.
set -euo pipefail
source "$(dirname "$0")/../_common.sh"
OUT=$EXAMPLE_OUTPUT/sample_distill
TEACHER=${TEACHER:-tiny-random/qwen2_5}
PORT=$(free_port)

start_server "$OUT/teacher.log" swiftlike deploy \
    --model "$TEACHER" \
    --served_model_name teacher \
    --torch_dtype float32 \
    --port "$PORT"
TEACHER_PID=$SERVER_PID
wait_for_server "http://127.0.0.1:$PORT/health" "$TEACHER_PID" "$OUT/teacher.log"

swiftlike sample \
    --sampler_type distill \
    --model teacher \
    --engine_kwargs "{\"base_url\": \"http://127.0.0.1:$PORT/v1\", \"max_concurrency\": 8}" \
    --dataset "swiftlike/alpaca-mini#$(smoke 4 100)" \
    --num_return_sequences 2 \
    --max_new_tokens "$(smoke 16 128)" \
    --output_dir "$OUT" \
    --output_file distill.jsonl \
    --override_exist_file true

stop_server "$TEACHER_PID"
echo "$(wc -l <"$OUT/distill.jsonl") rows in $OUT/distill.jsonl"
