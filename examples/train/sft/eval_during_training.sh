#!/usr/bin/env bash
# Benchmarks during training (ms-swift's --eval_use_evalscope): every --eval_steps and at the end, the model being
# trained is served in-process to the eval backend and scored on --eval_dataset; eval_bench/<dataset>/accuracy is
# logged beside the loss and drawn under images/, each step's report kept under <run dir>/eval_bench/step-N/.
# The backend follows the names, as in `swiftlike eval`: here swiftlike's own math set and a reasoning-gym task;
# `--eval_dataset gsm8k` would run evalscope (add --eval_backend lm_eval for lm-evaluation-harness).
# Smoke mode (EXAMPLE_SMOKE=1): 2 steps, 3 questions.
set -euo pipefail
source "$(dirname "$0")/../../_common.sh"
OUT=$EXAMPLE_OUTPUT/sft_eval_during_training

swiftlike sft \
    --model HuggingFaceTB/SmolLM2-135M-Instruct \
    --dataset "swiftlike/arithmetic-sft#$(smoke 16 2000)" \
    --torch_dtype float32 \
    --max_steps "$(smoke 2 200)" \
    --per_device_train_batch_size 4 \
    --gradient_accumulation_steps 2 \
    --learning_rate 2e-4 \
    --max_length 512 \
    --save_steps "$(smoke 2 100)" \
    --eval_steps "$(smoke 1 50)" \
    --eval_use_evalscope true \
    --eval_dataset math rg:basic_arithmetic \
    --eval_limit "$(smoke 3 50)" \
    --eval_generation_config "{\"max_tokens\": $(smoke 16 128)}" \
    --report_to none \
    --output_dir "$OUT"

echo "benchmarks: $(last_run "$OUT")/eval_bench"
