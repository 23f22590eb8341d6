#!/usr/bin/env bash
# Agent SFT with the model's own tool template (--template tokenizer, no --agent_template): Qwen2.5's chat
# template renders `tools`, so the rows go to apply_chat_template(messages, tools=tools) unchanged and deploy
# later parses the same <tool_call> blocks. The tiny random Qwen2.5 keeps it offline and fast; with a real
# Qwen2.5 (--model Qwen/Qwen2.5-0.5B-Instruct) it is the same command. Smoke mode (EXAMPLE_SMOKE=1): 2 steps.
set -euo pipefail
source "$(dirname "$0")/../../_common.sh"
OUT=$EXAMPLE_OUTPUT/agent_sft_tokenizer

swiftlike sft \
    --model tiny-random/qwen2_5 \
    --template tokenizer \
    --dataset "swiftlike/calculator-agent#$(smoke 16 64)" \
    --tuner_type lora \
    --num_train_epochs 1 \
    --max_steps "$(smoke 2 8)" \
    --per_device_train_batch_size 2 \
    --learning_rate 1e-4 \
    --max_length 1024 \
    --logging_steps 1 \
    --save_steps "$(smoke 2 8)" \
    --gradient_checkpointing false \
    --report_to none \
    --output_dir "$OUT"

echo "checkpoint: $(last_checkpoint "$OUT")"
