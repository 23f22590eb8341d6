#!/usr/bin/env bash
# Agent SFT end to end on SmolLM2-135M-Instruct, offline: the base model and the model after LoRA SFT on the
# built-in tool traces (swiftlike/calculator-agent, hermes calls) each answer the same held-out questions of
# swiftlike/calculator-agent-test as a real tool loop: `swiftlike deploy` (vLLM) parses the calls, the openai
# client runs the built-in calculator on them and sends the results back as `tool` messages. The report gives
# the share answered right, before and after, with 95% intervals, and the share of well-formed calls.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=output/agent_sft_demo
MODEL=HuggingFaceTB/SmolLM2-135M-Instruct
export SWIFTLIKE_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=2 VLLM_ENABLE_V1_MULTIPROCESSING=0 TOKENIZERS_PARALLELISM=false
export PYTHONPATH="$PWD:$PWD/scripts${PYTHONPATH:+:$PYTHONPATH}"
PY=${DEMO_PYTHON:-.venv/bin/python}
SWIFTLIKE="$PY -m swiftlike.cli.main"
N_HELD=${AGENT_DEMO_HELD:-100}
N_TRAIN=${AGENT_DEMO_TRAIN:-128}
rm -rf "$OUT" && mkdir -p "$OUT"
START=$(date +%s)
PORT=$($PY -c 'from swiftlike.utils.net import free_port; print(free_port())')
DEPLOY_PID=

stop_deploy() {
  [ -n "$DEPLOY_PID" ] || return 0
  kill -TERM "$DEPLOY_PID" 2>/dev/null || true
  for _ in $(seq 60); do kill -0 "$DEPLOY_PID" 2>/dev/null || break; sleep 1; done
  kill -KILL "$DEPLOY_PID" 2>/dev/null || true
  wait "$DEPLOY_PID" 2>/dev/null || true
  DEPLOY_PID=
}
trap stop_deploy EXIT

tool_loops() {  # tool_loops <stage> <model>: the held-out questions as tool loops against a fresh deploy
  local stage=$1 model=$2
  $SWIFTLIKE deploy --model "$model" --infer_backend vllm --agent_template hermes --torch_dtype float32 \
    --vllm_max_model_len 2048 --vllm_max_num_seqs 8 --port "$PORT" >"$OUT/${stage}_deploy.log" 2>&1 &
  DEPLOY_PID=$!
  for _ in $(seq 600); do
    curl -sf -o /dev/null "http://127.0.0.1:$PORT/health" && break
    kill -0 "$DEPLOY_PID" 2>/dev/null || { tail -30 "$OUT/${stage}_deploy.log"; exit 1; }
    sleep 1
  done
  $PY scripts/agent_demo.py loop "http://127.0.0.1:$PORT/v1" "$model" "$OUT/${stage}_loops.jsonl" "$N_HELD"
  stop_deploy
}

echo "=== 1/4 base model: $N_HELD held-out questions as tool loops ==="
tool_loops base "$MODEL"

echo "=== 2/4 LoRA SFT on $N_TRAIN tool traces (hermes calls; loss on calls and answers only) ==="
$SWIFTLIKE sft --model "$MODEL" --dataset "swiftlike/calculator-agent#$N_TRAIN" --agent_template hermes \
  --tuner_type lora --lora_rank 16 --lora_alpha 32 --target_modules all-linear --torch_dtype float32 \
  --num_train_epochs 1 --per_device_train_batch_size 4 --gradient_accumulation_steps 1 \
  --learning_rate ${AGENT_DEMO_LR:-5e-4} --warmup_ratio 0.05 --max_length 1024 --gradient_checkpointing false \
  --logging_steps 5 --save_steps 100000 --report_to none --seed 42 --output_dir "$OUT/sft"
RUN_DIR=$(ls -d "$OUT"/sft/v*-* | tail -n 1)
CKPT=$(ls -d "$RUN_DIR"/checkpoint-* | sort -V | tail -n 1)
$SWIFTLIKE export --adapters "$CKPT" --merge_lora true

echo "=== 3/4 after SFT: the same questions as tool loops ==="
tool_loops sft "$CKPT-merged"

echo "=== 4/4 report ==="
status=0
$PY scripts/agent_demo.py report "$OUT" | tee "$OUT/report.txt" || status=$?
echo "agent sft demo took $(( ($(date +%s) - START) / 60 )) min $(( ($(date +%s) - START) % 60 )) s"
exit $status
