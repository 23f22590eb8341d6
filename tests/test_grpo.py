"""`swiftlike rlhf --rlhf_type grpo` end to end on the tiny model: pt rollout, and colocated vLLM with LoRA-only sync."""
import json
import os
import subprocess
import sys

import pytest

from swiftlike.arguments import RlhfArguments
from swiftlike.train.outputs import read_log

TINY = "tiny-random/qwen2_5"
# A reward with spread on a random model (format_hash is always 0 there), so the policy really moves.
PLUGIN = '''
from swiftlike.rl.rewards import register_reward

@register_reward("text_length")
def text_length(completions, **kwargs):
    return [len(c) / 100 for c in completions]
'''
COMMON = ["--model", TINY, "--dataset", "swiftlike/arithmetic#16", "--reward_funcs", "format_hash", "text_length",
          "--num_generations", "4", "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2",
          "--max_completion_length", "16", "--max_steps", "2", "--logging_steps", "1", "--report_to", "none",
          "--gradient_checkpointing", "false", "--learning_rate", "5e-2", "--save_steps", "100",
          "--torch_dtype", "float32", "--lora_dropout", "0", "--log_rollout_offpolicy_metrics", "true"]


def rlhf(tmp_path, *extra):
    plugin = tmp_path / "plugin.py"
    plugin.write_text(PLUGIN)
    env = {**os.environ, "SWIFTLIKE_OFFLINE": "1", "OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
           "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    argv = ["rlhf", "--rlhf_type", "grpo", *COMMON, "--external_plugins", str(plugin),
            "--output_dir", str(tmp_path / "out"), *extra]
    result = subprocess.run([sys.executable, "-m", "swiftlike.cli.main", *argv], env=env, capture_output=True,
                            text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    run_dir = next((tmp_path / "out").glob("v0-*"))
    return [e for e in read_log(run_dir) if "loss" in e], run_dir


def test_args_check_group_divisibility():
    with pytest.raises(ValueError, match="divisible by --num_generations"):
        RlhfArguments(model=TINY, dataset=["d"], reward_funcs=["format"], num_generations=3,
                      per_device_train_batch_size=4, gradient_accumulation_steps=1)
    with pytest.raises(ValueError, match="--reward_funcs is required"):
        RlhfArguments(model=TINY, dataset=["d"], num_generations=4, per_device_train_batch_size=4)
    args = RlhfArguments(model=TINY, dataset=["d"], reward_funcs=["format"], num_generations=4,
                         per_device_train_batch_size=4, gradient_accumulation_steps=2)
    assert args.steps_per_generation == 2 and args.beta == 0.04 and args.epsilon == 0.2


def test_grpo_pt_rollout_logs_rewards_and_metrics(tmp_path):
    steps, run_dir = rlhf(tmp_path, "--use_vllm", "false", "--log_completions", "true")
    assert [e["step"] for e in steps] == [1, 2]
    for key in ("reward", "reward_std", "rewards/format_hash/mean", "rewards/text_length/mean",
                "completions/mean_length", "completions/min_length", "completions/max_length",
                "completions/clipped_ratio", "kl", "clip_ratio/region_mean", "rollout_correction/k3_kl",
                "timing/generate", "timing/reward", "timing/logps", "timing/train"):
        assert key in steps[-1], key
    assert steps[0]["reward_std"] > 0 and steps[0]["grad_norm"] > 0
    # pt generates with the training model itself: the mismatch is rounding only
    assert all(e["rollout_correction/k3_kl"] < 1e-4 for e in steps)
    lines = (run_dir / "completions.jsonl").read_text().splitlines()
    assert len(lines) == 2 * 8 and "completion" in json.loads(lines[0])


def test_grpo_colocate_vllm_lora_sync_matches_trainer(tmp_path):
    steps, _ = rlhf(tmp_path, "--use_vllm", "true", "--vllm_enable_lora", "true")
    assert [e["step"] for e in steps] == [1, 2]
    first, second = steps
    assert first["grad_norm"] > 0
    assert second["sync/bytes"] > 0 and "sync/seconds" in second
    # step 2 sampled right after syncing the adapter trained at step 1: the policy moved away from the
    # reference (kl > 0), and vLLM's log-probs of its samples equal the trainer's (fp32)
    assert second["kl"] > 1e-3
    assert second["rollout_correction/k3_kl"] < 1e-4
