#!/usr/bin/env bash
# The main job: GRPO with LoRA on SmolLM2-135M-Instruct, rollouts from a colocated vLLM engine on CPU, on the
# built-in verifiable arithmetic task, with greedy accuracy on held-out questions before and after.
#
# At temperature 1 the base model almost never writes the asked '#### N' last line (about 1 in 128 samples,
# none of them right), so GRPO would have no reward signal to start from. A short SFT warm-up on 100 worked
# answers teaches the format (ms-swift's usual SFT-then-RL recipe); GRPO then trains the merged result with
# the accuracy reward alone. (A format reward on top teaches a 135M model to print the prompt's example
# '#### 42' without working: it pays for the format and is the easiest reward to get.)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=output/demo
MODEL=HuggingFaceTB/SmolLM2-135M-Instruct
# The packaged (4-bit GGUF origin) weights, even where a hub is reachable: the demo is the same everywhere.
export SWIFTLIKE_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=2
SWIFTLIKE=.venv/bin/swiftlike
PY=.venv/bin/python
rm -rf "$OUT" && mkdir -p "$OUT"
START=$(date +%s)
$PY scripts/demo_report.py split "$OUT"
evaluate() {  # evaluate <result file> <model args...>: greedy answers to the 64 held-out questions
  # pt engine: with an adapter, vllm-cpu's LoRA kernels make vLLM the slower engine here
  local result=$1; shift
  $SWIFTLIKE infer "$@" --infer_backend pt --max_batch_size 64 --val_dataset "$OUT/held_out.jsonl" \
    --temperature 0 --max_new_tokens 64 --result_path "$result"
}

echo "=== 1/5 base model on the held-out questions ==="
evaluate "$OUT/base.jsonl" --model "$MODEL"

echo "=== 2/5 SFT warm-up: 25 LoRA steps on 100 worked answers (format '#### N') ==="
$SWIFTLIKE sft --model "$MODEL" --dataset "$OUT/warmup_sft.jsonl" --num_train_epochs 1 \
  --per_device_train_batch_size 4 --gradient_accumulation_steps 1 --learning_rate 2e-4 \
  --lora_rank 16 --lora_alpha 32 --gradient_checkpointing false --save_steps 1000 --logging_steps 5 \
  --report_to none --output_dir "$OUT/sft"
SFT_CKPT=$(ls -d "$OUT"/sft/v*-*/checkpoint-* | tail -n 1)
# Merged, so GRPO trains a fresh adapter on top and its KL reference is the warmed-up model, not the base.
$SWIFTLIKE export --adapters "$SFT_CKPT" --merge_lora true
WARM="$SFT_CKPT-merged"
evaluate "$OUT/before_grpo.jsonl" --model "$WARM"

echo "=== 3/5 GRPO on the warmed-up model: LoRA, colocated vLLM, merged-weight sync; reward: accuracy ==="
# 8 prompts x 4 completions per step: more questions per step, so the reward follows their difficulty less;
# a KL term to the warmed-up model (beta 0.04) holds the drift. Merged-weight sync rather than
# --vllm_enable_lora: vllm-cpu's LoRA kernels generate several times slower than the plain model
# (docs/rlhf.md), and generation is a large part of a CPU step.
$SWIFTLIKE rlhf --rlhf_type grpo --model "$WARM" --dataset swiftlike/arithmetic \
  --reward_funcs accuracy \
  --num_generations 4 --per_device_train_batch_size 16 --gradient_accumulation_steps 2 \
  --max_completion_length 40 --temperature 1.0 --beta 0.04 --learning_rate 2e-4 \
  --max_steps 12 --save_steps 12 --logging_steps 1 \
  --use_vllm true --gradient_checkpointing false --torch_dtype float32 --report_to none \
  --log_completions true --output_dir "$OUT/grpo"
RUN_DIR=$(ls -d "$OUT"/grpo/v*-* | tail -n 1)

echo "=== 4/5 after GRPO on the held-out questions ==="
evaluate "$OUT/after_grpo.jsonl" --adapters "$RUN_DIR/checkpoint-12"

echo "=== 5/5 report ==="
$PY scripts/demo_report.py report "$OUT/base.jsonl" "$OUT/before_grpo.jsonl" "$OUT/after_grpo.jsonl" "$RUN_DIR"
echo "demo took $(( ($(date +%s) - START) / 60 )) min $(( ($(date +%s) - START) % 60 )) s"
