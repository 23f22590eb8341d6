"""Bounded staleness: GRPO in server mode at --max_staleness K = 0, 1, 2, 4, measured in one run.

The rollout server is pinned to core 0 and the trainer to core 1 (`taskset`), one thread each; the same
GRPO run (SmolLM2, merged-LoRA full sync over http) with `--async_generate true --max_staleness K`, K = 0
being synchronous training. Every run trains on the same number of samples (steps x batch). Reported per
K: trained completion tokens per second and the step time over steps 2..N (the first step has nothing to
overlap yet), the number of samples dropped as too stale, the largest staleness trained on, and the mean
reward over the last half of the steps (the reward reached after the same number of samples; with so few
steps it is noisy). Each run writes timeline.jsonl; the benchmark draws them one above the other
(generation on the server in the background or the foreground, waits and training on the trainer).

    .venv/bin/python benchmarks/bench_async.py                 # SmolLM2, 6 steps per K
    .venv/bin/python benchmarks/bench_async.py --quick         # smoke test on a tiny model
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from bench_rollout import ENV, pinned, start_server, stop, swiftlike_cli
from common import add_run_options, fill_defaults, run_logged

DEFAULTS = {"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "steps": 6, "rounds": 1}
QUICK = {"model": "tiny-random/qwen2_5", "steps": 4, "rounds": 1}
BOUNDS = (0, 1, 2, 4)


def grpo_command(args, port: int, output_dir: Path, k: int) -> list[str]:
    return [*pinned(1), swiftlike_cli(), "rlhf", "--rlhf_type", "grpo", "--model", args.model, "--dataset",
            "swiftlike/arithmetic", "--reward_funcs", "accuracy", "format_hash", "repetition", "--num_generations", "4",
            "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "1",
            "--max_completion_length", str(args.max_completion_length), "--temperature", "1.0", "--beta", "0",
            "--learning_rate", "1e-4", "--lora_dropout", "0", "--torch_dtype", "float32",
            "--gradient_checkpointing", "false", "--logging_steps", "1", "--save_steps", "1000", "--report_to",
            "none", "--max_steps", str(args.steps), "--use_vllm", "true", "--vllm_mode", "server",
            "--vllm_server_port", str(port), "--async_generate", "true", "--max_staleness", str(k),
            "--rollout_importance_sampling_mode", "token_truncate", "--output_dir", str(output_dir)]


def measure(args, workdir: Path) -> dict:
    from swiftlike.train.outputs import read_log
    proc, port = start_server(args.model, workdir / "server.log", core=0)
    results: dict[int, dict] = {}
    try:
        for k in BOUNDS:
            out = workdir / f"grpo-k{k}"
            run_logged(grpo_command(args, port, out, k), workdir / f"grpo-k{k}.log", args.timeout, ENV)
            run_dir = next(out.glob("v0-*"))
            steps = [e for e in read_log(run_dir) if "loss" in e]
            timed = steps[1:]
            wall = steps[-1]["elapsed_s"] - steps[0]["elapsed_s"]
            tokens = sum(e["completions/mean_length"] * 8 for e in timed)
            half = steps[len(steps) // 2:]
            results[k] = {"s_per_step": wall / len(timed), "tokens_per_s": tokens / wall,
                          "dropped": sum(e.get("staleness/dropped", 0) for e in steps),
                          "staleness_max": max(e.get("staleness/max", 0) for e in steps),
                          "reward_last_half": statistics.mean(e["reward"] for e in half),
                          "reward": [e["reward"] for e in steps],
                          "timeline": [json.loads(line) for line in (run_dir / "timeline.jsonl").read_text().splitlines()]}
    finally:
        stop(proc)
    for k in BOUNDS:
        results[k]["throughput_vs_k0"] = results[k]["tokens_per_s"] / results[0]["tokens_per_s"]
    return results


def draw(results: dict, path: Path) -> None:
    """Rows per K: server generation (background prefetch / foreground), trainer waits and training steps."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    lanes = [("generate", True, "prefetch (server, background)", "tab:green"),
             ("generate", False, "generate (server, trainer waits)", "tab:red"),
             ("sync", None, "sync (push weights)", "tab:purple"),
             ("generate_wait", None, "wait for prefetched batch", "tab:orange"),
             ("learn", None, "learn (forward+backward)", "tab:blue")]
    fig, axes = plt.subplots(len(results), 1, figsize=(11, 1.6 * len(results) + 0.6), sharex=True)
    for ax, (k, r) in zip(axes, results.items()):
        spans = r["timeline"]
        t0 = min(s["start"] for s in spans)
        for row, (event, background, label, color) in enumerate(lanes):
            chosen = [s for s in spans if s["event"] == event and (background is None or s["background"] == background)]
            ax.broken_barh([(s["start"] - t0, s["end"] - s["start"]) for s in chosen], (row - 0.4, 0.8),
                           color=color, label=label)
        ax.set_yticks(range(len(lanes)), [lane[2].split(" (")[0] for lane in lanes], fontsize=7)
        ax.set_title(f"--max_staleness {k}: {r['s_per_step']:.1f} s/step, {r['tokens_per_s']:.1f} tokens/s"
                     f" ({r['throughput_vs_k0']:.2f}x of K=0)", fontsize=9)
        ax.invert_yaxis()
    axes[-1].set_xlabel("seconds since the first span")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=5, fontsize=8)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--steps", type=int, default=None, help="GRPO steps per run (steps 2..N are timed)")
    parser.add_argument("--rounds", type=int, default=None, help="kept for the common options; one run per K")
    parser.add_argument("--max_completion_length", type=int, default=64)
    parser.add_argument("--png", default="docs/images/async_timeline.png", help="where the timeline picture goes")
    add_run_options(parser, QUICK, "steps", timeout=1800)
    args = parser.parse_args()
    fill_defaults(args, DEFAULTS, QUICK)
    if os.cpu_count() < 2:
        sys.exit("the server and the trainer are pinned to two different cores; this machine has 1")
    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_async_"))
    workdir.mkdir(parents=True, exist_ok=True)
    results = measure(args, workdir)
    print(f"\nGRPO {args.steps} steps x 8 completions of {args.model}, server on core 0, trainer on core 1")
    for k, r in results.items():
        print(f"  K={k}: {r['tokens_per_s']:6.1f} tokens/s ({r['throughput_vs_k0']:.2f}x)  {r['s_per_step']:6.2f} "
              f"s/step  dropped {r['dropped']:.0f}  max staleness {r['staleness_max']:.0f}  reward (last half) "
              f"{r['reward_last_half']:.3f}  per step {[round(x, 3) for x in r['reward']]}")
    draw(results, Path(args.png))
    print(f"timeline picture: {args.png}")
    if args.json:
        Path(args.json).write_text(json.dumps({str(k): {x: v for x, v in r.items() if x != "timeline"}
                                               for k, r in results.items()}, indent=2))
    print(f"logs in {workdir}")


if __name__ == "__main__":
    main()
