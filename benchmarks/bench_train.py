"""Training throughput, side by side in one run: `swiftlike sft` against a plain TRL SFTTrainer script.

Same model, rows and settings on both sides (LoRA r=8 on all linear layers, fp32, no
gradient checkpointing), with and without packing. Each training is a fresh process, and
the two sides alternate over the rounds so that machine noise hits them alike; the figure
that matters is the ratio, not the tokens/s.

tokens/s on both sides is the Trainer's `num_input_tokens_seen` (non-padding tokens; every
token of a packed, padding-free batch) divided by its `train_runtime`: swiftlike prints it
in its end-of-run summary, the baseline (`trl_sft_baseline.py`) computes it the same way.
Each side keeps its own design inside that time: swiftlike always writes a final
checkpoint (and draws its PNG curves) at the last step, inside `train_runtime`; TRL computes
the loss through its tiled "fused LM head" and logs entropy and token accuracy every step.

Beside the ratio, each side's bound (`bound.py`): the model FLOPs of LoRA training over the
tokens it counted, per second of `train_runtime`, as a share of the fp32 peak. Without packing
the sequences are steps x batch rows of the mean length; with packing the attention runs per
original sample, whose count is estimated from the dataset's mean sample length ("~").

    .venv/bin/python benchmarks/bench_train.py
    .venv/bin/python benchmarks/bench_train.py --quick   # smoke test on a tiny model
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

from bound import Work, dataset_lengths, mean_lengths, model_shape, report
from common import add_run_options, fill_defaults, final_record, in_turn, run_logged, run_trl_baseline, swiftlike_cli

HERE = Path(__file__).resolve().parent
BASELINE = HERE / "trl_sft_baseline.py"
SWIFTLIKE_RATE = re.compile(r"^\s*train tokens/s\s+([0-9.]+)\s*$", re.MULTILINE)
SWIFTLIKE_RUN_DIR = re.compile(r"^\s*run directory\s+(\S.*?)\s*$", re.MULTILINE)

DEFAULTS = {"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "dataset": "swiftlike/alpaca-mini", "max_length": 512,
            "batch_size": 4, "max_steps": 8, "rounds": 2}
QUICK = {"model": "tiny-random/qwen2_5", "max_steps": 3, "rounds": 1}
MODES = [("no packing", False), ("packing", True)]


def _flag(value: bool | str) -> str:
    return value if isinstance(value, str) else str(value).lower()


def swiftlike_command(args, packing: bool | str, output_dir: str) -> list[str]:
    return [swiftlike_cli(), "sft", "--model", args.model, "--dataset", args.dataset, "--tuner_type", "lora",
            "--max_length", str(args.max_length), "--packing", _flag(packing),
            "--per_device_train_batch_size", str(args.batch_size), "--gradient_accumulation_steps", "1",
            "--max_steps", str(args.max_steps), "--learning_rate", "1e-4", "--gradient_checkpointing", "false",
            "--report_to", "none", "--save_steps", "100000", "--logging_steps", "1000", "--output_dir", output_dir,
            "--torch_dtype", "float32", "--lora_rank", "8", "--lora_alpha", "32", "--target_modules", "all-linear"]


def trl_command(args, packing: bool | str, output_dir: str) -> list[str]:
    return [sys.executable, str(BASELINE), "--model", args.model, "--dataset", args.dataset,
            "--max_length", str(args.max_length), "--packing", _flag(packing),
            "--batch_size", str(args.batch_size), "--max_steps", str(args.max_steps), "--learning_rate", "1e-4",
            "--output_dir", output_dir]


def run(cmd: list[str], log_path: Path, timeout: float) -> str:
    return run_logged(cmd, log_path, timeout, {"SWIFTLIKE_OFFLINE": "1"})


def run_swiftlike(args, packing: bool, workdir: Path, tag: str) -> dict:
    output_dir = workdir / f"swiftlike-{tag}"
    out = run(swiftlike_command(args, packing, str(output_dir)), workdir / f"swiftlike-{tag}.log", args.timeout)
    rate = SWIFTLIKE_RATE.findall(out)
    if not rate:
        sys.exit(f"no 'train tokens/s' line in the swiftlike output; see {workdir / f'swiftlike-{tag}.log'}")
    result = {"tokens_per_s": float(rate[-1])}
    run_dir = SWIFTLIKE_RUN_DIR.findall(out)
    final = final_record(Path(run_dir[-1])) if run_dir else None
    if final:  # the Trainer's final record: tokens seen, runtime, steps
        result.update(num_input_tokens_seen=final.get("num_input_tokens_seen"),
                      train_runtime=final.get("train_runtime"), global_step=final.get("step"))
    return result


def run_trl(args, packing: bool, workdir: Path, tag: str) -> dict:
    return run_trl_baseline(trl_command(args, packing, str(workdir / f"trl-{tag}")), workdir / f"trl-{tag}.log",
                            args.timeout, {"SWIFTLIKE_OFFLINE": "1"})


def describe(result: dict) -> str:
    parts = [f"{result['tokens_per_s']:8.1f} tokens/s"]
    if result.get("num_input_tokens_seen") is not None:
        parts.append(f"{result['num_input_tokens_seen']} tokens")
    if result.get("trl_num_tokens") not in (None, result.get("num_input_tokens_seen")):
        parts.append(f"TRL's own count {result['trl_num_tokens']}")
    if result.get("train_runtime") is not None:
        parts.append(f"{float(result['train_runtime']):.1f} s")
    if result.get("global_step") is not None:
        parts.append(f"{result['global_step']} steps")
    return ", ".join(parts)


def sft_work(args, result: dict, sample_length: float | None) -> Work:
    """LoRA training over the run's tokens: steps x batch rows, or (packing, `sample_length` given) as many
    samples of the dataset's mean length as the tokens fill."""
    tokens = float(result["num_input_tokens_seen"])
    rows = round(tokens / sample_length) if sample_length else int(result["global_step"]) * args.batch_size
    return Work(train=mean_lengths(tokens, rows), lora=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help=f"default {DEFAULTS['model']}")
    parser.add_argument("--dataset", default=None, help=f"default {DEFAULTS['dataset']}")
    parser.add_argument("--max_length", type=int, default=None, help=f"default {DEFAULTS['max_length']}")
    parser.add_argument("--batch_size", type=int, default=None, help=f"default {DEFAULTS['batch_size']}")
    parser.add_argument("--max_steps", type=int, default=None, help=f"default {DEFAULTS['max_steps']}")
    parser.add_argument("--rounds", type=int, default=None, help=f"default {DEFAULTS['rounds']}")
    add_run_options(parser, QUICK, "max_steps", timeout=3600)
    args = parser.parse_args()
    fill_defaults(args, DEFAULTS, QUICK)

    print("command:", shlex.join([os.path.relpath(sys.executable), os.path.relpath(__file__), *sys.argv[1:]]))
    print("swiftlike side:", shlex.join(swiftlike_command(args, "false|true", "<tmp>")))
    print("TRL side:      ", shlex.join(trl_command(args, "false|true", "<tmp>")))
    print(f"model {args.model}, dataset {args.dataset}, max_length {args.max_length}, batch {args.batch_size}, "
          f"{args.max_steps} steps, LoRA r8 all-linear, fp32, {args.rounds} alternating round(s)\n", flush=True)

    results: dict[str, dict[str, list[dict]]] = {mode: {"swiftlike": [], "trl": []} for mode, _ in MODES}
    sides = [("swiftlike", run_swiftlike), ("trl", run_trl)]
    with tempfile.TemporaryDirectory(prefix="bench_train_") as tmp:
        workdir = Path(args.keep or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        for r in range(args.rounds):
            for i, (mode, packing) in enumerate(MODES):
                # who goes first flips every round within a mode, and between back-to-back runs
                for name, fn in in_turn(sides, r + i):
                    tag = f"{'packing' if packing else 'nopacking'}-r{r + 1}"
                    result = fn(args, packing, workdir, tag)
                    results[mode][name].append(result)
                    print(f"round {r + 1}  {mode:<10}  {name:<9}  {describe(result)}", flush=True)

    summary = {}
    print("\n| mode | swiftlike tokens/s | TRL tokens/s | swiftlike/TRL | tokens seen (swiftlike / TRL) |")
    print("|---|---:|---:|---:|---|")
    for mode, _ in MODES:
        ours = statistics.median(x["tokens_per_s"] for x in results[mode]["swiftlike"])
        trl = statistics.median(x["tokens_per_s"] for x in results[mode]["trl"])
        seen = (results[mode]["swiftlike"][0].get("num_input_tokens_seen"),
                results[mode]["trl"][0].get("num_input_tokens_seen"))
        summary[mode] = {"swiftlike_tokens_per_s": ours, "trl_tokens_per_s": trl, "ratio": ours / trl,
                         "tokens_seen_swiftlike": seen[0], "tokens_seen_trl": seen[1]}
        print(f"| {mode} | {ours:.1f} | {trl:.1f} | {ours / trl:.3f} | {seen[0]} / {seen[1]} |")
    print(f"\n(median of {args.rounds} round(s); tokens seen = input tokens the Trainer counted, padding "
          "excluded, first round)")
    for mode, figures in summary.items():
        if figures["tokens_seen_swiftlike"] != figures["tokens_seen_trl"]:
            print(f"note: {mode}: the two sides counted different numbers of tokens (different encoding, truncation "
                  "or counting rule); tokens/s still divides each side's own count by its own runtime")

    shape = model_shape(args.model)
    sample_length = statistics.fmean(dataset_lengths(args.model, args.dataset, False, args.max_length))
    print("\nthe machine's bound: model FLOPs of the tokens each side counted over its train_runtime, all rounds")
    for mode, packing in MODES:
        for name, runs in results[mode].items():
            work = sum((sft_work(args, x, sample_length if packing else None) for x in runs), Work())
            summary[mode][f"bound_{name}"] = report(
                f"{name:<9} ({mode})", shape, work, sum(float(x["train_runtime"]) for x in runs),
                sum(int(x["global_step"]) for x in runs), approximate=packing)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "summary": summary, "rounds": results}, f, indent=2)


if __name__ == "__main__":
    main()
