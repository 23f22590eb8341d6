"""GRPO runs moved from tests/unit/rl (issue 51: the unit tier trains nothing): a two-step GRPO run on the pt
rollout that reports processed log-probs, samples dynamically and draws its curves, in-process (tests/helpers/cli.py).
"""
from cli import run_cli
from model_ids import TINY

from swiftlike.train.outputs import read_log

PLUGIN = '''
from swiftlike.rl.rewards.functions import register_reward

@register_reward("odd_length")
def odd_length(completions, solution, **kwargs):
    """Signal only for prompts with an odd answer, so some groups have zero std and get resampled."""
    return [len(c) / 100 if int(s) % 2 else 0.0 for c, s in zip(completions, solution)]
'''


def test_grpo_pt_processed_logprobs_dynamic_sample_and_curves(tmp_path):
    plugin = tmp_path / "plugin.py"
    plugin.write_text(PLUGIN)
    result = run_cli("rlhf", "--rlhf_type", "grpo", "--model", TINY, "--dataset", "swiftlike/arithmetic#16",
                     "--reward_funcs", "odd_length", "--external_plugins", plugin, "--num_generations", "4",
                     "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2",
                     "--max_completion_length", "16", "--max_steps", "2", "--logging_steps", "1", "--report_to", "none",
                     "--gradient_checkpointing", "false", "--learning_rate", "5e-2", "--save_steps", "100",
                     "--torch_dtype", "float32", "--use_vllm", "false", "--temperature", "0.7", "--top_p", "0.9",
                     "--top_k", "20", "--log_rollout_offpolicy_metrics", "true", "--dynamic_sample", "true",
                     "--max_resample_times", "1", "--off_policy_sequence_mask_delta", "0.5", "--sleep_level", "1",
                     "--log_completions", "true", "--output_dir", tmp_path / "out")
    assert "--sleep_level 1: no-op in this run (no CUDA device)" in result.stderr
    run_dir = next((tmp_path / "out").glob("v0-*"))
    steps = [e for e in read_log(run_dir) if "loss" in e]
    assert [e["step"] for e in steps] == [1, 2]
    for e in steps:
        # the pt engine reports the processed (temperature / top-k / top-p) log-probs the trainer rebuilds
        assert e["rollout_correction/k3_kl"] < 1e-4
        assert 0 <= e["dynamic_sample/rounds"] <= 1 and "dynamic_sample/resampled_groups" in e
        assert e["off_policy_sequence_mask/masked_frac"] == 0.0  # nothing drifted in one update per generation
    # the batch keeps its size: 2 generation batches of 2 groups of 4
    assert len((run_dir / "completions.jsonl").read_text().splitlines()) == 2 * 8
    images = {p.name for p in (run_dir / "images").glob("*.png")}
    for name in ("train_loss.png", "train_reward.png", "train_rewards_odd_length_mean.png",
                 "train_completions_mean_length.png", "train_rollout_correction_k3_kl.png",
                 "train_timing_generate.png", "train_dynamic_sample_rounds.png"):
        assert name in images, (name, images)
