#!/usr/bin/env bash
# GKD (on-policy distillation, ms-swift's examples/train/rlhf/gkd) with an in-process teacher: the student
# samples its own answers on a colocated vLLM engine (--lmbda 1: every micro-batch on-policy) and learns the
# teacher's next-token distributions on them (generalized JSD, --beta 0.5). With --tuner_type lora and
# --teacher_model equal to --model (the default here) the teacher is the student with its adapter disabled (no
# second copy); pass TEACHER=<dir> for a real teacher (e.g. an SFT'd and merged model, as `make demo-gkd`
# does). Offline, tiny model (MODEL=HuggingFaceTB/SmolLM2-135M-Instruct for a real one). Smoke mode
# (EXAMPLE_SMOKE=1): 2 steps.
set -euo pipefail
source "$(dirname "$0")/../../_common.sh"
OUT=$EXAMPLE_OUTPUT/gkd
MODEL=${MODEL:-tiny-random/qwen2_5}
TEACHER=${TEACHER:-$MODEL}

swiftlike rlhf \
    --rlhf_type gkd \
    --model "$MODEL" \
    --teacher_model "$TEACHER" \
    --tuner_type lora \
    --dataset "swiftlike/alpaca-mini#$(smoke 8 200)" \
    --split_dataset_ratio 0 \
    --lmbda 1 \
    --beta 0.5 \
    --temperature 0.9 \
    --sft_alpha 0 \
    --use_vllm true \
    --vllm_mode colocate \
    --vllm_max_model_len 1024 \
    --torch_dtype float32 \
    --per_device_train_batch_size 4 \
    --gradient_accumulation_steps 1 \
    --max_completion_length "$(smoke 16 64)" \
    --learning_rate 1e-4 \
    --max_steps "$(smoke 2 50)" \
    --logging_steps 1 \
    --save_steps "$(smoke 2 25)" \
    --gradient_checkpointing false \
    --report_to "$(smoke none tensorboard)" \
    --output_dir "$OUT"

echo "checkpoint: $(last_checkpoint "$OUT")"
