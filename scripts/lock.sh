#!/usr/bin/env bash
# Rewrites scripts/locks/: the versions of the three virtualenvs that scripts/setup.sh builds, read from this
# checkout's own (built by `make setup`, then green under `make test`). Run after a dependency change; setup.sh
# installs these versions everywhere (CPU machines), so a clean clone gets the set the suite passed with.
set -euo pipefail
cd "$(dirname "$0")/.."
UV=.venv/bin/uv
write() {  # write FILE PYTHON TITLE
  { echo "# $3 (constraints for uv: what a requirement asks for, installed at these versions)."
    echo "# Written by scripts/lock.sh from a checkout whose make test passed; run it again after a dependency change."
    "$UV" pip freeze --python "$2" --exclude-editable | grep -v -e "^uv==" -e "^pip==" -e "^setuptools==" -e " @ file:"
  } > "$1.tmp" && mv "$1.tmp" "$1"
}
write scripts/locks/cpu.txt .venv/bin/python "The versions scripts/setup.sh installs into .venv on a machine without a GPU"
write scripts/locks/evalscope.txt .venv-evalscope/bin/python "The versions in .venv-evalscope (scripts/setup.sh)"
write scripts/locks/verifiers.txt .venv-verifiers/bin/python "The versions in .venv-verifiers (scripts/setup.sh)"
echo "[lock] wrote scripts/locks/{cpu,evalscope,verifiers}.txt"
