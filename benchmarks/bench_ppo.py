"""PPO step time, side by side in one run: `swiftlike rlhf --rlhf_type ppo` (samples on colocated vLLM) against
TRL's `PPOTrainer` (samples with `model.generate`; trl 1.12.0, its last release, installed into a scratch
directory and put first on that side's path).

Same model, reward model, prompts and settings on both sides: SmolLM2-135M-Instruct trained in full, a reward model
made from it here (its body and a seeded one-label score head, saved once), which is also each side's critic start
(ms-swift's choice); 8 prompts a rollout batch, one PPO epoch and one mini-batch (one optimizer step per batch),
64 response tokens ending at the end-of-turn token, temperature 0.7, --kl_coef 0.05, fp32. Each training is a fresh
process and the sides alternate over the rounds; the figure is the ratio of seconds per optimizer step
(`train_runtime / global_step`, model loading outside it; goal <= 0.5x).

Beside the ratio, each side's bound (`bound.py`): the model FLOPs of sampling (each prompt prefilled, its
completion decoded), full training of the policy and of the critic (a one-label head on the same body), the
reward model's and the critic's no-grad forwards, and the reference's forward, over every prompt + completion,
per second of `train_runtime`, as a share of the fp32 peak. swiftlike also runs the old policy's forward for its
log-probs, which TRL takes from the sampling's logits. Completion lengths are each side's mean over the run
(swiftlike's logged `completions/mean_length`, TRL's counted up to the first end-of-turn token around its
`batch_generation`); the prompts' length, which neither side records, is the dataset's mean ("~").

    .venv/bin/python benchmarks/bench_ppo.py
    .venv/bin/python benchmarks/bench_ppo.py --quick   # smoke test on a tiny model
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

from bound import Work, mean_prompt_length, model_shape, report, rollout_work
from common import (add_run_options, alternating_rounds, fill_defaults, final_record, mean_over_steps, run_logged,
                    run_trl_baseline, swiftlike_cli)

HERE = Path(__file__).resolve().parent
BASELINE = HERE / "trl_ppo_baseline.py"
TRL_WITH_PPO = "1.12.0"
RUN_DIR = re.compile(r"^\s*run directory\s+(\S.*?)\s*$", re.MULTILINE)
DEFAULTS = {"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "dataset": "swiftlike/arithmetic", "batch_size": 8,
            "max_steps": 6, "response_length": 64, "rounds": 1}
QUICK = {"model": "tiny-random/qwen2_5", "max_steps": 2, "response_length": 16, "rounds": 1}


def trl_with_ppo_path() -> str:
    """A scratch directory holding trl 1.12.0 (which cannot be installed beside the trl swiftlike runs on)."""
    scratch = Path(tempfile.gettempdir()) / f"swiftlike-trl-{TRL_WITH_PPO}"
    if not (scratch / "trl").is_dir():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(scratch),
                        f"trl=={TRL_WITH_PPO}"], check=True)
    return str(scratch)


def make_reward_model(model: str, out: Path) -> Path:
    """The model's body with a seeded one-label score head: both sides' reward model and critic start."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from swiftlike.model import resolve_model
    model_dir = resolve_model(model).model_dir
    torch.manual_seed(0)
    rm = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=1, dtype=torch.float32)
    rm.config.pad_token_id = rm.config.pad_token_id or rm.config.eos_token_id
    rm.save_pretrained(out)
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(out)
    return out


def swiftlike_command(args, reward_model: Path, output_dir: str) -> list[str]:
    return [swiftlike_cli(), "rlhf", "--rlhf_type", "ppo", "--model", args.model, "--dataset", args.dataset,
            "--reward_model", str(reward_model), "--tuner_type", "full", "--use_vllm", "true", "--vllm_mode",
            "colocate", "--vllm_max_model_len", "1024", "--per_device_train_batch_size", str(args.batch_size),
            "--gradient_accumulation_steps", "1", "--num_mini_batches", "1", "--num_ppo_epochs", "1",
            "--max_completion_length", str(args.response_length), "--temperature", "0.7", "--kl_coef", "0.05",
            "--learning_rate", "1e-5", "--max_steps", str(args.max_steps), "--torch_dtype", "float32",
            "--gradient_checkpointing", "false", "--report_to", "none", "--save_steps", "100000",
            "--logging_steps", "1", "--split_dataset_ratio", "0", "--output_dir", output_dir]


