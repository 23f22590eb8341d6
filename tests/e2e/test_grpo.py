"""`swiftlike rlhf --rlhf_type grpo` end to end on the tiny model: pt rollout, and colocated vLLM with LoRA-only sync."""
import json

import pytest

from cli import CliResult, run_cli
from model_ids import TINY

from swiftlike.arguments import RlhfArguments
from swiftlike.train.outputs import read_log

# A reward with spread on a random model (format_hash is always 0 there), so the policy really moves.
PLUGIN = '''
from swiftlike.rl.rewards.functions import register_reward

@register_reward("text_length")
def text_length(completions, **kwargs):
    return [len(c) / 100 for c in completions]
'''
# --lora_dropout is left at its default (0.05): the default --disable_dropout true must make it harmless.
COMMON = ["--model", TINY, "--dataset", "swiftlike/arithmetic#16", "--reward_funcs", "format_hash", "text_length",
          "--num_generations", "4", "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2",
          "--max_completion_length", "16", "--logging_steps", "1", "--report_to", "none",
          "--gradient_checkpointing", "false", "--learning_rate", "5e-2", "--save_steps", "100",
          "--torch_dtype", "float32", "--log_rollout_offpolicy_metrics", "true"]


FILTERED = ["--temperature", "0.7", "--top_p", "0.9", "--top_k", "20"]


def run_rlhf(tmp_path, *extra, steps: int = 2, check: bool = True) -> CliResult:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(PLUGIN)
    return run_cli("rlhf", "--rlhf_type", "grpo", *COMMON, "--external_plugins", plugin, "--output_dir",
                   tmp_path / "out", "--max_steps", steps, *extra, check=check)


def rlhf(tmp_path, *extra, steps: int = 2):
    run_rlhf(tmp_path, *extra, steps=steps)
    run_dir = next((tmp_path / "out").glob("v0-*"))
    return [e for e in read_log(run_dir) if "loss" in e], run_dir


def test_args_check_group_divisibility():
    with pytest.raises(ValueError, match="divisible by --num_generations"):
        RlhfArguments(rlhf_type="grpo", model=TINY, dataset=["d"], reward_funcs=["format"], num_generations=3,
                      per_device_train_batch_size=4, gradient_accumulation_steps=1)
    with pytest.raises(ValueError, match="--reward_funcs is required"):
        RlhfArguments(rlhf_type="grpo", model=TINY, dataset=["d"], num_generations=4, per_device_train_batch_size=4)
    args = RlhfArguments(rlhf_type="grpo", model=TINY, dataset=["d"], reward_funcs=["format"], num_generations=4,
                         per_device_train_batch_size=4, gradient_accumulation_steps=2)
    assert args.steps_per_generation == 2 and args.beta == 0.04 and args.epsilon == 0.2


@pytest.fixture(scope="module")
def pt_run(tmp_path_factory):
    """beta > 0, the mismatch metrics on and LoRA dropout left on (--disable_dropout false), so a train-mode pass
    is not the sampling-time policy: the old-policy and the reference forwards both run."""
    return rlhf(tmp_path_factory.mktemp("pt"), "--use_vllm", "false", "--log_completions", "true",
                "--profile_step", "2", "--disable_dropout", "false")


def test_grpo_pt_rollout_logs_rewards_and_metrics(pt_run):
    steps, run_dir = pt_run
    assert [e["step"] for e in steps] == [1, 2]
    for key in ("reward", "reward_std", "rewards/format_hash/mean", "rewards/text_length/mean",
                "completions/mean_length", "completions/min_length", "completions/max_length",
                "completions/clipped_ratio", "kl", "entropy", "clip_ratio/region_mean", "rollout_correction/k3_kl",
                "timing/generate", "timing/reward_wait", "timing/logps", "timing/old_logps", "timing/ref_logps",
                "timing/train"):
        assert key in steps[-1], key
    assert steps[0]["reward_std"] > 0 and steps[0]["grad_norm"] > 0
    # pt generates with the training model itself: the mismatch is rounding only
    assert all(e["rollout_correction/k3_kl"] < 1e-4 for e in steps)
    lines = (run_dir / "completions.jsonl").read_text().splitlines()
    assert len(lines) == 2 * 8 and "completion" in json.loads(lines[0])


