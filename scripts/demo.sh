#!/usr/bin/env bash
# The main job until the GRPO demo replaces it: batch inference of SmolLM2-135M-Instruct
# with vLLM on the built-in arithmetic prompts, with no network.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=output/demo/infer.jsonl
# The packaged (4-bit origin) weights, even where a hub is reachable: the demo is the same everywhere.
export SWIFTLIKE_OFFLINE=1
.venv/bin/swiftlike infer \
  --model HuggingFaceTB/SmolLM2-135M-Instruct \
  --infer_backend vllm \
  --val_dataset 'swiftlike/arithmetic#16' \
  --temperature 0 --max_new_tokens 96 \
  --result_path "$OUT"
.venv/bin/python - "$OUT" <<'PY'
import json, re, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
correct = lenient = 0
print("\n=== SmolLM2-135M-Instruct (4-bit GGUF origin), greedy, vLLM ===")
for row in rows:
    match = re.search(r"####\s*(-?\d+)", row["response"])
    ok = bool(match) and match.group(1) == row["solution"]
    correct += ok
    numbers = re.findall(r"-?\d+", row["response"])
    lenient += bool(numbers) and numbers[-1] == row["solution"]
for row in rows[:4]:
    print(f"\nQ: {row['messages'][0]['content']}\nA: {row['response'].strip()[:300]}\n(expected {row['solution']})")
print(f"\naccuracy on {len(rows)} prompts: {correct}/{len(rows)} in the asked '#### N' form, "
      f"{lenient}/{len(rows)} counting the last number in the answer")
PY
