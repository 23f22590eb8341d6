#!/usr/bin/env bash
# GPU checks of GKD at real precision: the student samples on colocated vLLM in bfloat16, the trainer runs in
# bfloat16, on the tiny model and on SmolLM2-135M. Three runs per model, 3 optimizer steps each:
#   lora-self     LoRA student, --teacher_model = --model: the adapter-disabled student is the teacher, so the
#                 first step's divergence is ~0 (bf16 rounding only) and LoRA-only sync is exercised;
#   full-offload  full student, a separate in-process teacher with --offload_teacher_model true (the CUDA-only
#                 path: the teacher lives on CPU and visits the GPU for its forward);
#   lora-topk     LoRA student, a separate teacher compared over its top-20 (--gkd_logits_topk 20).
# tests/gpu/check_gkd_run.py then asserts every logged value is finite, every step was on-policy, and the first
# divergence of lora-self is under JSD0_MAX.
# Prints one PASS / FAIL line per run, writes $OUT/gkd_checks.md when $OUT is set, exits 1 if any run failed and
# 2 at once when there is no GPU.
#
#   tests/gpu/run_gkd_checks.sh
#   MODELS="tiny-random/qwen2_5" RUNS="lora-self" tests/gpu/run_gkd_checks.sh
set -u

# shellcheck source=tests/gpu/checks.sh
source "$(dirname "$0")/checks.sh"

PYTHON=${PYTHON:-.venv/bin/python}
MODELS=${MODELS:-"tiny-random/qwen2_5 HuggingFaceTB/SmolLM2-135M-Instruct"}
RUNS=${RUNS:-"lora-self full-offload lora-topk"}
JSD0_MAX=${JSD0_MAX:-0.01}
export SWIFTLIKE_OFFLINE=1
WORK=${OUT:-$(mktemp -d)}
LOGS=$WORK/gkd_check_logs
mkdir -p "$LOGS"

for model in $MODELS; do
    # a separate teacher: the same weights in another directory, so the adapter-disabled shortcut is not taken
    teacher=$WORK/teacher-$(basename "$model")
    if [ ! -d "$teacher" ]; then
        "$PYTHON" - "$model" "$teacher" <<'PY' >"$LOGS/teacher-$(basename "$model").log" 2>&1
import shutil, sys
from swiftlike.model import resolve_model
shutil.copytree(resolve_model(sys.argv[1]).model_dir, sys.argv[2])
PY
    fi
    for run in $RUNS; do
        name="$(basename "$model")-$run"
        out=$(mktemp -d)
        case $run in
            lora-self) run_args="--tuner_type lora --vllm_enable_lora true --teacher_model $model" ;;
            full-offload) run_args="--tuner_type full --learning_rate 1e-5 --teacher_model $teacher --offload_teacher_model true" ;;
            lora-topk) run_args="--tuner_type lora --teacher_model $teacher --gkd_logits_topk 20" ;;
        esac
        # shellcheck disable=SC2086
        "$PYTHON" -m swiftlike.cli.main rlhf --rlhf_type gkd --model "$model" --dataset 'swiftlike/alpaca-mini#32' \
            --lmbda 1 --per_device_train_batch_size 8 --gradient_accumulation_steps 1 --max_completion_length 64 \
            --max_steps 3 --logging_steps 1 --save_steps 100 --report_to none --torch_dtype bfloat16 \
            --use_vllm true --vllm_mode colocate --vllm_gpu_memory_utilization 0.3 --split_dataset_ratio 0 \
            $run_args --output_dir "$out" >"$LOGS/$name.log" 2>&1
        check_run "$name" $? "$LOGS/$name.log" "$PYTHON" tests/gpu/check_gkd_run.py "$out" --run "$run" --jsd0_max "$JSD0_MAX"
    done
done

write_summary "GKD GPU checks" gkd_checks.md
exit "$FAILED"
