#!/usr/bin/env bash
# Ray: `swiftlike rlhf --use_ray true --config examples/ray/gkd/teacher_standalone.yaml` (the YAML says what runs where; docs/ray.md
# explains the placements). With no cluster running the job starts a local Ray cluster and stops it after; with one
# (`ray start --head` on this machine, or RAY_ADDRESS / --ray_address) it joins it. Smoke mode (EXAMPLE_SMOKE=1):
# 2 steps of a few short samples, given on the command line, which overrides the YAML for every role.
set -euo pipefail
source "$(dirname "$0")/../../_common.sh"
SMOKE_FLAGS=()
if [ "$EXAMPLE_SMOKE" = 1 ]; then
  SMOKE_FLAGS=(--max_steps 2 --save_steps 2 --per_device_train_batch_size 4 --max_completion_length 16 --dataset 'swiftlike/arithmetic-sft#8')
fi

swiftlike rlhf --use_ray true --config "$(dirname "$0")/teacher_standalone.yaml" "${SMOKE_FLAGS[@]}"
