#!/usr/bin/env bash
# GPU checks of --sleep_level 2 (vLLM drops its weights while it sleeps): GRPO with a colocated bf16 engine that
# generates more than once per optimizer step, each time after a level-2 sleep: --steps_per_generation 1 with
# --gradient_accumulation_steps 2 (a generation per micro-batch, one sync per step), and DAPO dynamic sampling on
# the tiny random model (its rewards tie, so groups are drawn again in extra rounds). The rollout worker reloads
# the step's weights on every wake from a level-2 sleep; without that the second generation samples from
# discarded weights and rollout_correction/k3_kl (engine vs trainer on the sampled tokens, every micro-batch of
# the step) is far above K3_MAX. Each case runs with full and with delta weight sync. tests/gpu/check_rl_run.py
# gives the verdict; one PASS / FAIL line per run, $OUT/sleep_checks.md when $OUT is set, exit 1 if any run
# failed, 2 at once without a GPU.
#
#   tests/gpu/run_sleep_checks.sh
#   MODELS="tiny-random/qwen2_5" SYNCS="full" tests/gpu/run_sleep_checks.sh
set -u

# shellcheck source=tests/gpu/checks.sh
source "$(dirname "$0")/checks.sh"

PYTHON=${PYTHON:-.venv/bin/python}
MODELS=${MODELS:-"tiny-random/qwen2_5 HuggingFaceTB/SmolLM2-135M-Instruct"}
SYNCS=${SYNCS:-"full delta"}
K3_MAX=${K3_MAX:-0.05}
export SWIFTLIKE_OFFLINE=1
WORK=${OUT:-$(mktemp -d)}
LOGS=$WORK/sleep_check_logs
mkdir -p "$LOGS"

for model in $MODELS; do
    for sync in $SYNCS; do
        for case in accumulate dynamic; do
            name="$(basename "$model")-$sync-$case"
            out=$(mktemp -d)
            if [ "$case" = accumulate ]; then case_args="--steps_per_generation 1 --gradient_accumulation_steps 2"
            else case_args="--dynamic_sample true --max_resample_times 2 --gradient_accumulation_steps 1"; fi
            # shellcheck disable=SC2086
            "$PYTHON" -m swiftlike.cli.main rlhf --rlhf_type grpo --model "$model" --dataset 'swiftlike/arithmetic#64' \
                --reward_funcs accuracy format_hash --num_generations 4 --per_device_train_batch_size 8 \
                --max_completion_length 64 --max_steps 3 --logging_steps 1 --save_steps 100 --report_to none \
                --torch_dtype bfloat16 --use_vllm true --vllm_mode colocate --vllm_gpu_memory_utilization 0.3 \
                --sleep_level 2 --offload_model true --offload_optimizer true --tuner_type full --learning_rate 1e-5 \
                --weight_sync "$sync" --log_rollout_offpolicy_metrics true $case_args --output_dir "$out" \
                >"$LOGS/$name.log" 2>&1
            check_run "$name" $? "$LOGS/$name.log" "$PYTHON" tests/gpu/check_rl_run.py "$out" --k3_max "$K3_MAX"
        done
    done
done

write_summary "--sleep_level 2 GPU checks" sleep_checks.md
exit "$FAILED"
