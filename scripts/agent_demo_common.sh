# Sourced by scripts/agent_sft_demo.sh and scripts/agent_demo.sh (not run on its own): the agent SFT warm-up and
# the held-out tool loops both demos measure with. The caller sets OUT, PY, SWIFTLIKE, PORT and N_HELD.

DEPLOY_PID=

stop_deploy() {
  [ -n "$DEPLOY_PID" ] || return 0
  kill -TERM "$DEPLOY_PID" 2>/dev/null || true
  for _ in $(seq 60); do kill -0 "$DEPLOY_PID" 2>/dev/null || break; sleep 1; done
  kill -KILL "$DEPLOY_PID" 2>/dev/null || true
  wait "$DEPLOY_PID" 2>/dev/null || true
  DEPLOY_PID=
}
trap stop_deploy EXIT

tool_loops() {  # tool_loops <stage> <model> [max tokens per reply]: the held-out questions as tool loops against a fresh deploy
  local stage=$1 model=$2 max_tokens=${3:-128}
  $SWIFTLIKE deploy --model "$model" --infer_backend vllm --agent_template hermes --torch_dtype float32 \
    --vllm_max_model_len 2048 --vllm_max_num_seqs 8 --port "$PORT" >"$OUT/${stage}_deploy.log" 2>&1 &
  DEPLOY_PID=$!
  for _ in $(seq 600); do
    curl -sf -o /dev/null "http://127.0.0.1:$PORT/health" && break
    kill -0 "$DEPLOY_PID" 2>/dev/null || { tail -30 "$OUT/${stage}_deploy.log"; exit 1; }
    sleep 1
  done
  $PY scripts/agent_demo.py loop "http://127.0.0.1:$PORT/v1" "$model" "$OUT/${stage}_loops.jsonl" "$N_HELD" "$max_tokens"
  stop_deploy
}

agent_sft_warmup() {  # agent_sft_warmup <out dir> <model> <rows> [max steps]: LoRA SFT on the tool traces, merged; sets SFT_CKPT
  local out=$1 model=$2 rows=$3 max_steps=${4:--1}
  $SWIFTLIKE sft --model "$model" --dataset "swiftlike/calculator-agent#$rows" --agent_template hermes \
    --tuner_type lora --lora_rank 16 --lora_alpha 32 --target_modules all-linear --torch_dtype float32 \
    --num_train_epochs 1 --max_steps "$max_steps" --per_device_train_batch_size 4 --gradient_accumulation_steps 1 \
    --learning_rate "${AGENT_DEMO_LR:-5e-4}" --warmup_ratio 0.05 --max_length 1024 --gradient_checkpointing false \
    --logging_steps 5 --save_steps 100000 --report_to none --seed 42 --output_dir "$out"
  local run_dir ckpt
  run_dir=$(ls -d "$out"/v*-* | tail -n 1)
  ckpt=$(ls -d "$run_dir"/checkpoint-* | grep -v -- '-merged$' | sort -V | tail -n 1)
  $SWIFTLIKE export --adapters "$ckpt" --merge_lora true
  SFT_CKPT="$ckpt-merged"
}
