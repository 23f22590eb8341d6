#!/usr/bin/env bash
# Issue 31's evidence table: the same GRPO recipe on the demo task (SmolLM2-135M-Instruct, built-in
# arithmetic, reward `accuracy`) with each algorithm of the 2026 set, 3 seeds each, scored on held-out
# questions by mean@4 with a 95% bootstrap interval. No winner is asked for: the table says what one recipe
# on one small model shows, noise included.
#
# The recipe is the demo's (scripts/demo.sh: SFT warm-up, merged; LoRA GRPO, beta 0, constant lr 3e-4,
# temperature 1) made shorter so that 15 runs fit one sitting on 2 CPU cores: a lighter warm-up (the demo's 100
# worked answers at batch 4 with the default accumulation of 4: 7 optimizer steps, where the demo takes 25),
# ALG_STEPS steps of ALG_PROMPTS prompts x 4 completions, then each run's merged model sampled 4 times on
# ALG_HELD held-out questions.
# Resumable: a finished run, the warm-up and the warmed-up model's samples are kept (delete $OUT to start over;
# after changing ALG_HELD, delete $OUT/before_sampled.jsonl and $OUT/runs).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${ALG_OUT:-output/algorithms}
MODEL=HuggingFaceTB/SmolLM2-135M-Instruct
export SWIFTLIKE_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=2
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${DEMO_PYTHON:-.venv/bin/python}
SWIFTLIKE="$PY -m swiftlike.cli.main"
STEPS=${ALG_STEPS:-8}
PROMPTS=${ALG_PROMPTS:-8}
N_HELD=${ALG_HELD:-64}
SEEDS=${ALG_SEEDS:-"1 2 3"}
ARMS=${ALG_ARMS:-"grpo rloo reinforce_plus_plus cispo top_entropy_0.2"}
K=4
START=$(date +%s)
lap() { echo "--- $1: $(( $(date +%s) - START )) s since start"; }

arm_flags() {  # the only flags that differ between arms
  case "$1" in
    grpo) echo "--advantage_estimator grpo" ;;
    rloo) echo "--advantage_estimator rloo" ;;
    reinforce_plus_plus) echo "--advantage_estimator reinforce_plus_plus" ;;
    cispo) echo "--loss_type cispo --epsilon_high 5.0" ;;
    top_entropy_0.2) echo "--top_entropy_quantile 0.2" ;;
    *) echo "unknown arm '$1'; known: grpo rloo reinforce_plus_plus cispo top_entropy_0.2" >&2; exit 2 ;;
  esac
}

sample_held_out() {  # sample_held_out <result file> <model>: K samples a held-out question at temperature 1
  $SWIFTLIKE infer --model "$2" --infer_backend vllm --vllm_enable_prefix_caching true \
    --val_dataset "$OUT/held_out.jsonl" --max_new_tokens 64 --seed 42 --temperature 1.0 \
    --num_return_sequences "$K" --vllm_max_num_seqs 32 --result_path "$1"
}

mkdir -p "$OUT"
$PY scripts/demo_report.py split "$OUT" 100 "$N_HELD"
if [ ! -d "$OUT/warm" ]; then
  echo "=== SFT warm-up (100 worked answers, 7 LoRA steps, merged) ==="
  $SWIFTLIKE sft --model "$MODEL" --dataset "$OUT/warmup_sft.jsonl" --num_train_epochs 1 \
    --per_device_train_batch_size 4 --learning_rate 2e-4 --lora_rank 16 --lora_alpha 32 \
    --gradient_checkpointing false --save_steps 1000 --logging_steps 5 --report_to none --seed 42 \
    --output_dir "$OUT/sft"
  CKPT=$(ls -d "$OUT"/sft/v*-*/checkpoint-* | tail -n 1)
  $SWIFTLIKE export --adapters "$CKPT" --merge_lora true --output_dir "$OUT/warm.tmp"
  mv "$OUT/warm.tmp" "$OUT/warm"
  lap "warm-up trained and merged"
fi
if [ ! -f "$OUT/before_sampled.jsonl" ]; then
  sample_held_out "$OUT/before_sampled.partial.jsonl" "$OUT/warm"
  mv "$OUT/before_sampled.partial.jsonl" "$OUT/before_sampled.jsonl"
  lap "the warmed-up model sampled"
fi

for seed in $SEEDS; do   # seed-major: a run cut short still has every arm at the same seeds
  for arm in $ARMS; do
    RUN="$OUT/runs/$arm/seed$seed"
    [ -f "$RUN/after_sampled.jsonl" ] && continue   # resumable: a finished run is kept
    rm -rf "$RUN" && mkdir -p "$RUN"
    echo "=== $arm, seed $seed ==="
    # shellcheck disable=SC2046
    $SWIFTLIKE rlhf --rlhf_type grpo --model "$OUT/warm" --dataset swiftlike/arithmetic \
      --reward_funcs accuracy $(arm_flags "$arm") \
      --num_generations 4 --per_device_train_batch_size "$PROMPTS" --gradient_accumulation_steps 4 \
      --max_completion_length 40 --temperature 1.0 --beta 0 --learning_rate 3e-4 --lr_scheduler_type constant \
      --max_steps "$STEPS" --save_steps "$STEPS" --logging_steps 1 --seed "$seed" \
      --use_vllm true --gradient_checkpointing false --torch_dtype float32 --report_to none \
      --output_dir "$RUN/grpo"
    RUN_DIR=$(ls -d "$RUN"/grpo/v*-* | tail -n 1)
    $SWIFTLIKE export --adapters "$RUN_DIR/checkpoint-$STEPS" --merge_lora true --output_dir "$RUN/merged"
    sample_held_out "$RUN/after_sampled.partial.jsonl" "$RUN/merged"
    mv "$RUN/after_sampled.partial.jsonl" "$RUN/after_sampled.jsonl"
    rm -rf "$RUN/merged"
    lap "$arm seed $seed"
  done
done
$PY scripts/algorithms_report.py "$OUT"
echo "evidence took $(( ($(date +%s) - START) / 60 )) min"
