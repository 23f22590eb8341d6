#!/usr/bin/env bash
# Agent SFT (ms-swift's examples/train/agent): LoRA on tool traces in ms-swift's agent format, the built-in
# swiftlike/calculator-agent (a `tools` column; tool_call / tool_response turns; final answers '#### N').
# SmolLM2's chat template has no tool format, so --agent_template hermes writes the tool list into the system
# turn and the calls as <tool_call> blocks; loss falls on the calls and the answers, never on tool results.
# Serve the result with tools: swiftlike deploy --adapters <printed checkpoint> --agent_template hermes
# (examples/deploy/tools.sh). Smoke mode (EXAMPLE_SMOKE=1): 2 steps on 16 rows.
set -euo pipefail
source "$(dirname "$0")/../../_common.sh"
OUT=$EXAMPLE_OUTPUT/agent_sft

swiftlike sft \
    --model HuggingFaceTB/SmolLM2-135M-Instruct \
    --tuner_type lora \
    --dataset "swiftlike/calculator-agent#$(smoke 16 320)" \
    --agent_template hermes \
    --loss_scale default \
    --torch_dtype float32 \
    --num_train_epochs 1 \
    --max_steps "$(smoke 2 -1)" \
    --per_device_train_batch_size 4 \
    --gradient_accumulation_steps "$(smoke 1 2)" \
    --learning_rate 5e-4 \
    --warmup_ratio 0.05 \
    --lora_rank 16 \
    --lora_alpha 32 \
    --target_modules all-linear \
    --max_length 1024 \
    --logging_steps "$(smoke 1 5)" \
    --save_steps "$(smoke 2 20)" \
    --save_total_limit 2 \
    --gradient_checkpointing false \
    --report_to "$(smoke none tensorboard)" \
    --output_dir "$OUT"

echo "checkpoint: $(last_checkpoint "$OUT")"