def test_no_old_policy_forward_with_one_iteration_and_no_reference_forward_with_beta_0(tmp_path, pt_run):
    """With --num_iterations 1 and no dropout the loss's old log-probs, and the mismatch metrics' training side,
    are the training pass's own, detached; with --beta 0 nothing reads the reference: neither forward may run.
    Each pass that runs is logged with its seconds (pt_run has both); here neither is, and the metrics still
    show the engine matching the trainer."""
    steps, _ = rlhf(tmp_path, "--use_vllm", "false", "--beta", "0", "--rollout_importance_sampling_mode",
                    "token_truncate", steps=1)
    assert "timing/old_logps" not in steps[-1] and "timing/ref_logps" not in steps[-1], steps[-1]
    assert steps[-1]["rollout_correction/k3_kl"] < 1e-4, steps[-1]
    assert all(e["timing/old_logps"] > 0 and e["timing/ref_logps"] > 0 for e in pt_run[0])


def test_profile_step_covers_generation_and_training(pt_run):
    """--profile_step's window opens at the end of the step before: an online trainer generates and runs its
    extra forwards while the Trainer fetches the batch, before the step's own callbacks."""
    steps, run_dir = pt_run
    profile = json.loads((run_dir / "profile-step2.json").read_text())
    step2 = next(e for e in steps if e["step"] == 2)
    assert profile["wall_seconds"] >= step2["timing/generate"] + step2["timing/logps"] + step2["timing/train"]
    assert {"aten::mm", "Optimizer.step#AdamW.step"} <= {row["operator"] for row in profile["operators"]}


@pytest.fixture(scope="module")
def lora_sync_run(tmp_path_factory):
    return rlhf(tmp_path_factory.mktemp("lora"), "--use_vllm", "true", "--vllm_enable_lora", "true", steps=3)


@pytest.fixture(scope="module")
def full_sync_run(tmp_path_factory):
    # full fine-tuning, so every weight is pushed to vLLM; beta > 0 keeps a frozen reference copy
    return rlhf(tmp_path_factory.mktemp("full"), "--use_vllm", "true", "--tuner_type", "full",
                "--learning_rate", "1e-3", *FILTERED, steps=3)


def assert_engine_follows_trainer(steps):
    """Each step samples right after syncing the previous step's weights: the policy has moved away from
    the reference (kl > 0), yet vLLM's log-probs of its samples equal the trainer's (fp32)."""
    assert [e["step"] for e in steps] == [1, 2, 3]
    assert steps[0]["grad_norm"] > 0
    for e in steps[1:]:
        assert e["sync/bytes"] > 0 and e["sync/seconds"] > 0
        assert e["kl"] > 1e-4, e
        assert e["rollout_correction/k3_kl"] < 1e-4, e
        assert abs(e["rollout_correction/is_weight_mean"] - 1) < 1e-2, e


def test_grpo_colocate_vllm_lora_sync_matches_trainer(lora_sync_run):
    assert_engine_follows_trainer(lora_sync_run[0])


def test_grpo_colocate_vllm_lora_sync_with_top_p_top_k(tmp_path):
    """Truncated sampling: the trainer renormalises over the same kept set, so the gap stays at rounding."""
    steps, _ = rlhf(tmp_path, "--use_vllm", "true", "--vllm_enable_lora", "true", *FILTERED, steps=3)
    assert_engine_follows_trainer(steps)


def test_grpo_colocate_vllm_full_sync_with_top_p_top_k(full_sync_run):
    assert_engine_follows_trainer(full_sync_run[0])


def test_lora_only_sync_moves_under_5_percent_of_full_sync(lora_sync_run, full_sync_run):
    lora = lora_sync_run[0][-1]["sync/bytes"]
    full = full_sync_run[0][-1]["sync/bytes"]
    assert lora < 0.05 * full, (lora, full)


def test_grpo_pt_gspo_dapo_reused_batches_with_is_correction(tmp_path):
    """Each generation batch serves two optimizer steps (--num_iterations 2), so the ratio's denominator is the
    sampling-time log-probs and the second step can clip; GSPO's sequence ratio, DAPO's normaliser and
    token-truncated rollout IS weights all run in the same loop."""
    steps, _ = rlhf(tmp_path, "--use_vllm", "false", "--num_iterations", "2", "--loss_type", "dapo",
                    "--importance_sampling_level", "sequence", "--epsilon", "3e-4", "--epsilon_high", "4e-4",
                    "--rollout_importance_sampling_mode", "token_truncate", steps=4)
    assert [e["step"] for e in steps] == [1, 2, 3, 4]
    for e in steps:
        assert e["loss"] == e["loss"] and e["grad_norm"] > 0, e
        # the IS weights compare the sampling-time trainer log-probs with the engine's: equal for pt
        assert abs(e["rollout_correction/is_weight_mean"] - 1) < 1e-3 and e["rollout_correction/clipped_frac"] == 0
    # the second use of a batch sees a moved policy against GSPO's tight clip range
    assert max(steps[1]["clip_ratio/region_mean"], steps[3]["clip_ratio/region_mean"]) > 0
