#!/usr/bin/env bash
# Tool calling over the OpenAI API (ms-swift's deploy + agent example): `swiftlike deploy` on vLLM renders a
# request's `tools` with --agent_template hermes, parses the calls a model writes into `tool_calls`, and enforces
# `tool_choice` required / a named function by constrained decoding. curl sends a forced call; the openai client
# then runs one tool loop (call -> the calculator's result as a `tool` message -> the final answer), streamed.
# Offline: SmolLM2-135M-Instruct (its template has no tool format of its own, so --agent_template names one).
# Smoke mode (EXAMPLE_SMOKE=1): short answers.
set -euo pipefail
source "$(dirname "$0")/../_common.sh"
OUT=$EXAMPLE_OUTPUT/deploy_tools
MODEL=HuggingFaceTB/SmolLM2-135M-Instruct
PORT=$(free_port)
MAX_TOKENS=$(smoke 48 256)

start_server "$OUT/deploy.log" swiftlike deploy \
    --model "$MODEL" \
    --infer_backend vllm \
    --agent_template hermes \
    --torch_dtype float32 \
    --vllm_gpu_memory_utilization 0.3 \
    --vllm_max_model_len 2048 \
    --max_new_tokens 256 \
    --port "$PORT"
DEPLOY_PID=$SERVER_PID
wait_for_server "http://127.0.0.1:$PORT/health" "$DEPLOY_PID" "$OUT/deploy.log"

TOOLS='[{"type": "function", "function": {"name": "calculator",
         "description": "Evaluate an arithmetic expression exactly.",
         "parameters": {"type": "object", "properties": {"expression": {"type": "string", "maxLength": 40}},
                        "required": ["expression"]}}}]'
echo "--- curl: a call forced by tool_choice"
curl -sf "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' -d "{
    \"model\": \"$MODEL\", \"tools\": $TOOLS,
    \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"calculator\"}},
    \"messages\": [{\"role\": \"user\", \"content\": \"What is 123 * 4567?\"}],
    \"max_tokens\": $MAX_TOKENS, \"temperature\": 0}"
echo
echo "--- openai client: a tool loop, the final answer streamed"
PORT=$PORT MODEL=$MODEL MAX_TOKENS=$MAX_TOKENS TOOLS=$TOOLS python - <<'PY'
import json
import os

from openai import OpenAI

from swiftlike.tools import call_tool

client = OpenAI(base_url=f"http://127.0.0.1:{os.environ['PORT']}/v1", api_key="unused")
model, tools, max_tokens = os.environ["MODEL"], json.loads(os.environ["TOOLS"]), int(os.environ["MAX_TOKENS"])
messages = [{"role": "user", "content": "What is 123 * 4567?"}]
reply = client.chat.completions.create(model=model, messages=messages, tools=tools, tool_choice="required",
                                       max_tokens=max_tokens, temperature=0).choices[0]
assert reply.finish_reason == "tool_calls", reply
call = reply.message.tool_calls[0]
result = call_tool(call.function.name, json.loads(call.function.arguments))
print(f"call: {call.function.name}({call.function.arguments}) -> {result}")
messages += [reply.message.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": call.id, "content": result}]
stream = client.chat.completions.create(model=model, messages=messages, tools=tools, stream=True,
                                        max_tokens=max_tokens, temperature=0)
text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
print("final answer:", text)
PY

stop_server "$DEPLOY_PID"
tail -1 "$OUT/deploy.log"
