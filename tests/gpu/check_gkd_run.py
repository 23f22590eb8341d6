"""Verdict on one GKD run directory for tests/gpu/run_gkd_checks.sh: exit 0 and a one-line summary when every
logged value is finite, every step was on-policy (--lmbda 1), and, for the adapter-disabled teacher (`--run
lora-self`), the first step's divergence is under --jsd0_max (the student and its own base agree before any
update, up to bf16 rounding); else exit 1 with what failed."""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from swiftlike.train.outputs import read_log


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("output_dir", help="the --output_dir of the run (its v*-* run directory is found inside)")
    parser.add_argument("--run", required=True, help="which run of run_gkd_checks.sh this is (lora-self, ...)")
    parser.add_argument("--jsd0_max", type=float, default=0.01)
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
        problems += [f"step {e['step']}: {key} = {value}" for key, value in e.items()
                     if isinstance(value, float) and not math.isfinite(value)]
        if e.get("on_policy") != 1.0:
            problems.append(f"step {e['step']}: on_policy = {e.get('on_policy')} (expected 1.0 with --lmbda 1)")
    if args.run == "lora-self" and not abs(steps[0]["jsd"]) < args.jsd0_max:
        problems.append(f"first jsd {steps[0]['jsd']:.3g} with the adapter-disabled teacher (limit {args.jsd0_max})")
    jsds = ", ".join(f"{e['jsd']:.3g}" for e in steps)
    kls = ", ".join(f"{e.get('teacher_kl', float('nan')):.3g}" for e in steps)
    summary = f"jsd [{jsds}], teacher_kl [{kls}], last loss {steps[-1]['loss']:.4g}"
    if problems:
        print("; ".join(problems) + f" | {summary}")
        return 1
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
