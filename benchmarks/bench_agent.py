"""Multi-turn GRPO on a rollout server with uneven trajectories: --max_staleness 0 against 2 (--bounds), in one run.

The server runs the scheduler (benchmarks/agent_rounds_plugin.py: each trajectory draws 1-4 rounds, a tool-style
result inserted after each round but its last), pinned to core 0; the trainer (`--vllm_mode server`, taking the
server's scheduler as an ms-swift command does) is pinned to core 1, one thread each. The same GRPO run with
`--async_generate true --max_staleness K` for each K (0: synchronous). Every run trains on the same number of
trajectories (steps x batch). Reported per K, over steps 2..N (the first step has nothing to overlap yet): step
time and trained tokens/s (sampled tokens only; inserted ids are context), medians over rounds run in
alternating order, with their ratios to K=0; and, so that
nothing is silently dropped, the trajectories trained on (completions.jsonl lines, against steps x batch),
groups dropped as too stale (`staleness/dropped`), trajectories whose environment raised, the largest staleness
trained on and the partial rollouts the server made (turns cut by an update and resumed).

    .venv/bin/python benchmarks/bench_agent.py                 # SmolLM2, 6 steps per K
    .venv/bin/python benchmarks/bench_agent.py --quick         # tiny model
    .venv/bin/python benchmarks/bench_agent.py --bounds 2 4    # K = 0, 2 and 4
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

from bench_rollout import ENV, pinned, stop, swiftlike_cli
from common import add_run_options, fill_defaults, run_logged, wait_until_ready

HERE = Path(__file__).resolve().parent
PLUGIN = HERE / "agent_rounds_plugin.py"
DEFAULTS = {"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "steps": 6, "rounds": 2}
QUICK = {"model": "tiny-random/qwen2_5", "steps": 5, "rounds": 2}
BATCH = 8


def start_server(args, log_path: Path) -> tuple[subprocess.Popen, int]:
    from swiftlike.utils.net import free_port
    port = free_port()
    cmd = [*pinned(0), swiftlike_cli(), "rollout", "--model", args.model, "--port", str(port), "--torch_dtype",
           "float32", "--vllm_max_model_len", "2048", "--multi_turn_scheduler", "uneven_tool_rounds",
           "--external_plugins", str(PLUGIN)]
    proc = subprocess.Popen(cmd, stdout=open(log_path, "w"), stderr=subprocess.STDOUT, env={**os.environ, **ENV})
    wait_until_ready(proc, f"http://127.0.0.1:{port}/health", log_path, 600)
    return proc, port


def grpo_command(args, port: int, output_dir: Path, k: int) -> list[str]:
    return [*pinned(1), swiftlike_cli(), "rlhf", "--rlhf_type", "grpo", "--model", args.model, "--dataset",
            "swiftlike/arithmetic", "--reward_funcs", "accuracy", "format_hash", "--num_generations", "4",
            "--per_device_train_batch_size", str(BATCH), "--gradient_accumulation_steps", "1",
            "--max_completion_length", str(args.max_completion_length), "--temperature", "1.0", "--beta", "0",
            "--learning_rate", "1e-4", "--lora_dropout", "0", "--torch_dtype", "float32",
            "--gradient_checkpointing", "false", "--logging_steps", "1", "--save_steps", "1000", "--report_to",
            "none", "--max_steps", str(args.steps), "--use_vllm", "true", "--vllm_mode", "server",
            "--vllm_server_port", str(port), "--async_generate", "true", "--max_staleness", str(k), "--log_completions", "true",
            "--rollout_importance_sampling_mode", "token_truncate", "--output_dir", str(output_dir)]


def run_once(args, port: int, workdir: Path, k: int, tag: str) -> dict:
    from swiftlike.train.outputs import read_log
    cut_before = httpx.get(f"http://127.0.0.1:{port}/info").json()["partial_rollouts"]
    out = workdir / tag
    run_logged(grpo_command(args, port, out, k), workdir / f"{tag}.log", args.timeout, ENV)
    run_dir = next(out.glob("v0-*"))
    steps = [e for e in read_log(run_dir) if "loss" in e]
    lines = [json.loads(line) for line in (run_dir / "completions.jsonl").read_text().splitlines()]
    timed = len(steps) - 1
    wall = steps[-1]["elapsed_s"] - steps[0]["elapsed_s"]
    sampled_per_trajectory = statistics.fmean(line["sampled_tokens"] for line in lines)
    return {"s_per_step": wall / timed, "tokens_per_s": sampled_per_trajectory * BATCH * timed / wall,
            "trajectories": len(lines), "expected": len(steps) * BATCH,
            "turns_mean": statistics.fmean(line["turns"] for line in lines),
            "dropped": sum(e.get("staleness/dropped", 0) for e in steps),
            "env_errors": sum(e.get("multi_turn/env_errors", 0) for e in steps),
            "staleness_max": max(e.get("staleness/max", 0) for e in steps),
            "partial_rollouts": httpx.get(f"http://127.0.0.1:{port}/info").json()["partial_rollouts"] - cut_before}


def measure(args, workdir: Path) -> dict:
    """Each round runs every K, in alternating order (this machine is shared, so its load drifts); the step time
    and tokens/s of a K are its medians over the rounds, the counts are summed."""
    proc, port = start_server(args, workdir / "server.log")
    bounds = args.bounds
    runs: dict[int, list[dict]] = {k: [] for k in bounds}
    try:
        for round_index in range(args.rounds):
            for k in (bounds if round_index % 2 == 0 else bounds[::-1]):
                runs[k].append(run_once(args, port, workdir, k, f"grpo-k{k}-r{round_index}"))
    finally:
        stop(proc)
    results = {}
    for k, done in runs.items():
        results[k] = {key: statistics.median(r[key] for r in done) for key in ("s_per_step", "tokens_per_s")}
        results[k].update({key: sum(r[key] for r in done) for key in ("trajectories", "expected", "dropped",
                                                                       "env_errors", "partial_rollouts")})
        results[k]["staleness_max"] = max(r["staleness_max"] for r in done)
        results[k]["turns_mean"] = statistics.fmean(r["turns_mean"] for r in done)
        results[k]["per_round_s_per_step"] = [round(r["s_per_step"], 2) for r in done]
    for k in bounds:
        results[k]["step_rate_vs_k0"] = results[0]["s_per_step"] / results[k]["s_per_step"]
        results[k]["tokens_per_s_vs_k0"] = results[k]["tokens_per_s"] / results[0]["tokens_per_s"]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--steps", type=int, default=None, help="GRPO steps per run (steps 2..N are timed)")
    parser.add_argument("--rounds", type=int, default=None, help="runs per K, in alternating order (medians)")
    parser.add_argument("--max_completion_length", type=int, default=32, help="tokens per turn (per_round)")
    parser.add_argument("--bounds", type=int, nargs="+", default=[0, 2],
                        help="the --max_staleness values to compare; 0 (synchronous) is the baseline and always runs")
    add_run_options(parser, QUICK, "steps", timeout=1800)
    args = parser.parse_args()
    fill_defaults(args, DEFAULTS, QUICK)
    args.bounds = [0, *sorted(set(args.bounds) - {0})]
    if args.steps < 2:
        parser.error("--steps must be >= 2: the first step is a warm-up and is not timed")
    if os.cpu_count() < 2:
        sys.exit("the server and the trainer are pinned to two different cores; this machine has 1")
    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_agent_"))
    workdir.mkdir(parents=True, exist_ok=True)
    results = measure(args, workdir)
    print(f"\nmulti-turn GRPO, {args.rounds} round(s) x {args.steps} steps x {BATCH} trajectories (1-4 rounds of <= "
          f"{args.max_completion_length} tokens) of {args.model}; server on core 0, trainer on core 1")
    for k, r in results.items():
        print(f"  K={k}: {r['s_per_step']:6.2f} s/step ({r['step_rate_vs_k0']:.2f}x the step rate of K=0)  "
              f"{r['tokens_per_s']:6.1f} trained tokens/s ({r['tokens_per_s_vs_k0']:.2f}x)  turns {r['turns_mean']:.2f}"
              f"  trained {r['trajectories']}/{r['expected']} trajectories  dropped stale {r['dropped']:.0f}  env "
              f"errors {r['env_errors']:.0f}  max staleness {r['staleness_max']:.0f}  partial rollouts "
              f"{r['partial_rollouts']}  s/step per round {r['per_round_s_per_step']}")
    if args.json:
        Path(args.json).write_text(json.dumps({str(k): r for k, r in results.items()}, indent=2))
    print(f"logs in {workdir}")


if __name__ == "__main__":
    main()
