# Sourced by every tests/gpu/run_*.sh: run from the repository root, exit 2 before doing anything when no NVIDIA
# GPU is visible (the checks need one; 2 tells "not run" apart from a failure), and collect the PASS / FAIL lines
# the same way in each script: `record` / `check_run` add a line, `write_summary` writes $OUT/<file>.md, and
# `exit "$FAILED"` is 1 when any check failed.
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then
    echo "$(basename "$0"): no NVIDIA GPU found (nvidia-smi lists none); these checks need one. Nothing was run." >&2
    exit 2
fi
GPU=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1)
RESULTS=()
FAILED=0

# record VERDICT LINE: keep LINE for the summary and print it; a FAIL verdict makes the script exit 1.
record() {
    [ "$1" = FAIL ] && FAILED=1
    RESULTS+=("$2")
    echo "$2"
}

# check_run NAME RC LOG CHECKER...: PASS when the run exited 0 and CHECKER (a command that prints its verdict)
# succeeds; the line carries the verdict, or the exit status and the log to read.
check_run() {
    local name=$1 rc=$2 log=$3 verdict
    shift 3
    if [ "$rc" -ne 0 ]; then
        record FAIL "FAIL $name: exited $rc (log: $log)"
    elif verdict=$("$@" 2>&1); then
        record PASS "PASS $name: $verdict"
    else
        record FAIL "FAIL $name: $verdict"
    fi
}

# write_summary TITLE FILE [LINE...]: when $OUT is set, $OUT/FILE holds the title (date, GPU, commit), the
# LINEs (e.g. a table header) and every recorded result (table rows as they are, other lines as a list).
write_summary() {
    local title=$1 file=$2
    shift 2
    [ -n "${OUT:-}" ] || return 0
    {
        echo "# $title ($(date -u +%Y-%m-%d), $GPU, commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ', with uncommitted changes'))"
        echo
        for line in "$@"; do echo "$line"; done
        for line in "${RESULTS[@]}"; do
            case $line in "|"*) echo "$line" ;; *) echo "- $line" ;; esac  # table rows stay rows, others a list
        done
    } >"$OUT/$file"
    echo "summary: $OUT/$file"
}
