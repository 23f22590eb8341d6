#!/usr/bin/env bash
# GRPO data parallel on two processes (gloo on CPU, NCCL on GPU), the ms-swift way: NPROC_PER_NODE reruns the
# command under torchrun. bf16 with top-k/top-p is safe: the trainer keeps every sampled token in its kept set
# (sampling/forced_keep_frac in the log). Offline: the tiny random model and the built-in arithmetic prompts.
set -euo pipefail
export SWIFTLIKE_OFFLINE=1
NPROC_PER_NODE=2 swiftlike rlhf --rlhf_type grpo --model tiny-random/qwen2_5 --dataset 'swiftlike/arithmetic#32' \
    --reward_funcs format_hash --loss_type dapo --num_generations 4 --per_device_train_batch_size 4 \
    --gradient_accumulation_steps 2 --max_completion_length 16 --max_steps 2 --logging_steps 1 \
    --top_k 20 --top_p 0.9 --use_vllm false --gradient_checkpointing false --report_to none \
    --output_dir output/examples/grpo_two_processes
