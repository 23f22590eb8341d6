#!/usr/bin/env bash
# reasoning-gym tasks as eval sets, fully offline: each task's generator writes the questions (seed 10000 on, so
# they are held out from GRPO rows made with the default seed 0) and its own score_answer scores the reply's
# <answer>...</answer>. Any of reasoning-gym's ~100 tasks works as rg:<task>; --eval_dataset_args sets the size,
# the seed and the task's own options. Smoke mode (EXAMPLE_SMOKE=1): 4 questions each, 32 new tokens.
set -euo pipefail
source "$(dirname "$0")/../_common.sh"

swiftlike eval \
    --model HuggingFaceTB/SmolLM2-135M-Instruct \
    --infer_backend vllm \
    --torch_dtype float32 \
    --vllm_max_model_len 2048 \
    --eval_dataset rg:basic_arithmetic rg:leg_counting \
    --eval_dataset_args '{"rg:basic_arithmetic": {"min_terms": 2, "max_terms": 2, "max_digits": 2}}' \
    --eval_limit "$(smoke 4 100)" \
    --max_new_tokens "$(smoke 32 256)" \
    --eval_output_dir "$EXAMPLE_OUTPUT/eval_reasoning_gym"
