#!/usr/bin/env bash
# GKD with a served teacher (ms-swift's examples/train/rlhf/gkd/teacher_server.sh): `swiftlike deploy` serves
# the teacher with up to 20 log-prob alternatives per position (--max_logprobs), and the trainer asks it for the
# top-k prompt log-probs of each micro-batch (--teacher_model_server, --gkd_logits_topk) in one request. Half
# the micro-batches are the student's own samples (--lmbda 0.5), the rest the dataset's answers. The script
# starts the server in the background, trains, then stops it. Offline, tiny model (MODEL= and TEACHER= to
# change; the teacher must share the student's tokenizer). Smoke mode (EXAMPLE_SMOKE=1): 2 steps.
set -euo pipefail
source "$(dirname "$0")/../../_common.sh"
OUT=$EXAMPLE_OUTPUT/gkd_server
MODEL=${MODEL:-tiny-random/qwen2_5}
TEACHER=${TEACHER:-$MODEL}
PORT=$(free_port)

start_server "$OUT/teacher.log" swiftlike deploy \
    --model "$TEACHER" \
    --infer_backend vllm \
    --torch_dtype float32 \
    --vllm_max_model_len 1024 \
    --max_logprobs 20 \
    --port "$PORT"
TEACHER_PID=$SERVER_PID
wait_for_server "http://127.0.0.1:$PORT/health" "$TEACHER_PID" "$OUT/teacher.log"

swiftlike rlhf \
    --rlhf_type gkd \
    --model "$MODEL" \
    --teacher_model_server "http://127.0.0.1:$PORT" \
    --gkd_logits_topk 20 \
    --tuner_type lora \
    --dataset "swiftlike/alpaca-mini#$(smoke 8 200)" \
    --split_dataset_ratio 0 \
    --lmbda 0.5 \
    --beta 0.5 \
    --torch_dtype float32 \
    --per_device_train_batch_size 4 \
    --gradient_accumulation_steps 1 \
    --max_completion_length "$(smoke 16 64)" \
    --learning_rate 1e-4 \
    --max_steps "$(smoke 2 50)" \
    --logging_steps 1 \
    --save_steps "$(smoke 2 25)" \
    --gradient_checkpointing false \
    --report_to "$(smoke none tensorboard)" \
    --output_dir "$OUT"

stop_server "$TEACHER_PID"
echo "checkpoint: $(last_checkpoint "$OUT")"
