#!/usr/bin/env bash
# The main job: GRPO with LoRA on SmolLM2-135M-Instruct, rollouts from a colocated vLLM engine on CPU, on the
# built-in verifiable arithmetic task, with held-out accuracy before and after: greedy, and mean@4 (4 samples
# a prompt at the training temperature) with a 95% bootstrap interval.
#
# At temperature 1 the base model almost never writes the asked '#### N' last line (about 1 in 128 samples,
# none of them right), so GRPO would have no reward signal to start from. A short SFT warm-up on worked
# answers teaches the format (ms-swift's usual SFT-then-RL recipe); GRPO then trains the merged result with
# the accuracy reward alone. (A format reward on top teaches a 135M model to print the prompt's example
# '#### 42' without working: it pays for the format and is the easiest reward to get.)
#
# DEMO_ALGO=ppo (`make demo-ppo`) runs PPO with a critic in GRPO's place, same warm-up, data, reward and
# evaluation; the base model's evaluation (the same as GRPO's demo) is skipped there.
set -euo pipefail
cd "$(dirname "$0")/.."
ALGO=${DEMO_ALGO:-grpo}
OUT=output/demo$([ "$ALGO" = grpo ] || echo "-$ALGO")
MODEL=HuggingFaceTB/SmolLM2-135M-Instruct
# The packaged (4-bit GGUF origin) weights, even where a hub is reachable: the demo is the same everywhere.
export SWIFTLIKE_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=2
# This checkout's code, whichever checkout the venv was installed from.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${DEMO_PYTHON:-.venv/bin/python}
SWIFTLIKE="$PY -m swiftlike.cli.main"
SEED=${DEMO_SEED:-42}   # a repeat with another seed re-draws the warm-up, the sampling and the RL run
N_SFT=${DEMO_N_SFT:-100}     # SFT warm-up rows (worked answers)
N_HELD=256                   # held-out prompts, disjoint from the SFT rows and from GRPO's dataset
K=4                          # samples a held-out prompt at the training temperature (mean@K)
TEMP=${DEMO_TEMP:-1.0}       # GRPO's sampling temperature, and the one mean@K is measured at
DYNAMIC=${DEMO_DYNAMIC_SAMPLE:-false}  # DAPO dynamic sampling: replace groups whose rewards are all equal
STEPS=${DEMO_STEPS:-12}
rm -rf "$OUT" && mkdir -p "$OUT"
START=$(date +%s)
lap() { echo "--- $1: $(( $(date +%s) - START )) s since start"; }
$PY scripts/demo_report.py split "$OUT" "$N_SFT" "$N_HELD"

evaluate() {  # evaluate <stage> <model args...>: greedy, then K samples at $TEMP, on the held-out prompts
  # vLLM (prefix caching: the K samples of a prompt share its prefill). A LoRA checkpoint is merged first:
  # vllm-cpu's LoRA kernels make the adapter path several times slower than the plain model.
  local stage=$1; shift
  local common=(--infer_backend vllm --vllm_enable_prefix_caching true --val_dataset "$OUT/held_out.jsonl"
                --max_new_tokens 64 --seed "$SEED")
  $SWIFTLIKE infer "$@" "${common[@]}" --temperature 0 --result_path "$OUT/${stage}_greedy.jsonl"
  if [ "$stage" != base ]; then
    # at most 32 sequences in flight: seeded sampling on vllm-cpu fails once a prompt's prefill is split
    # over two scheduler steps (docs/infer.md), and 32 x ~63 prompt tokens stays under the 4096-token step
    $SWIFTLIKE infer "$@" "${common[@]}" --temperature "$TEMP" --num_return_sequences "$K" \
      --vllm_max_num_seqs 32 --result_path "$OUT/${stage}_sampled.jsonl"
  fi
}

if [ "$ALGO" = grpo ]; then
  echo "=== 1/6 base model on the held-out questions (greedy) ==="
  evaluate base --model "$MODEL"
  lap "base evaluated"
fi

echo "=== 2/6 SFT warm-up: LoRA on $N_SFT worked answers (format '#### N'), merged ==="
$SWIFTLIKE sft --model "$MODEL" --dataset "$OUT/warmup_sft.jsonl" --num_train_epochs 1 \
  --per_device_train_batch_size 4 --gradient_accumulation_steps 1 --learning_rate 2e-4 \
  --lora_rank 16 --lora_alpha 32 --gradient_checkpointing false --save_steps 1000 --logging_steps 5 \
  --report_to none --seed "$SEED" --output_dir "$OUT/sft"
