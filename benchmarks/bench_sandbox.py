"""The tool sandbox's reason for a forking server, measured: a sandboxed call (`run_tool_isolated`, forked from
a warm server into fresh namespaces with rlimits) against the alternative of a fresh interpreter per call that
imports the tools. Both sides run in alternating rounds in one process run; the figure is their ratio.

    .venv/bin/python benchmarks/bench_sandbox.py [--rounds 3] [--calls 20]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from swiftlike.tools.sandbox import run_tool_isolated  # noqa: E402


def sandboxed(calls: int) -> float:
    started = time.perf_counter()
    for i in range(calls):
        run_tool_isolated("calculator", {"expression": f"{i} * 3"})
    return (time.perf_counter() - started) / calls


def fresh_interpreter(calls: int) -> float:
    code = f"import sys; sys.path[:0] = [{str(REPO)!r}]; import swiftlike.tools"
    started = time.perf_counter()
    for _ in range(calls):
        subprocess.run([sys.executable, "-I", "-c", code], check=True, timeout=60)
    return (time.perf_counter() - started) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    run_tool_isolated("calculator", {"expression": "1 + 1"})  # the server starts once, outside the timing
    pairs = []
    for r in range(args.rounds):
        sides = [sandboxed, fresh_interpreter] if r % 2 == 0 else [fresh_interpreter, sandboxed]
        timed = {side.__name__: side(args.calls if side is sandboxed else max(args.calls // 4, 1)) for side in sides}
        pairs.append(timed)
        print(f"round {r + 1}: sandboxed {timed['sandboxed'] * 1e3:.1f} ms/call, fresh interpreter "
              f"{timed['fresh_interpreter'] * 1e3:.1f} ms/call")
    ratio = statistics.median(p["sandboxed"] / p["fresh_interpreter"] for p in pairs)
    print(f"sandboxed / fresh interpreter: {ratio:.3f}x (median of {args.rounds} rounds)")


if __name__ == "__main__":
    main()
