"""DPO throughput, side by side in one run: `swiftlike rlhf --rlhf_type dpo` against a plain TRL DPOTrainer script.

Same model, pairs and settings on both sides (LoRA r=8 on all linear layers, fp32, no gradient
checkpointing, beta 0.1, sigmoid loss, no length limit). Each training is a fresh process, and the two sides
alternate over the rounds so that machine noise hits them alike; the figure that matters is the ratio.

tokens/s on both sides is the Trainer's `num_input_tokens_seen` (non-padding tokens of the chosen and
rejected sequences) divided by its `train_runtime`: swiftlike prints it in its end-of-run summary, the
baseline (`trl_dpo_baseline.py`) computes it the same way. Both run TRL's DPOTrainer and both write a
checkpoint at the last step; what differs is the rows (rendered by swiftlike's template on one side, by the
tokenizer's chat template on the other, which also trains the newline after each end-of-turn token) and what
swiftlike adds around the Trainer (atomic checkpoint publishing, args.json, logging.jsonl).

Beside the ratio, each side's bound (`bound.py`): the model FLOPs over the tokens it counted (steps x batch x 2
sequences of the mean length), of LoRA training plus the reference forward (the adapters disabled: one more
forward every step, as neither side precomputes the reference log-probs), per second of `train_runtime`, as a
share of the fp32 peak.

    .venv/bin/python benchmarks/bench_dpo.py
    .venv/bin/python benchmarks/bench_dpo.py --quick   # smoke test on a tiny model
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

from bound import Work, mean_lengths, model_shape, report
from common import (add_run_options, alternating_rounds, fill_defaults, final_record, run_logged, run_trl_baseline,
                    swiftlike_cli)

HERE = Path(__file__).resolve().parent
BASELINE = HERE / "trl_dpo_baseline.py"
SWIFTLIKE_RATE = re.compile(r"^\s*train tokens/s\s+([0-9.]+)\s*$", re.MULTILINE)
SWIFTLIKE_RUN_DIR = re.compile(r"^\s*run directory\s+(\S.*?)\s*$", re.MULTILINE)

DEFAULTS = {"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "dataset": "swiftlike/arithmetic-preference",
            "batch_size": 4, "max_steps": 12, "rounds": 3}
QUICK = {"model": "tiny-random/qwen2_5", "max_steps": 3, "rounds": 1}


def swiftlike_command(args, output_dir: str) -> list[str]:
    return [swiftlike_cli(), "rlhf", "--rlhf_type", "dpo", "--model", args.model, "--dataset", args.dataset,
            "--tuner_type", "lora", "--beta", "0.1", "--loss_type", "sigmoid",
            "--per_device_train_batch_size", str(args.batch_size), "--gradient_accumulation_steps", "1",
            "--max_steps", str(args.max_steps), "--learning_rate", "1e-4", "--gradient_checkpointing", "false",
            "--report_to", "none", "--save_steps", "100000", "--logging_steps", "1000", "--output_dir", output_dir,
            "--torch_dtype", "float32", "--lora_rank", "8", "--lora_alpha", "32", "--target_modules", "all-linear"]


def trl_command(args, output_dir: str) -> list[str]:
    return [sys.executable, str(BASELINE), "--model", args.model, "--dataset", args.dataset,
            "--batch_size", str(args.batch_size), "--max_steps", str(args.max_steps), "--learning_rate", "1e-4",
            "--output_dir", output_dir]


def run(cmd: list[str], log_path: Path, timeout: float) -> str:
    return run_logged(cmd, log_path, timeout, {"SWIFTLIKE_OFFLINE": "1"})


def run_swiftlike(args, workdir: Path, tag: str) -> dict:
    output_dir = workdir / f"swiftlike-{tag}"
    out = run(swiftlike_command(args, str(output_dir)), workdir / f"swiftlike-{tag}.log", args.timeout)
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


def run_trl(args, workdir: Path, tag: str) -> dict:
    return run_trl_baseline(trl_command(args, str(workdir / f"trl-{tag}")), workdir / f"trl-{tag}.log", args.timeout,
                            {"SWIFTLIKE_OFFLINE": "1"})


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


def dpo_work(args, result: dict) -> Work:
    """LoRA training and the reference forward over each pair's chosen and rejected sequences."""
    sequences = mean_lengths(float(result["num_input_tokens_seen"]), 2 * int(result["global_step"]) * args.batch_size)
    return Work(train=sequences, lora=True, forward=sequences)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help=f"default {DEFAULTS['model']}")
    parser.add_argument("--dataset", default=None, help=f"default {DEFAULTS['dataset']}")
    parser.add_argument("--batch_size", type=int, default=None, help=f"default {DEFAULTS['batch_size']}")
    parser.add_argument("--max_steps", type=int, default=None, help=f"default {DEFAULTS['max_steps']}")
    parser.add_argument("--rounds", type=int, default=None, help=f"default {DEFAULTS['rounds']}")
    add_run_options(parser, QUICK, "max_steps", timeout=3600)
    args = parser.parse_args()
    fill_defaults(args, DEFAULTS, QUICK)

    print("command:", shlex.join([os.path.relpath(sys.executable), os.path.relpath(__file__), *sys.argv[1:]]))
    print("swiftlike side:", shlex.join(swiftlike_command(args, "<tmp>")))
    print("TRL side:      ", shlex.join(trl_command(args, "<tmp>")))
    print(f"model {args.model}, dataset {args.dataset}, batch {args.batch_size} pairs, {args.max_steps} steps, "
          f"LoRA r8 all-linear, fp32, {args.rounds} alternating round(s)\n", flush=True)

    with tempfile.TemporaryDirectory(prefix="bench_dpo_") as tmp:
        workdir = Path(args.keep or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        results = alternating_rounds(args.rounds, [("swiftlike", lambda tag: run_swiftlike(args, workdir, tag)),
                                                   ("trl", lambda tag: run_trl(args, workdir, tag))], describe)

    ours = statistics.median(x["tokens_per_s"] for x in results["swiftlike"])
    trl = statistics.median(x["tokens_per_s"] for x in results["trl"])
    seen = (results["swiftlike"][0].get("num_input_tokens_seen"), results["trl"][0].get("num_input_tokens_seen"))
    # The same pairs and steps on both sides: the runtime ratio is the pairs/s ratio, free of the rendering's
    # token count (the tokenizer's Jinja template also trains the newline after each end-of-turn token).
    runtime = {name: statistics.median(float(x["train_runtime"]) for x in results[name]) for name in results}
    pairs_ratio = runtime["trl"] / runtime["swiftlike"]
    summary = {"swiftlike_tokens_per_s": ours, "trl_tokens_per_s": trl, "ratio": ours / trl,
               "tokens_seen_swiftlike": seen[0], "tokens_seen_trl": seen[1], "swiftlike_runtime_s": runtime["swiftlike"],
               "trl_runtime_s": runtime["trl"], "pairs_per_s_ratio": pairs_ratio}
    print("\n| swiftlike tokens/s | TRL tokens/s | swiftlike/TRL tokens/s | tokens seen (swiftlike / TRL) | "
          "runtime s (swiftlike / TRL) | swiftlike/TRL pairs/s |")
    print("|---:|---:|---:|---|---|---:|")
    print(f"| {ours:.1f} | {trl:.1f} | {ours / trl:.3f} | {seen[0]} / {seen[1]} | "
          f"{runtime['swiftlike']:.1f} / {runtime['trl']:.1f} | {pairs_ratio:.3f} |")
    print(f"\n(median of {args.rounds} round(s); tokens seen = input tokens the Trainer counted, padding "
          "excluded, first round)")
    if seen[0] != seen[1]:
        print("note: the two sides counted different numbers of tokens (different rendering of the same pairs); "
              "tokens/s still divides each side's own count by its own runtime")

    shape = model_shape(args.model)
    print("\nthe machine's bound: model FLOPs of the tokens each side counted over its train_runtime, all rounds")
    for name, runs in results.items():
        summary[f"bound_{name}"] = report(name, shape, sum((dpo_work(args, x) for x in runs), Work()),
                                          sum(float(x["train_runtime"]) for x in runs),
                                          sum(int(x["global_step"]) for x in runs))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "summary": summary, "rounds": results}, f, indent=2)


if __name__ == "__main__":
    main()