SFT_CKPT=$(ls -d "$OUT"/sft/v*-*/checkpoint-* | tail -n 1)
# Merged, so GRPO trains a fresh adapter on top and its KL reference is the warmed-up model, not the base.
$SWIFTLIKE export --adapters "$SFT_CKPT" --merge_lora true
WARM="$SFT_CKPT-merged"
lap "warm-up trained and merged"

echo "=== 3/6 the warmed-up model (the RL start) on the held-out questions: greedy and mean@$K ==="
evaluate before --model "$WARM"
lap "before-RL evaluated"

if [ "$ALGO" = ppo ]; then
echo "=== 4/6 PPO on the warmed-up model: LoRA policy and critic, colocated vLLM; reward: accuracy ==="
# One completion per prompt, 64 prompts a rollout batch (GRPO's 16 prompts x 4), one optimizer step on it
# (--num_ppo_epochs 1: a CPU step's cost is GRPO's plus the critic's), 12 steps: as many samples as GRPO's demo.
# The critic starts from the warmed-up model with a fresh value head (there is no reward model: the reward is
# the accuracy rule, which is what the task is scored by); --gamma 1 --lam 1 make each token's advantage the
# sequence's reward minus the critic's value there, which does not lean on a critic that starts knowing
# nothing. TRL's KL term (--kl_coef 0.05): without it, two of three runs lost greedy accuracy (docs/rlhf.md).
$SWIFTLIKE rlhf --rlhf_type ppo --model "$WARM" --dataset swiftlike/arithmetic \
  --reward_funcs accuracy \
  --per_device_train_batch_size 16 --gradient_accumulation_steps 4 --num_mini_batches 1 --num_ppo_epochs 1 \
  --gamma 1.0 --lam 1.0 --kl_coef 0.05 --vf_coef 0.1 \
  --max_completion_length 40 --temperature "$TEMP" --learning_rate ${DEMO_LR:-3e-4} \
  --lr_scheduler_type constant \
  --max_steps "$STEPS" --save_steps "$STEPS" --logging_steps 1 --seed "$SEED" \
  --use_vllm true --gradient_checkpointing false --torch_dtype float32 --report_to none \
  --log_completions true --output_dir "$OUT/$ALGO"
else
echo "=== 4/6 GRPO on the warmed-up model: LoRA, colocated vLLM, merged-weight sync; reward: accuracy ==="
# 16 prompts x 4 completions a step (64 samples), so a step's reward averages over enough questions to show
# a trend; 12 steps at a constant learning rate of 3e-4 and no KL term (beta 0, DAPO's and Dr. GRPO's choice):
# with 12 steps the policy stays close to its start anyway, and in the recipe search (docs/rlhf.md) a KL term
# of 0.04 or a lower learning rate halved the held-out gain. Merged-weight sync rather than --vllm_enable_lora:
# vllm-cpu's LoRA kernels generate several times slower than the plain model (docs/rlhf.md), and generation
# is a large part of a CPU step.
$SWIFTLIKE rlhf --rlhf_type grpo --model "$WARM" --dataset swiftlike/arithmetic \
  --reward_funcs accuracy \
  --num_generations 4 --per_device_train_batch_size 16 --gradient_accumulation_steps 4 \
  --max_completion_length 40 --temperature "$TEMP" --dynamic_sample "$DYNAMIC" --beta 0 --learning_rate ${DEMO_LR:-3e-4} \
  --lr_scheduler_type constant \
  --max_steps "$STEPS" --save_steps "$STEPS" --logging_steps 1 --seed "$SEED" \
  --use_vllm true --gradient_checkpointing false --torch_dtype float32 --report_to none \
  --log_completions true --output_dir "$OUT/grpo"
fi
RUN_DIR=$(ls -d "$OUT"/"$ALGO"/v*-* | tail -n 1)
$SWIFTLIKE export --adapters "$RUN_DIR/checkpoint-$STEPS" --merge_lora true
lap "$ALGO trained and merged"

echo "=== 5/6 after $ALGO on the held-out questions: greedy and mean@$K ==="
evaluate after --model "$RUN_DIR/checkpoint-$STEPS-merged"
lap "after-$ALGO evaluated"

echo "=== 6/6 report ==="
$PY scripts/demo_report.py report "$OUT" "$RUN_DIR" "$ALGO"
echo "demo took $(( ($(date +%s) - START) / 60 )) min $(( ($(date +%s) - START) % 60 )) s"
