"""GKD step time, side by side in one run: `swiftlike rlhf --rlhf_type gkd` (student samples on colocated vLLM)
against TRL's `GKDTrainer` (student samples with `model.generate`).

Same student, teacher, prompts and settings on both sides: SmolLM2-135M-Instruct as the student with LoRA r16
on all linear layers, a separate copy of the same weights as the teacher (so both sides hold two models; the
teacher is a distinct directory, so swiftlike does not use its adapter-disabled shortcut), fully on-policy
(lmbda 1), beta 0.5, temperature 0.9, 48 new tokens, 8 prompts a step, fp32. Each training is a fresh
process and the sides alternate over the rounds; the figure is the ratio of seconds per optimizer step
(`train_runtime / global_step`; goal <= 0.7x). vLLM's start-up (before training) is reported apart, as the
whole process's wall time.

Beside the ratio, each side's bound (`bound.py`): the model FLOPs of sampling (each prompt prefilled, its
completion decoded), the teacher's forward and the student's LoRA training over every prompt + completion, per
second of `train_runtime`, as a share of the fp32 peak. Completion lengths are each side's mean over the run
(swiftlike's logged `completions/mean_length`, TRL's counted around its `generate_on_policy_outputs`); the
prompts' length, which neither side records, is the dataset's mean ("~").

    .venv/bin/python benchmarks/bench_gkd.py
    .venv/bin/python benchmarks/bench_gkd.py --quick   # smoke test on a tiny model
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bound import Work, mean_prompt_length, model_shape, report, rollout_work
from common import (add_run_options, alternating_rounds, fill_defaults, final_record, mean_over_steps, run_logged,
                    run_trl_baseline, swiftlike_cli)

HERE = Path(__file__).resolve().parent
BASELINE = HERE / "trl_gkd_baseline.py"
SWIFTLIKE_RUN_DIR = re.compile(r"^\s*run directory\s+(\S.*?)\s*$", re.MULTILINE)

DEFAULTS = {"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "dataset": "swiftlike/alpaca-mini", "batch_size": 8,
            "max_steps": 6, "max_new_tokens": 48, "rounds": 3}
QUICK = {"model": "tiny-random/qwen2_5", "max_steps": 2, "max_new_tokens": 16, "rounds": 1}


def swiftlike_command(args, teacher: str, output_dir: str) -> list[str]:
    return [swiftlike_cli(), "rlhf", "--rlhf_type", "gkd", "--model", args.model, "--teacher_model", teacher,
            "--dataset", args.dataset, "--tuner_type", "lora", "--lora_rank", "16", "--lora_alpha", "32",
            "--target_modules", "all-linear", "--lmbda", "1", "--beta", "0.5", "--temperature", "0.9",
            "--max_completion_length", str(args.max_new_tokens), "--use_vllm", "true", "--vllm_mode", "colocate",
            "--per_device_train_batch_size", str(args.batch_size), "--gradient_accumulation_steps", "1",
            "--max_steps", str(args.max_steps), "--learning_rate", "1e-4", "--gradient_checkpointing", "false",
            "--report_to", "none", "--save_steps", "100000", "--logging_steps", "1000", "--torch_dtype", "float32",
            "--split_dataset_ratio", "0", "--output_dir", output_dir]


def trl_command(args, teacher: str, output_dir: str) -> list[str]:
    return [sys.executable, str(BASELINE), "--model", args.model, "--teacher", teacher, "--dataset", args.dataset,
            "--batch_size", str(args.batch_size), "--max_steps", str(args.max_steps),
            "--max_new_tokens", str(args.max_new_tokens), "--output_dir", output_dir]


def run(cmd: list[str], log_path: Path, timeout: float) -> tuple[str, float]:
    start = time.perf_counter()
    out = run_logged(cmd, log_path, timeout, {"SWIFTLIKE_OFFLINE": "1"})
    return out, time.perf_counter() - start


def run_swiftlike(args, teacher: str, workdir: Path, tag: str) -> dict:
    out, wall = run(swiftlike_command(args, teacher, str(workdir / f"swiftlike-{tag}")),
                    workdir / f"swiftlike-{tag}.log", args.timeout)
    run_dir = SWIFTLIKE_RUN_DIR.findall(out)
    final = final_record(Path(run_dir[-1])) if run_dir else None
    if not final:
        sys.exit(f"no final training record in the swiftlike run; see {workdir / f'swiftlike-{tag}.log'}")
    runtime, steps = float(final["train_runtime"]), int(final["step"])
    return {"step_s": runtime / steps, "train_runtime": runtime, "global_step": steps, "wall_s": wall,
            "completion_mean_length": mean_over_steps(Path(run_dir[-1]), "completions/mean_length")}


def run_trl(args, teacher: str, workdir: Path, tag: str) -> dict:
    start = time.perf_counter()
    result = run_trl_baseline(trl_command(args, teacher, str(workdir / f"trl-{tag}")), workdir / f"trl-{tag}.log",
                              args.timeout, {"SWIFTLIKE_OFFLINE": "1"})
    return {**result, "wall_s": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name in ("model", "dataset"):
        parser.add_argument(f"--{name}", default=None, help=f"default {DEFAULTS[name]}")
    for name in ("batch_size", "max_steps", "max_new_tokens", "rounds"):
        parser.add_argument(f"--{name}", type=int, default=None, help=f"default {DEFAULTS[name]}")
    add_run_options(parser, QUICK, "max_steps", timeout=3600)
    args = parser.parse_args()
    fill_defaults(args, DEFAULTS, QUICK)
    os.environ.setdefault("SWIFTLIKE_OFFLINE", "1")
    sys.path.insert(0, str(HERE.parent))
    from swiftlike.model import resolve_model

    print("command:", shlex.join([os.path.relpath(sys.executable), os.path.relpath(__file__), *sys.argv[1:]]))
    print("swiftlike side:", shlex.join(swiftlike_command(args, "<teacher copy>", "<tmp>")))
    print("TRL side:      ", shlex.join(trl_command(args, "<teacher copy>", "<tmp>")))
    print(f"student {args.model}, teacher a copy of it, dataset {args.dataset}, {args.batch_size} prompts a step, "
          f"{args.max_new_tokens} new tokens, {args.max_steps} steps, lmbda 1, {args.rounds} alternating round(s)\n",
          flush=True)

    with tempfile.TemporaryDirectory(prefix="bench_gkd_") as tmp:
        workdir = Path(args.keep or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        teacher = workdir / "teacher"
        if not teacher.exists():
            shutil.copytree(resolve_model(args.model).model_dir, teacher)
        sides = [("swiftlike", lambda tag: run_swiftlike(args, str(teacher), workdir, tag)),
                 ("trl", lambda tag: run_trl(args, str(teacher), workdir, tag))]
        results = alternating_rounds(args.rounds, sides, lambda result: (
            f"{result['step_s']:6.2f} s/step ({result['global_step']} steps, train {result['train_runtime']:.1f} s, "
            f"process {result['wall_s']:.1f} s)"))

    ours = statistics.median(x["step_s"] for x in results["swiftlike"])
    trl = statistics.median(x["step_s"] for x in results["trl"])
    wall = {k: statistics.median(x["wall_s"] for x in v) for k, v in results.items()}
    summary = {"swiftlike_step_s": ours, "trl_step_s": trl, "ratio": ours / trl,
               "swiftlike_wall_s": wall["swiftlike"], "trl_wall_s": wall["trl"]}
    print("\n| swiftlike s/step | TRL s/step | swiftlike/TRL step time | process wall s (swiftlike / TRL) |")
    print("|---:|---:|---:|---|")
    print(f"| {ours:.2f} | {trl:.2f} | {ours / trl:.3f} | {wall['swiftlike']:.0f} / {wall['trl']:.0f} |")
    print(f"\n(median of {args.rounds} round(s); goal: step time ratio <= 0.7)")

    shape, prompt_length = model_shape(args.model), mean_prompt_length(args.model, args.dataset)
    print(f"\nthe machine's bound: model FLOPs over train_runtime, all rounds; prompts ~{prompt_length} tokens "
          "(the dataset's mean)")
    for name, runs in results.items():  # per step: sampling, the teacher's forward, the student's LoRA training
        work = sum((rollout_work(prompt_length, [x["completion_mean_length"]] * x["global_step"], args.batch_size,
                                 lora=True, forwards=1) for x in runs), Work())
        summary[f"bound_{name}"] = report(name, shape, work, sum(x["train_runtime"] for x in runs),
                                          sum(x["global_step"] for x in runs), approximate=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "summary": summary, "rounds": results}, f, indent=2)


if __name__ == "__main__":
    main()
