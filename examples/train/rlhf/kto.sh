#!/usr/bin/env bash
# KTO with LoRA on the tiny model: rows in ms-swift's KTO shape (messages + a boolean label), written here from
# the built-in preference pairs, desirable and undesirable answers weighted apart (--desirable_weight,
# --undesirable_weight). Preference pairs work as they are too (each becomes a desirable and an undesirable
# row). Smoke mode (EXAMPLE_SMOKE=1): 2 steps.
set -euo pipefail
source "$(dirname "$0")/../../_common.sh"
OUT=$EXAMPLE_OUTPUT/kto
mkdir -p "$OUT"
python - "$OUT/kto.jsonl" <<'PY'
import json, sys
from swiftlike.dataset import load_dataset
rows = load_dataset(["swiftlike/arithmetic-preference#64"], row_kind="pair")
with open(sys.argv[1], "w") as f:
    for i, row in enumerate(rows):
        answer = row["messages"][-1]["content"] if i % 3 else row["rejected_response"]
        messages = [*row["messages"][:-1], {"role": "assistant", "content": answer}]
        f.write(json.dumps({"messages": messages, "label": bool(i % 3)}) + "\n")
PY

swiftlike rlhf \
    --rlhf_type kto \
    --model tiny-random/qwen2_5 \
    --tuner_type lora \
    --dataset "$OUT/kto.jsonl" \
    --beta 0.1 \
    --desirable_weight 1.0 \
    --undesirable_weight 2.0 \
    --per_device_train_batch_size 8 \
    --gradient_accumulation_steps 1 \
    --learning_rate 1e-4 \
    --max_steps "$(smoke 2 16)" \
    --logging_steps 1 \
    --save_steps "$(smoke 2 16)" \
    --gradient_checkpointing false \
    --report_to none \
    --output_dir "$OUT/run"

echo "checkpoint: $(last_checkpoint "$OUT/run")"
