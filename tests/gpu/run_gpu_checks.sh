#!/usr/bin/env bash
# GPU checks of `swiftlike deploy`: for each backend of vllm, sglang and lmdeploy that is installed, deploy each
# offline test model on a free port and run tests/gpu/check_openai_client.py against it. Prints one line per
# backend and model (PASS / FAIL / SKIPPED), writes a summary to $OUT/gpu_checks.md when $OUT is set, and exits 1
# if any check failed (2 when there is no GPU, before doing anything).
#
#   tests/gpu/run_gpu_checks.sh                  # all installed backends, both models
#   BACKENDS="sglang" MODELS="tiny-random/qwen2_5" tests/gpu/run_gpu_checks.sh
#
# Environment: PYTHON (default .venv/bin/python), BACKENDS, MODELS, STARTUP_TIMEOUT (s, default 600), and
# VLLM_ARGS / SGLANG_ARGS / LMDEPLOY_ARGS, extra deploy flags per backend (defaults favour a quick start).
set -u

# shellcheck source=tests/gpu/checks.sh
source "$(dirname "$0")/checks.sh"

PYTHON=${PYTHON:-.venv/bin/python}
BACKENDS=${BACKENDS:-"vllm sglang lmdeploy"}
MODELS=${MODELS:-"tiny-random/qwen2_5 HuggingFaceTB/SmolLM2-135M-Instruct"}
STARTUP_TIMEOUT=${STARTUP_TIMEOUT:-600}
VLLM_ARGS=${VLLM_ARGS:-"--vllm_max_model_len 2048 --vllm_enforce_eager true"}
SGLANG_ARGS=${SGLANG_ARGS:-"--sglang_context_length 2048 --sglang_disable_cuda_graph true"}
LMDEPLOY_ARGS=${LMDEPLOY_ARGS:-"--lmdeploy_session_len 2048"}
API_KEY=gpu-check-key
export SWIFTLIKE_OFFLINE=1

LOGS=${OUT:-$(mktemp -d)}/gpu_check_logs
mkdir -p "$LOGS"

extra_args() {
    case $1 in
        vllm) echo "$VLLM_ARGS" ;;
        sglang) echo "$SGLANG_ARGS" ;;
        lmdeploy) echo "$LMDEPLOY_ARGS" ;;
    esac
}

free_port() {
    "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Start the server in its own process group (the engines fork workers) and wait for /health.
# Sets SERVER_PID; returns non-zero if the server died or did not answer in time.
start_server() {
    local backend=$1 model=$2 port=$3 log=$4
    # shellcheck disable=SC2046
    setsid "$PYTHON" -m swiftlike.cli.main deploy --model "$model" --infer_backend "$backend" --port "$port" \
        --api_key "$API_KEY" $(extra_args "$backend") >"$log" 2>&1 &
    SERVER_PID=$!
    local waited=0
    while [ "$waited" -lt "$STARTUP_TIMEOUT" ]; do
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            return 1
        fi
        if "$PYTHON" -c "import httpx, sys; sys.exit(httpx.get('http://127.0.0.1:$port/health', timeout=2).status_code != 200)" \
                2>/dev/null; then
            return 0
        fi
        sleep 2
        waited=$((waited + 2))
    done
    return 1
}

# SIGTERM (graceful: the server closes its engine), then SIGKILL to whatever is left of the group.
stop_server() {
    kill -TERM -- "-$SERVER_PID" 2>/dev/null
    local waited=0
    while kill -0 "$SERVER_PID" 2>/dev/null && [ "$waited" -lt 60 ]; do
        sleep 1
        waited=$((waited + 1))
    done
    kill -KILL -- "-$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
}

for backend in $BACKENDS; do
    if ! "$PYTHON" -c "import $backend" >/dev/null 2>&1; then
        for model in $MODELS; do
            record SKIPPED "| $backend | $model | SKIPPED | not installed |"
            echo "SKIPPED  $backend  $model  (not installed: pip install 'swiftlike[$backend]')"
        done
        continue
    fi
    version=$("$PYTHON" -c "import $backend; print($backend.__version__)" 2>/dev/null)
    for model in $MODELS; do
        port=$(free_port)
        name="$backend-${model//\//_}"
        log="$LOGS/$name.server.log"
        started=$(date +%s)
        if start_server "$backend" "$model" "$port" "$log"; then
            "$PYTHON" tests/gpu/check_openai_client.py --url "http://127.0.0.1:$port/v1" --model "$model" \
                --api-key "$API_KEY" >"$LOGS/$name.checks.log" 2>&1
            status=$?
            note=$(tail -1 "$LOGS/$name.checks.log" | sed 's/^ *//')
        else
            status=1
            note="server did not start (see $name.server.log)"
            tail -20 "$log"
        fi
        stop_server
        seconds=$(($(date +%s) - started))
        if [ "$status" -eq 0 ]; then
            verdict=PASS
        else
            verdict=FAIL
            grep -h "FAIL" "$LOGS/$name.checks.log" 2>/dev/null
        fi
        record "$verdict" "| $backend $version | $model | $verdict | $note, ${seconds} s |"
    done
done

write_summary "swiftlike deploy GPU checks" gpu_checks.md "Logs: gpu_check_logs/." "" "| backend | model | result | details |" "|---|---|---|---|"
exit "$FAILED"
