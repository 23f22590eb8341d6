#!/usr/bin/env bash
# lm-evaluation-harness's own gsm8k task (its prompt, few-shot examples, answer filters and exact match) on
# SmolLM2-135M-Instruct, which swiftlike serves to the harness on the vLLM engine for the run's length. Online,
# `--eval_dataset gsm8k` alone reads the hub like any lm-eval run; this machine has none, so the task reads a local
# file in GSM8K's own format, which the script writes from swiftlike's built-in `math` set (answers as "#### N").
# Smoke mode (EXAMPLE_SMOKE=1): 4 questions, 32 new tokens.
set -euo pipefail
source "$(dirname "$0")/../_common.sh"
DATA=$EXAMPLE_OUTPUT/eval_data/gsm8k.jsonl

python - "$DATA" <<'PY'
import json, pathlib, sys
from swiftlike.eval.data import BUILTIN
out = pathlib.Path(sys.argv[1])
out.parent.mkdir(parents=True, exist_ok=True)
rows = [json.loads(line) for line in BUILTIN["math"].read_text().splitlines()]
out.write_text("".join(json.dumps({"question": r["question"], "answer": f"#### {r['answer']}"}) + "\n" for r in rows))
PY

swiftlike eval \
    --model HuggingFaceTB/SmolLM2-135M-Instruct \
    --infer_backend vllm \
    --torch_dtype float32 \
    --vllm_max_model_len 2048 \
    --eval_backend lm_eval \
    --eval_dataset gsm8k \
    --eval_dataset_args "{\"gsm8k\": {\"local_path\": \"$DATA\", \"few_shot_num\": $(smoke 0 3)}}" \
    --eval_limit "$(smoke 4 100)" \
    --eval_generation_config "{\"max_tokens\": $(smoke 32 256), \"temperature\": 0}" \
    --eval_output_dir "$EXAMPLE_OUTPUT/eval_lm_eval"
