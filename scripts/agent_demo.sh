#!/usr/bin/env bash
# `make demo-agent`: multi-turn GRPO on SmolLM2-135M-Instruct, offline, after its own short agent-SFT warm-up
# (64 tool traces, one epoch: right on part of the held-out questions, so GRPO has room; AGENT_DEMO_SFT_ROWS=0
# starts from `make demo-agent-sft`'s checkpoint instead, which already answers every single-call question). GRPO: LoRA, vLLM colocated, tool_call_scheduler with hermes calls on questions of
# swiftlike/calculator-agent, the `accuracy` reward on the final '#### N'. Before and after, the same held-out
# questions of swiftlike/calculator-agent-test run as real tool loops (swiftlike deploy + the openai client, as
# in the SFT demo); the report prints the share answered right with the paired 95% CI of the change, the turns
# per question and the share of well-formed calls, before and after. Budget: 25 min on this machine.
#   DEMO_QUICK=1 bash scripts/agent_demo.sh   # smoke run: the tiny random model, 2 steps, 4 questions (minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
export SWIFTLIKE_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=2 VLLM_ENABLE_V1_MULTIPROCESSING=0 TOKENIZERS_PARALLELISM=false
export PYTHONPATH="$PWD:$PWD/scripts${PYTHONPATH:+:$PYTHONPATH}"
PY=${DEMO_PYTHON:-.venv/bin/python}
SWIFTLIKE="$PY -m swiftlike.cli.main"
if [ "${DEMO_QUICK:-0}" = 1 ]; then
  OUT=output/agent_demo_quick; MODEL=tiny-random/qwen2_5; SFT_DEMO=
  N_HELD=4; N_PROMPTS=8; STEPS=2; MICRO=4; ACCUM=1; GENERATIONS=4; REPLY_TOKENS=24; SFT_ROWS=16; SFT_STEPS=2
else
  OUT=output/agent_demo; MODEL=HuggingFaceTB/SmolLM2-135M-Instruct
  # AGENT_DEMO_SFT_ROWS=0 starts from `make demo-agent-sft`'s checkpoint (all its single-call questions right
  # already, so GRPO had nothing left to win there: docs/agent.md); by default the demo runs its own short
  # warm-up, which leaves the model right on part of them
  SFT_ROWS=${AGENT_DEMO_SFT_ROWS:-64}; SFT_STEPS=-1; SFT_DEMO=
  [ "$SFT_ROWS" = 0 ] && SFT_DEMO=output/agent_sft_demo
  N_HELD=${AGENT_DEMO_HELD:-64}; N_PROMPTS=${AGENT_DEMO_PROMPTS:-256}; STEPS=${AGENT_DEMO_STEPS:-10}
  # 16 trajectories a step (2 questions x 8) in micro-batches of 4: one micro-batch of 16 whole trajectories
  # (fp32 logits over a 49k vocabulary) took 17 GB and was killed on this 23 GB machine
  MICRO=4; ACCUM=4; GENERATIONS=${AGENT_DEMO_GENERATIONS:-8}; REPLY_TOKENS=128
fi
rm -rf "$OUT" && mkdir -p "$OUT"
START=$(date +%s)
PORT=$($PY -c 'from swiftlike.utils.net import free_port; print(free_port())')
source scripts/agent_demo_common.sh

echo "=== 1/5 the agent-SFT checkpoint ==="
SFT_CKPT=
if [ -n "$SFT_DEMO" ]; then
  SFT_CKPT=$(ls -d "$SFT_DEMO"/sft/v*-*/checkpoint-*-merged 2>/dev/null | sort -V | tail -n 1 || true)
fi
if [ -n "$SFT_CKPT" ]; then
  echo "reusing $SFT_CKPT (make demo-agent-sft)"
elif [ "$SFT_ROWS" = 0 ]; then
  echo "AGENT_DEMO_SFT_ROWS=0 starts from make demo-agent-sft's checkpoint: run make demo-agent-sft first" >&2
  exit 1
else
  echo "SFT warm-up on $SFT_ROWS tool traces"
  agent_sft_warmup "$OUT/sft" "$MODEL" "$SFT_ROWS" "$SFT_STEPS"
fi

echo "=== 2/5 before: $N_HELD held-out questions as tool loops ==="
if [ -n "$SFT_DEMO" ] && [ -f "$SFT_DEMO/sft_loops.jsonl" ] && [ "$SFT_CKPT" != "" ] \
   && [ "$(wc -l <"$SFT_DEMO/sft_loops.jsonl")" -ge "$N_HELD" ] && [ "$SFT_DEMO/sft_loops.jsonl" -nt "$SFT_CKPT" ]; then
  # the SFT demo ran the same questions, in the same order, greedily with the same limits on this checkpoint
  head -n "$N_HELD" "$SFT_DEMO/sft_loops.jsonl" >"$OUT/before_loops.jsonl"
  echo "reusing the SFT demo's tool loops of this checkpoint ($SFT_DEMO/sft_loops.jsonl)"
else
  tool_loops before "$SFT_CKPT" "$REPLY_TOKENS"
fi

echo "=== 3/5 multi-turn GRPO: $STEPS steps, $((MICRO * ACCUM)) trajectories each ($GENERATIONS per question), tools run in the sandbox ==="
$PY scripts/agent_demo.py prompts "$OUT/prompts.jsonl" "$N_PROMPTS"
$SWIFTLIKE rlhf --rlhf_type grpo --model "$SFT_CKPT" --tuner_type lora --lora_rank 16 --lora_alpha 32 \
  --target_modules all-linear --dataset "$OUT/prompts.jsonl" \
  --multi_turn_scheduler tool_call_scheduler --agent_template hermes --max_turns 4 \
  --reward_funcs accuracy --use_vllm true --vllm_mode colocate --vllm_gpu_memory_utilization 0.3 \
  --vllm_max_model_len 2048 --torch_dtype float32 --num_generations "$GENERATIONS" \
  --per_device_train_batch_size "$MICRO" --gradient_accumulation_steps "$ACCUM" --max_completion_length "$REPLY_TOKENS" \
  --temperature "${AGENT_RL_TEMPERATURE:-0.7}" --beta 0.0 --learning_rate "${AGENT_RL_LR:-3e-4}" --max_steps "$STEPS" --logging_steps 1 \
  --save_steps "$STEPS" --gradient_checkpointing false --log_completions true --report_to none --seed "${AGENT_RL_SEED:-42}" \
  --output_dir "$OUT/grpo"
GRPO_RUN=$(ls -d "$OUT"/grpo/v*-* | tail -n 1)
GRPO_CKPT=$(ls -d "$GRPO_RUN"/checkpoint-* | grep -v -- '-merged$' | sort -V | tail -n 1)
$SWIFTLIKE export --adapters "$GRPO_CKPT" --merge_lora true

echo "=== 4/5 after: the same questions as tool loops ==="
tool_loops after "$GRPO_CKPT-merged" "$REPLY_TOKENS"

echo "=== 5/5 report ==="
status=0
$PY scripts/agent_demo.py report "$OUT" before after | tee "$OUT/report.txt" || status=$?
echo "training metrics per step: $GRPO_RUN/logging.jsonl (multi_turn/turns_mean, multi_turn/tool_calls, ...)"
echo "agent demo took $(( ($(date +%s) - START) / 60 )) min $(( ($(date +%s) - START) % 60 )) s"
if [ "${DEMO_QUICK:-0}" = 1 ]; then
  echo "DEMO_QUICK=1: a smoke run of the tiny random model, so no verdict is drawn from it"
  exit 0
fi
exit $status
