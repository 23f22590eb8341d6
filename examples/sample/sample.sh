#!/usr/bin/env bash
# Rejection sampling (ms-swift's `swift sample`): 8 answers per arithmetic question from SmolLM2 on vLLM
# (continuous batching across prompts), scored by the `accuracy` outcome reward; the 2 best correct answers of each
# question are kept as SFT rows, with the worst answer as `rejected_response` (a DPO pair). Questions every sample
# already solves are dropped (--easy_query_threshold 1.0). Rerun with --resume true after an interruption: the
# output is the file an uninterrupted run writes. Smoke mode (EXAMPLE_SMOKE=1): 4 questions, 32 new tokens.
set -euo pipefail
source "$(dirname "$0")/../_common.sh"
OUT=$EXAMPLE_OUTPUT/sample

swiftlike sample \
    --model HuggingFaceTB/SmolLM2-135M-Instruct \
    --sampler_engine vllm \
    --torch_dtype float32 \
    --vllm_max_model_len 1024 \
    --dataset "swiftlike/arithmetic#$(smoke 4 200)" \
    --num_return_sequences 8 \
    --n_best_to_keep 2 \
    --orm_model accuracy \
    --easy_query_threshold 1.0 \
    --temperature 1.0 \
    --max_new_tokens "$(smoke 32 256)" \
    --output_dir "$OUT" \
    --output_file arithmetic.jsonl \
    --override_exist_file true

echo "$(wc -l <"$OUT/arithmetic.jsonl") rows in $OUT/arithmetic.jsonl"
