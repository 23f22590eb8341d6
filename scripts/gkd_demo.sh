#!/usr/bin/env bash
# GKD end to end on SmolLM2-135M-Instruct, offline. The teacher is SmolLM2 after a self-cognition SFT (it
# calls itself Swifty, made by Lark Labs), merged; the student is the base SmolLM2 with a fresh LoRA adapter,
# trained fully on-policy (--lmbda 1) on its own samples from a colocated vLLM engine. Measured on held-out
# prompts: the per-token KL(teacher || student) on the teacher's greedy answers, before and after, and
# whether the student's greedy answers take the teacher's identity. --beta 0 (forward KL, mass-covering) by
# default: with the symmetric JSD (0.5, ms-swift's default; GKD_BETA=0.5) 40 steps cut the KL by 72% but the
# student learned the teacher's answer pattern with a name of its own ("I'm called Lumin ..."), because the
# JSD's pull toward a token the student rarely samples is weak; the forward KL pulls hardest exactly there.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=output/gkd_demo
MODEL=HuggingFaceTB/SmolLM2-135M-Instruct
export SWIFTLIKE_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=2
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${DEMO_PYTHON:-.venv/bin/python}
SWIFTLIKE="$PY -m swiftlike.cli.main"
N_HELD=32
STEPS=${GKD_STEPS:-40}
rm -rf "$OUT" && mkdir -p "$OUT"
START=$(date +%s)
$PY scripts/gkd_report.py split "$OUT" "$N_HELD"

greedy() {  # greedy <stage> <model args...>: greedy answers to the held-out prompts
  local stage=$1; shift
  $SWIFTLIKE infer "$@" --infer_backend vllm --val_dataset "$OUT/held_out_prompts.jsonl" --max_new_tokens 48 \
    --temperature 0 --result_path "$OUT/${stage}_greedy.jsonl"
}

echo "=== 1/5 the teacher: self-cognition SFT (LoRA, 2 epochs), merged ==="
$SWIFTLIKE sft --model "$MODEL" --dataset "$OUT/train.jsonl" --num_train_epochs 2 --per_device_train_batch_size 8 \
  --gradient_accumulation_steps 1 --learning_rate 1e-3 --gradient_checkpointing false --report_to none \
  --logging_steps 4 --save_steps 1000 --split_dataset_ratio 0 --seed 42 --output_dir "$OUT/teacher_sft"
TEACHER_RUN=$(ls -d "$OUT"/teacher_sft/v*-* | tail -n 1)
TEACHER_CKPT=$(ls -d "$TEACHER_RUN"/checkpoint-* | tail -n 1)
$SWIFTLIKE export --adapters "$TEACHER_CKPT" --merge_lora true
TEACHER="$TEACHER_CKPT-merged"

echo "=== 2/5 greedy answers to the $N_HELD held-out prompts: teacher and base student ==="
greedy teacher --model "$TEACHER"
greedy base --model "$MODEL"
$PY scripts/gkd_report.py kl "$OUT" "$TEACHER" "$MODEL" before

echo "=== 3/5 GKD: LoRA student, --lmbda 1 (on-policy), colocated vLLM, $STEPS steps ==="
$SWIFTLIKE rlhf --rlhf_type gkd --model "$MODEL" --teacher_model "$TEACHER" --dataset "$OUT/train.jsonl" \
  --tuner_type lora --lora_rank 16 --lora_alpha 32 --lmbda 1 --beta ${GKD_BETA:-0} --temperature 0.9 \
  --max_completion_length 48 --use_vllm true --vllm_mode colocate --per_device_train_batch_size 8 \
  --gradient_accumulation_steps 1 --max_steps "$STEPS" --learning_rate ${GKD_LR:-5e-4} --warmup_ratio 0.05 \
  --gradient_checkpointing false --logging_steps 2 --save_steps 1000 --report_to none --seed 42 \
  --split_dataset_ratio 0 --output_dir "$OUT/gkd"
RUN_DIR=$(ls -d "$OUT"/gkd/v*-* | tail -n 1)
CKPT=$(ls -d "$RUN_DIR"/checkpoint-* | tail -n 1)
$SWIFTLIKE export --adapters "$CKPT" --merge_lora true

echo "=== 4/5 the student after GKD ==="
greedy after --model "$CKPT-merged"
$PY scripts/gkd_report.py kl "$OUT" "$TEACHER" "$CKPT-merged" after

echo "=== 5/5 report ==="
$PY scripts/gkd_report.py report "$OUT" "$RUN_DIR"
echo "gkd demo took $(( ($(date +%s) - START) / 60 )) min $(( ($(date +%s) - START) % 60 )) s"
