#!/usr/bin/env bash
# GPU checks of GRPO, multi-turn GRPO with tools (agent) and PPO at real precision: colocated vLLM in bfloat16 with
# --top_k 20 --top_p 0.9, on the tiny model and on SmolLM2-135M, with LoRA-only sync (--vllm_enable_lora true) and
# with full (merged) sync. Each run is 3 optimizer steps; tests/gpu/check_rl_run.py then asserts that every logged
# loss, grad norm, kl and metric is finite and that rollout_correction/k3_kl, measured on the batch sampled right
# after each weight sync, stays under K3_MAX (bf16 engine vs bf16 trainer: rounding, not a stale engine). Prints one
# PASS / FAIL line per run, writes $OUT/rl_checks.md when $OUT is set, exits 1 if any run failed and 2 at once when
# there is no GPU.
#
#   tests/gpu/run_rl_checks.sh
#   MODELS="tiny-random/qwen2_5" SYNCS="lora" ALGOS="ppo" K3_MAX=0.02 tests/gpu/run_rl_checks.sh
# agent: tool_call_scheduler with hermes calls on the calculator questions, up to 3 turns, so k3_kl covers the sampled
# tokens of every turn with the tool results between them inserted as ids (mask 0).
set -u

# shellcheck source=tests/gpu/checks.sh
source "$(dirname "$0")/checks.sh"

PYTHON=${PYTHON:-.venv/bin/python}
MODELS=${MODELS:-"tiny-random/qwen2_5 HuggingFaceTB/SmolLM2-135M-Instruct"}
SYNCS=${SYNCS:-"lora full"}
ALGOS=${ALGOS:-"grpo agent ppo"}
K3_MAX=${K3_MAX:-0.05}
export SWIFTLIKE_OFFLINE=1
WORK=${OUT:-$(mktemp -d)}
LOGS=$WORK/rl_check_logs
mkdir -p "$LOGS"

for algo in $ALGOS; do
  for model in $MODELS; do
    for sync in $SYNCS; do
        name="$algo-$(basename "$model")-$sync"
        out=$(mktemp -d)
        if [ "$sync" = lora ]; then sync_args="--tuner_type lora --vllm_enable_lora true"
        else sync_args="--tuner_type full --learning_rate 1e-5"; fi
        dataset='swiftlike/arithmetic#64' rlhf_type=$algo rewards="accuracy format_hash"
        # PPO: one completion a prompt, a critic from the policy, two epochs over each rollout batch
        if [ "$algo" = ppo ]; then algo_args="--num_ppo_epochs 2"; else algo_args="--num_generations 4"; fi
        if [ "$algo" = agent ]; then
            rlhf_type=grpo dataset='swiftlike/calculator-agent-test#64' rewards=accuracy
            algo_args="--num_generations 4 --multi_turn_scheduler tool_call_scheduler --agent_template hermes --max_turns 3"
        fi
        # shellcheck disable=SC2086
        "$PYTHON" -m swiftlike.cli.main rlhf --rlhf_type "$rlhf_type" --model "$model" --dataset "$dataset" \
            --reward_funcs $rewards $algo_args --per_device_train_batch_size 8 \
            --gradient_accumulation_steps 1 --max_completion_length 64 --max_steps 3 --logging_steps 1 \
            --save_steps 100 --report_to none --torch_dtype bfloat16 --use_vllm true --vllm_mode colocate \
            --vllm_gpu_memory_utilization 0.3 --top_k 20 --top_p 0.9 --log_rollout_offpolicy_metrics true \
            $sync_args --output_dir "$out" >"$LOGS/$name.log" 2>&1
        check_run "$name" $? "$LOGS/$name.log" "$PYTHON" tests/gpu/check_rl_run.py "$out" --k3_max "$K3_MAX"
    done
  done
done

write_summary "GRPO, multi-turn GRPO and PPO GPU checks" rl_checks.md
exit "$FAILED"