def trl_command(args, reward_model: Path) -> list[str]:
    return [sys.executable, str(BASELINE), "--model", args.model, "--reward_model", str(reward_model),
            "--dataset", args.dataset, "--batch_size", str(args.batch_size), "--max_steps", str(args.max_steps),
            "--response_length", str(args.response_length)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for key in DEFAULTS:
        parser.add_argument(f"--{key}", type=type(DEFAULTS[key]), default=None)
    add_run_options(parser, QUICK, "max_steps", timeout=1800)
    args = parser.parse_args()
    fill_defaults(args, DEFAULTS, QUICK)
    workdir = Path(args.keep or tempfile.mkdtemp(prefix="bench_ppo_"))
    workdir.mkdir(parents=True, exist_ok=True)
    reward_model = make_reward_model(args.model, workdir / "reward_model")
    repo = str(HERE.parent)

    def swiftlike_side(tag: str) -> dict:
        out = run_logged(swiftlike_command(args, reward_model, str(workdir / f"swiftlike-{tag}")),
                         workdir / f"swiftlike-{tag}.log", args.timeout, {"SWIFTLIKE_OFFLINE": "1"})
        run_dir = Path(RUN_DIR.findall(out)[-1])
        record = final_record(run_dir)
        return {"step_s": record["train_runtime"] / record["step"], "train_runtime": record["train_runtime"],
                "global_step": record["step"],
                "completion_mean_length": mean_over_steps(run_dir, "completions/mean_length")}

    def trl_side(tag: str) -> dict:
        path = os.pathsep.join([trl_with_ppo_path(), repo])  # trl 1.12 first, this checkout's swiftlike next
        return run_trl_baseline(trl_command(args, reward_model), workdir / f"trl-{tag}.log", args.timeout,
                                {"SWIFTLIKE_OFFLINE": "1", "PYTHONPATH": path})

    results = alternating_rounds(args.rounds, [("swiftlike", swiftlike_side), ("trl", trl_side)],
                                 lambda r: f"{r['step_s']:.2f} s/step")
    ours = statistics.median(r["step_s"] for r in results["swiftlike"])
    theirs = statistics.median(r["step_s"] for r in results["trl"])
    print(f"\nPPO {args.max_steps} steps x {args.batch_size} prompts of {args.model}, {args.response_length} "
          f"response tokens, full fine-tuning, fp32")
    print(f"  swiftlike (colocated vLLM): {ours:6.2f} s/step")
    print(f"  TRL {TRL_WITH_PPO} PPOTrainer (generate): {theirs:6.2f} s/step")
    print(f"  ratio swiftlike / TRL: {ours / theirs:.2f}x  (goal <= 0.5x)")

    shape, prompt_length = model_shape(args.model), mean_prompt_length(args.model, args.dataset)
    print(f"\nthe machine's bound: model FLOPs over train_runtime, all rounds; prompts ~{prompt_length} tokens "
          "(the dataset's mean)")
    bounds = {}
    for name, runs in results.items():
        # forwards: the reference, and swiftlike's old policy; value forwards: the critic's values, the reward model
        work = sum((rollout_work(prompt_length, [x["completion_mean_length"]] * x["global_step"], args.batch_size,
                                 lora=False, forwards=2 if name == "swiftlike" else 1, value_forwards=2,
                                 value_train=True) for x in runs), Work())
        bounds[name] = report(name, shape, work, sum(x["train_runtime"] for x in runs),
                              sum(x["global_step"] for x in runs), approximate=True)
    print(f"logs in {workdir}")
    if args.json:
        Path(args.json).write_text(json.dumps({"swiftlike": results["swiftlike"], "trl": results["trl"],
                                               "ratio": ours / theirs, "bound": bounds}, indent=2))


if __name__ == "__main__":
    main()
