"""Verdict on one GRPO run directory for tests/gpu/run_rl_checks.sh: exit 0 and a one-line summary when every
logged value is finite and the engine's k3 KL to the trainer stays under --k3_max at every step, else exit 1."""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from swiftlike.train.outputs import read_log


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("output_dir", help="the --output_dir of the run (its v*-* run directory is found inside)")
    parser.add_argument("--k3_max", type=float, default=0.05)
    args = parser.parse_args()
    run_dirs = sorted(Path(args.output_dir).glob("v*-*"))
    if not run_dirs:
        print(f"no run directory under {args.output_dir}")
        return 1
    steps = [e for e in read_log(run_dirs[-1]) if "loss" in e]
    if len(steps) < 3:
        print(f"only {len(steps)} logged training steps, expected 3")
        return 1
    problems = []
    for e in steps:
        for key, value in e.items():
            if isinstance(value, float) and not math.isfinite(value):
                problems.append(f"step {e['step']}: {key} = {value}")
        k3 = e.get("rollout_correction/k3_kl")
        if k3 is None or not k3 < args.k3_max:
            problems.append(f"step {e['step']}: rollout_correction/k3_kl = {k3} (limit {args.k3_max})")
    k3s = ", ".join(f"{e.get('rollout_correction/k3_kl', float('nan')):.2e}" for e in steps)
    forced = ", ".join(f"{e.get('sampling/forced_keep_frac', float('nan')):.4f}" for e in steps)
    summary = f"k3_kl after each sync [{k3s}], forced_keep_frac [{forced}], last loss {steps[-1]['loss']:.4g}"
    if problems:
        print("; ".join(problems) + f" | {summary}")
        return 1
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
