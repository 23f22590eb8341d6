"""Where a training step's time goes: one SFT step and one GRPO step on SmolLM2 under torch's profiler.

Each side is the real CLI with its benchmark's settings (bench_train.py's for SFT, no packing; bench_grpo.py's
for GRPO, LoRA sync) plus `--profile_step`, so the profiled step is the one those benchmarks time. The tables
are the run directories' `profile-step<N>.txt`: operators by self CPU time, with their share of the step.

    .venv/bin/python benchmarks/profile_steps.py
    .venv/bin/python benchmarks/profile_steps.py --quick   # tiny model: checks the script runs
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import bench_grpo
import bench_train
from common import run_logged

PROFILED_STEP = 3  # after the first (allocations, vLLM's first batch) and the second (the first sync's warm-up)


def sft_command(model: str, workdir: Path) -> list[str]:
    args = SimpleNamespace(**{**bench_train.DEFAULTS, "model": model, "max_steps": PROFILED_STEP})
    return [*bench_train.swiftlike_command(args, False, str(workdir / "sft")), "--profile_step", str(PROFILED_STEP)]


def grpo_command(model: str, workdir: Path) -> list[str]:
    args = SimpleNamespace(**{**bench_grpo.DEFAULTS, "model": model, "steps": PROFILED_STEP})
    return [*bench_grpo.swiftlike_command(args, True, str(workdir / "grpo")), "--profile_step", str(PROFILED_STEP)]


def profile(name: str, cmd: list[str], workdir: Path, env: dict, timeout: float, top: int) -> dict:
    run_logged(cmd, workdir / f"{name}.log", timeout, env)
    found = sorted((workdir / name).glob(f"v*-*/profile-step{PROFILED_STEP}.json"))
    if not found:
        sys.exit(f"{name}: no profile-step{PROFILED_STEP}.json under {workdir / name}; see {workdir / f'{name}.log'}")
    result = json.loads(found[-1].read_text())
    print(f"\n== {name}: step {PROFILED_STEP}, {result['wall_seconds']:.2f} s wall", flush=True)
    print(f"{'operator':<48} {'self ms':>9} {'share':>7} {'calls':>7}")
    for row in result["operators"][:top]:
        print(f"{row['operator'][:48]:<48} {row['self_cpu_ms']:>9.1f} {row['share']:>7.1%} {row['calls']:>7d}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=bench_train.DEFAULTS["model"])
    parser.add_argument("--quick", action="store_true", help="tiny random model: checks the script runs")
    parser.add_argument("--top", type=int, default=15, help="operators printed per step")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--keep", default=None, help="keep run directories and logs here (default: a temp dir)")
    parser.add_argument("--json", default=None, help="also write both profiles to this file")
    args = parser.parse_args()
    model = "tiny-random/qwen2_5" if args.quick else args.model
    workdir = Path(args.keep or tempfile.mkdtemp(prefix="profile-steps-"))
    workdir.mkdir(parents=True, exist_ok=True)
    results = {"sft": profile("sft", sft_command(model, workdir), workdir, {"SWIFTLIKE_OFFLINE": "1"},
                              args.timeout, args.top),
               "grpo": profile("grpo", grpo_command(model, workdir), workdir, bench_grpo.ENGINE_ENV,
                               args.timeout, args.top)}
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
