"""Two jobs on one machine: how much of its speed alone each of two trainings keeps when they share the cores.

The jobs are two `swiftlike rlhf --rlhf_type dpo` runs with bench_dpo.py's settings (SmolLM2, LoRA, fp32),
started together; each one's tokens/s (the Trainer's own count over its `train_runtime`) is divided by the
tokens/s of the same job alone (median of rounds in which the two settings alternate). Two settings, each
measured alone and paired:

- `fixed`: `OMP_NUM_THREADS` = the CPUs this process may use, the count torch picks by itself and what
  swiftlike ran with before (an `OMP_NUM_THREADS` in the environment turns the adaptation off);
- `fair`: swiftlike's default, the thread count re-decided at every step from the load
  (`swiftlike/utils/threads.py`, `swiftlike/train/fair_threads.py`).

A fair share of two cores is 50% each; the goal is >= 40%.

    .venv/bin/python benchmarks/bench_pair.py
    .venv/bin/python benchmarks/bench_pair.py --quick   # tiny model: checks the script runs
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import bench_dpo
from common import in_turn, run_logged

RATE = re.compile(r"^\s*train tokens/s\s+([0-9.]+)\s*$", re.MULTILINE)
SETTINGS = {"fixed": {"OMP_NUM_THREADS": str(len(os.sched_getaffinity(0)))}, "fair": {}}
DEFAULTS = {**bench_dpo.DEFAULTS, "max_steps": 4}
QUICK = {"model": "tiny-random/qwen2_5", "max_steps": 2}


def rate_of(log_text: str, log_path: Path) -> float:
    found = RATE.findall(log_text)
    if not found:
        sys.exit(f"no 'train tokens/s' line; see {log_path}")
    return float(found[-1])


def alone(args, workdir: Path, setting: str, round_index: int) -> float:
    tag = f"{setting}-alone-r{round_index + 1}"
    cmd = bench_dpo.swiftlike_command(args, str(workdir / tag))
    log = workdir / f"{tag}.log"
    return rate_of(run_logged(cmd, log, args.timeout, {"SWIFTLIKE_OFFLINE": "1", **SETTINGS[setting]}), log)


def paired(args, workdir: Path, setting: str) -> list[float]:
    """Both jobs started at once; each one's own tokens/s."""
    env = {**os.environ, "SWIFTLIKE_OFFLINE": "1", **SETTINGS[setting]}
    jobs = []
    for i in (1, 2):
        log = workdir / f"{setting}-pair{i}.log"
        cmd = bench_dpo.swiftlike_command(args, str(workdir / f"{setting}-pair{i}"))
        with open(log, "w") as out:  # the child keeps its own copy of the descriptor
            jobs.append((subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env), log))
    rates = []
    for proc, log in jobs:
        if proc.wait(timeout=args.timeout) != 0:
            sys.exit(f"a paired job failed ({proc.returncode}); see {log}")
        rates.append(rate_of(log.read_text(errors="replace"), log))
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--max_steps", type=int, default=None)
    parser.add_argument("--alone_rounds", type=int, default=2, help="rounds of each setting alone (median)")
    parser.add_argument("--quick", action="store_true", help="tiny random model: checks the script runs")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds allowed for one run")
    parser.add_argument("--keep", default=None, help="keep run directories and logs here (default: a temp dir)")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    cli = parser.parse_args()
    settings = {**DEFAULTS, **(QUICK if cli.quick else {})}
    settings.update({k: v for k, v in (("model", cli.model), ("max_steps", cli.max_steps)) if v is not None})
    args = SimpleNamespace(**settings, timeout=cli.timeout, alone_rounds=1 if cli.quick else cli.alone_rounds)
    workdir = Path(cli.keep or tempfile.mkdtemp(prefix="bench-pair-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"two `swiftlike rlhf --rlhf_type dpo` jobs, {args.model}, {args.max_steps} steps each, "
          f"on {len(os.sched_getaffinity(0))} CPUs", flush=True)
    solo: dict[str, list[float]] = {setting: [] for setting in SETTINGS}
    for r in range(args.alone_rounds):  # alone first, the settings alternating: what adapting costs alone
        for setting in in_turn(list(SETTINGS), r):
            solo[setting].append(alone(args, workdir, setting, r))
            print(f"{setting:<9} alone, round {r + 1}: {solo[setting][-1]:6.1f} tokens/s", flush=True)
    results = {}
    for setting in SETTINGS:
        pair = paired(args, workdir, setting)
        base = statistics.median(solo[setting])
        kept = [rate / base for rate in pair]
        results[setting] = {"alone_tokens_per_s": base, "alone_rounds": solo[setting], "paired_tokens_per_s": pair,
                           "kept": kept}
        print(f"{setting:<9} alone {base:6.1f} tokens/s (median); paired {pair[0]:6.1f} and {pair[1]:6.1f} tokens/s = "
              f"{kept[0]:.0%} and {kept[1]:.0%} of alone (goal >= 40% each)", flush=True)
    fixed, fair = results["fixed"], results["fair"]
    print(f"alone, fair / fixed: {fair['alone_tokens_per_s'] / fixed['alone_tokens_per_s']:.3f}x; "
          f"paired, fair / fixed: {sum(fair['paired_tokens_per_s']) / sum(fixed['paired_tokens_per_s']):.2f}x")
    if cli.json:
        Path(cli.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
