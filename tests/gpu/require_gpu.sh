# Sourced by the tests/gpu/run_*.sh scripts: run from the repository root, and exit 2 before doing anything
# when no NVIDIA GPU is visible (the checks need one; 2 tells "not run" apart from a failure).
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then
    echo "$(basename "$0"): no NVIDIA GPU found (nvidia-smi lists none); these checks need one. Nothing was run." >&2
    exit 2
fi
