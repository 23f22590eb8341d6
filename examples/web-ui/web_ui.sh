#!/usr/bin/env bash
# The web UI: `swiftlike web-ui` serves pages that build, run and follow the other commands (sft / pt, rlhf, GRPO
# with rollout servers, deploy and chat, eval, export). The script starts it in the background on loopback with
# its own jobs directory, fetches the page, checks that the training tab is there, and stops it; run the command
# alone and open http://127.0.0.1:7860. Beyond loopback it needs --api_key (docs/web-ui.md).
set -euo pipefail
source "$(dirname "$0")/../_common.sh"
OUT=$EXAMPLE_OUTPUT/web-ui
PORT=$(free_port)

start_server "$OUT/web-ui.log" swiftlike web-ui \
    --server_name 127.0.0.1 \
    --server_port "$PORT" \
    --lang en \
    --jobs_dir "$OUT/jobs"
UI_PID=$SERVER_PID
wait_for_server "http://127.0.0.1:$PORT/" "$UI_PID" "$OUT/web-ui.log"

echo "--- the page"
curl -sf -o "$OUT/page.html" "http://127.0.0.1:$PORT/"
for tab in "Train (sft / pt)" "RLHF" "GRPO" "Eval" "Export" "Runtime"; do  # the tabs' labels, in the
  grep -qF "$tab" "$OUT/page.html"                                          # configuration Gradio embeds
done
echo "page of $(wc -c <"$OUT/page.html") bytes, with the Train, RLHF, GRPO, Eval, Export and Runtime tabs"

stop_server "$UI_PID"
