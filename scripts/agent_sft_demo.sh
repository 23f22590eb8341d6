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
source scripts/agent_demo_common.sh

echo "=== 1/4 base model: $N_HELD held-out questions as tool loops ==="
tool_loops base "$MODEL"

echo "=== 2/4 LoRA SFT on $N_TRAIN tool traces (hermes calls; loss on calls and answers only) ==="
agent_sft_warmup "$OUT/sft" "$MODEL" "$N_TRAIN"

echo "=== 3/4 after SFT: the same questions as tool loops ==="
tool_loops sft "$SFT_CKPT"

echo "=== 4/4 report ==="
status=0
$PY scripts/agent_demo.py report "$OUT" | tee "$OUT/report.txt" || status=$?
echo "agent sft demo took $(( ($(date +%s) - START) / 60 )) min $(( ($(date +%s) - START) % 60 )) s"
exit $status
