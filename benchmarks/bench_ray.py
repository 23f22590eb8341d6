"""What Ray placement costs and buys, side by side in one run: GRPO step time on SmolLM2 with LoRA and vLLM.

Three kinds of run, each a fresh process, on the same model, rows (`swiftlike/arithmetic`), rewards (`accuracy`
+ `format_hash`), group size, batch, completion length, learning rate, fp32 training and engine, merged-weight
sync and 1 GiB of KV cache:

- plain colocate:  `swiftlike rlhf --use_vllm true --vllm_mode colocate`, one process (the baseline);
- Ray colocate:    the same job as `swiftlike rlhf --use_ray true` with `colocate_groups: [[train, rollout]]`,
                   train.gpus 1: one train actor with its engine in-process, on the same cores; the ratio to
                   the plain run is what Ray's placement and actor start-up cost per step (goal <= 1.1x);
- Ray separate:    train.gpus 1 and rollout.gpus 1: the train actor and a rollout replica (a `swiftlike rollout`
                   server in an actor) each pinned to its own half of the cores (one core each on 2 cores), full
                   weights pushed over HTTP every step; its ratio to Ray colocate is what separating the roles
                   does on this machine.

Step time is wall time between consecutive per-step log records (`elapsed_s` in logging.jsonl), so each step
counts sync + generation + rewards + log-probs + backward + optimizer; start-up (Ray, actors, engines), the
first step and the final save are left out. The runs alternate their order over the rounds; compare the ratios,
not the seconds.

    .venv/bin/python benchmarks/bench_ray.py
    .venv/bin/python benchmarks/bench_ray.py --quick   # smoke test on a tiny model
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import yaml
from common import add_run_options, fill_defaults, run_logged

from swiftlike.arguments.parser import settings_to_argv

DEFAULTS = {"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "num_generations": 4, "batch_size": 8,
            "max_completion_length": 32, "steps": 6, "rounds": 1}
QUICK = {"model": "tiny-random/qwen2_5", "steps": 3, "rounds": 1}
ENGINE_ENV = {"SWIFTLIKE_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
              "RAY_USAGE_STATS_ENABLED": "0"}
SIDES = [("plain", "plain colocate (one process)"), ("ray-colocate", "Ray colocate [[train, rollout]]"),
         ("ray-separate", "Ray separate (train 1 + rollout 1)")]


def job_settings(args, output_dir: str) -> dict:
    return {"rlhf_type": "grpo", "model": args.model, "dataset": ["swiftlike/arithmetic"],
            "reward_funcs": ["accuracy", "format_hash"], "num_generations": args.num_generations,
            "per_device_train_batch_size": args.batch_size, "gradient_accumulation_steps": 1,
            "max_completion_length": args.max_completion_length, "temperature": 1.0, "beta": 0.04,
            "learning_rate": 1e-4, "max_steps": args.steps, "tuner_type": "lora", "lora_rank": 8, "lora_alpha": 32,
            "torch_dtype": "float32", "gradient_checkpointing": False, "use_vllm": True, "vllm_max_model_len": 512,
            "logging_steps": 1, "save_steps": 100000, "report_to": ["none"], "seed": 42, "output_dir": output_dir}


def command(side: str, args, work: Path) -> list[str]:
    settings = job_settings(args, str(work / "run"))
    cli = [sys.executable, "-m", "swiftlike.cli.main", "rlhf"]
    if side == "plain":
        return [*cli, *settings_to_argv({**settings, "vllm_mode": "colocate"})]
    job = {**settings, "train": {"gpus": 1}, "rollout": {"gpus": 1}}
    if side == "ray-colocate":
        job["colocate_groups"] = [["train", "rollout"]]
    config = work / "job.yaml"
    config.write_text(yaml.safe_dump(job))
    return [*cli, "--use_ray", "true", "--config", str(config)]


def step_times(run_root: Path) -> list[float]:
    run_dir = sorted(run_root.glob("v*-*"))[-1]
    stamps = [json.loads(line)["elapsed_s"] for line in (run_dir / "logging.jsonl").open()
              if '"loss"' in line and '"train_runtime"' not in line]
    return [b - a for a, b in zip(stamps, stamps[1:])]  # from step 2 on: the first includes warm-up


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for key in DEFAULTS:
        parser.add_argument(f"--{key}", type=type(DEFAULTS[key]) if key != "model" else str, default=None)
    add_run_options(parser, QUICK, "steps", timeout=3600)
    args = parser.parse_args()
    fill_defaults(args, DEFAULTS, QUICK)
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_ray_"))
    root.mkdir(parents=True, exist_ok=True)
    times: dict[str, list[float]] = {side: [] for side, _ in SIDES}
    for round_index in range(args.rounds):
        order = SIDES if round_index % 2 == 0 else SIDES[::-1]
        for side, label in order:
            work = root / f"{side}-{round_index}"
            work.mkdir(parents=True, exist_ok=True)
            print(f"round {round_index + 1}/{args.rounds}: {label} ...", flush=True)
            run_logged(command(side, args, work), work / "run.log", args.timeout, ENGINE_ENV)
            steps = step_times(work / "run")
            times[side] += steps
            print(f"  s/step {statistics.mean(steps):.2f} ({', '.join(f'{t:.2f}' for t in steps)})", flush=True)
    mean = {side: statistics.mean(values) for side, values in times.items()}
    print(f"\nGRPO on {args.model}: {args.batch_size} completions a step ({args.num_generations} per prompt), "
          f"{args.max_completion_length} new tokens, {args.steps} steps, {args.rounds} round(s)")
    print("| side | s/step | ratio |\n|---|---:|---:|")
    print(f"| {SIDES[0][1]} | {mean['plain']:.2f} | 1.000x |")
    print(f"| {SIDES[1][1]} | {mean['ray-colocate']:.2f} | {mean['ray-colocate'] / mean['plain']:.3f}x of plain "
          f"(goal <= 1.1x) |")
    print(f"| {SIDES[2][1]} | {mean['ray-separate']:.2f} | {mean['ray-separate'] / mean['ray-colocate']:.3f}x of "
          "Ray colocate |")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "step_times": times, "mean": mean}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
