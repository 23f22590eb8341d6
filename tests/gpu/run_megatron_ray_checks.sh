#!/usr/bin/env bash
# GPU checks of Megatron-Ray GRPO: `swiftlike megatron rlhf --use_ray true` with the train role on megatron-core's
# GPTModel (TP 1, the build this backend trains with) and vLLM in bfloat16, colocated ([[train, rollout]]) and
# separate, on the tiny model and SmolLM2-135M, 3 optimizer steps each. tests/gpu/check_rl_run.py then asserts that
# every logged loss, grad norm and metric is finite and that rollout_correction/k3_kl right after each weight sync
# stays under K3_MAX. With two or more GPUs the separate placement gets one GPU per role; with one GPU only the
# colocated runs are made (separate needs a device per role). A TP 2 training run is not part of this check: the
# backend refuses TP > 1 for training (docs/megatron.md); the model's TP 2 forward is tested on CPU.
# One PASS / FAIL line per run, $OUT/megatron_ray_checks.md when $OUT is set; exit 1 on a failure, 2 without a GPU.
#
#   tests/gpu/run_megatron_ray_checks.sh
#   MODELS="tiny-random/qwen2_5" PLACEMENTS="colocate" tests/gpu/run_megatron_ray_checks.sh
set -u

# shellcheck source=tests/gpu/checks.sh
source "$(dirname "$0")/checks.sh"

PYTHON=${PYTHON:-.venv/bin/python}
MODELS=${MODELS:-"tiny-random/qwen2_5 HuggingFaceTB/SmolLM2-135M-Instruct"}
GPUS=$(nvidia-smi -L | grep -c "^GPU")
PLACEMENTS=${PLACEMENTS:-$([ "$GPUS" -ge 2 ] && echo "colocate separate" || echo "colocate")}
K3_MAX=${K3_MAX:-0.05}
export SWIFTLIKE_OFFLINE=1
WORK=${OUT:-$(mktemp -d)}
LOGS=$WORK/megatron_ray_logs
mkdir -p "$LOGS"

for model in $MODELS; do
    for placement in $PLACEMENTS; do
        name="$(basename "$model")-$placement"
        out=$(mktemp -d)
        config=$out/job.yaml
        colocate=""
        [ "$placement" = colocate ] && colocate="colocate_groups: [[train, rollout]]"
        cat >"$config" <<YAML
rlhf_type: grpo
model: $model
dataset: [swiftlike/arithmetic#64]
reward_funcs: [accuracy, format_hash]
num_generations: 4
micro_batch_size: 8
global_batch_size: 8
train_iters: 3
lr: 1.0e-5
min_lr: 1.0e-6
max_completion_length: 64
logging_steps: 1
save_steps: 100
report_to: [none]
torch_dtype: bfloat16
top_k: 20
top_p: 0.9
log_rollout_offpolicy_metrics: true
use_vllm: true
$colocate
train: {gpus: 1, tuner_type: full, output_dir: $out/run}
rollout: {gpus: 1, vllm_gpu_memory_utilization: 0.3, vllm_max_model_len: 1024}
YAML
        "$PYTHON" -m swiftlike.cli.main megatron rlhf --use_ray true --config "$config" >"$LOGS/$name.log" 2>&1
        check_run "$name" $? "$LOGS/$name.log" "$PYTHON" tests/gpu/check_rl_run.py "$out/run" --k3_max "$K3_MAX"
    done
done

write_summary "Megatron-Ray GRPO GPU checks" megatron_ray_checks.md
exit "$FAILED"
