#!/usr/bin/env bash
# DPO end to end on SmolLM2-135M-Instruct, offline: LoRA DPO on the built-in preference pairs
# (swiftlike/arithmetic-preference: a worked answer ending '#### N' preferred to an off-style reply), then on
# held-out pairs the implicit-reward accuracy (chosen's reward above rejected's, from TRL's evaluation) and
# the greedy answers before and after: how many take the chosen style (a last line '#### N') and how many
# are right.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=output/dpo_demo
MODEL=HuggingFaceTB/SmolLM2-135M-Instruct
export SWIFTLIKE_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=2
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${DEMO_PYTHON:-.venv/bin/python}
SWIFTLIKE="$PY -m swiftlike.cli.main"
N_HELD=60
rm -rf "$OUT" && mkdir -p "$OUT"
START=$(date +%s)
$PY scripts/dpo_report.py split "$OUT" "$N_HELD"

greedy() {  # greedy <stage> <model args...>: greedy answers to the held-out prompts
  local stage=$1; shift
  $SWIFTLIKE infer "$@" --infer_backend vllm --val_dataset "$OUT/held_out_prompts.jsonl" --max_new_tokens 64 \
    --temperature 0 --result_path "$OUT/${stage}_greedy.jsonl"
}

echo "=== 1/4 base model: greedy answers to the $N_HELD held-out prompts ==="
greedy base --model "$MODEL"

echo "=== 2/4 DPO, LoRA, 1 epoch on $(wc -l < "$OUT/train.jsonl") pairs; TRL evaluates the held-out pairs ==="
$SWIFTLIKE rlhf --rlhf_type dpo --model "$MODEL" --dataset "$OUT/train.jsonl" --val_dataset "$OUT/held_out.jsonl" \
  --num_train_epochs 1 --per_device_train_batch_size 4 --per_device_eval_batch_size 8 \
  --gradient_accumulation_steps 2 --learning_rate ${DPO_LR:-1e-4} --beta 0.1 --lora_rank 16 --lora_alpha 32 \
  --gradient_checkpointing false --eval_steps 20 --save_steps 1000 --logging_steps 5 --report_to none \
  --seed 42 --output_dir "$OUT/dpo"
RUN_DIR=$(ls -d "$OUT"/dpo/v*-* | tail -n 1)
CKPT=$(ls -d "$RUN_DIR"/checkpoint-* | tail -n 1)
$SWIFTLIKE export --adapters "$CKPT" --merge_lora true

echo "=== 3/4 after DPO: greedy answers to the same prompts ==="
greedy after --model "$CKPT-merged"

echo "=== 4/4 report ==="
$PY scripts/dpo_report.py report "$OUT" "$RUN_DIR"
echo "dpo demo took $(( ($(date +%s) - START) / 60 )) min $(( ($(date +%s) - START) % 60 )) s"
