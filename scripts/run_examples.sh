#!/usr/bin/env bash
# `make examples`: runs every script under examples/ in smoke mode (EXAMPLE_SMOKE=1: 2 steps, a few samples),
# one at a time, and prints PASS/FAIL with the time of each and a summary. Exit status: the number of failures
# (capped at 100), so 0 when all pass. Logs: output/examples/logs/<script>.log.
#   bash scripts/run_examples.sh                 # all of them
#   bash scripts/run_examples.sh deploy grpo     # only the scripts whose path contains one of the words
set -uo pipefail
cd "$(dirname "$0")/.."

export EXAMPLE_SMOKE=${EXAMPLE_SMOKE:-1}
export SWIFTLIKE_OFFLINE=${SWIFTLIKE_OFFLINE:-1}
[ -d .venv/bin ] && export PATH="$PWD/.venv/bin:$PATH"
LOGS=output/examples/logs
mkdir -p "$LOGS"

mapfile -t scripts < <(find examples -name '*.sh' ! -name '_common.sh' | sort)
if [ $# -gt 0 ]; then
  selected=()
  for s in "${scripts[@]}"; do for word in "$@"; do [[ "$s" == *"$word"* ]] && { selected+=("$s"); break; }; done; done
  scripts=("${selected[@]}")
fi

passed=0; failed=0; failures=(); started=$SECONDS
for script in "${scripts[@]}"; do
  log="$LOGS/$(echo "${script#examples/}" | tr '/' '_' | sed 's/\.sh$//').log"
  t0=$SECONDS
  if bash "$script" >"$log" 2>&1; then
    status=PASS; passed=$((passed + 1))
  else
    status=FAIL; failed=$((failed + 1)); failures+=("$script")
  fi
  printf '%s  %-36s %5d s  (log: %s)\n' "$status" "$script" $((SECONDS - t0)) "$log"
  [ "$status" = FAIL ] && tail -5 "$log" | sed 's/^/      | /'
done

echo "examples: $passed passed, $failed failed in $((SECONDS - started)) s"
for f in "${failures[@]}"; do echo "  failed: $f"; done
exit $((failed > 100 ? 100 : failed))
