"""The 2026 algorithm set end to end on the tiny model (pt rollout, in one process): each advantage estimator,
loss type and token selection trains two steps with finite losses and logs what it did."""
from __future__ import annotations

import math

import pytest

from cli import run_cli
from model_ids import TINY

from swiftlike.rl.rewards.functions import register_reward
from swiftlike.train.outputs import read_log
from swiftlike.utils.registry import restore_registries, snapshot_registries



def text_length(completions, **kwargs):
    """A reward with spread on a random model (format and accuracy are 0 for every completion there), so the
    advantages, and the loss, are not all zero."""
    return [len(c) / 100 for c in completions]


@pytest.fixture(autouse=True)
def text_length_reward():
    """Registered for each test only: a name left in the registry shows up in other tests' lists of reward
    functions."""
    snapshot = snapshot_registries()
    register_reward("algorithms_text_length")(text_length)
    yield
    restore_registries(snapshot)


def run_grpo(tmp_path, *extra, check: bool = True):
    return run_cli("rlhf", "--rlhf_type", "grpo", "--model", TINY, "--dataset", "swiftlike/arithmetic#8",
                   "--reward_funcs", "algorithms_text_length", "format", "--num_generations", "4",
                   "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2",
                   "--max_completion_length", "12", "--max_steps", "2", "--logging_steps", "1",
                   "--learning_rate", "5e-3", "--gradient_checkpointing", "false", "--torch_dtype", "float32",
                   "--report_to", "none", "--save_steps", "100", "--output_dir", tmp_path, *extra, check=check)


def grpo(tmp_path, *extra):
    run_grpo(tmp_path, *extra)
    log = [e for e in read_log(next(tmp_path.glob("v0-*"))) if "loss" in e]
    assert len(log) == 2 and all(math.isfinite(e["loss"]) for e in log), log
    assert any(e["grad_norm"] > 0 for e in log), log  # a real signal, not all-zero advantages
    return log


# Options that combine share a run (each run is ~15 s): the estimators with the loss types and selections.
@pytest.mark.parametrize("extra, logged", [
    (("--advantage_estimator", "rloo", "--loss_type", "cispo", "--epsilon_high", "5.0",
      "--top_entropy_quantile", "0.2"), ("kl_in_reward/kl", "cispo_clip_ratio", "token_selection/gradient_frac")),
    (("--advantage_estimator", "reinforce_plus_plus", "--beta", "0.1", "--loss_type", "sapo", "--tau_neg", "1.2"),
     ("kl_in_reward/kl",)),
    (("--scale_rewards", "gdpo", "--reward_weights", "1.0", "0.5", "--loss_type", "clip_cov", "--clip_cov_ratio",
      "0.2", "--clip_cov_lb", "-5", "--clip_cov_ub", "5"), ("clip_cov/stopped_frac", "kl")),
    (("--loss_type", "kl_cov", "--kl_cov_ratio", "0.1"), ("kl_cov/selected_frac", "kl")),
], ids=["rloo-cispo-top_entropy", "reinforce_pp-sapo", "gdpo-clip_cov", "kl_cov"])
def test_each_option_trains_and_logs_what_it_did(tmp_path, extra, logged):
    log = grpo(tmp_path, *extra)
    for key in logged:
        assert all(key in e for e in log), (key, sorted(log[0]))
    if "kl_in_reward/kl" in logged:
        assert all("kl" not in e for e in log)  # the KL moved into the reward: no loss term
    if "token_selection/gradient_frac" in logged:
        assert all(0.1 <= e["token_selection/gradient_frac"] <= 0.3 for e in log)
    if "clip_cov/stopped_frac" in logged:
        assert all(0.0 < e["clip_cov/stopped_frac"] <= 0.25 for e in log)
    if "kl_cov/selected_frac" in logged:
        assert all(0.0 < e["kl_cov/selected_frac"] <= 0.15 for e in log)


@pytest.mark.parametrize("extra, message", [
    (("--scale_rewards", "gdpo", "--advantage_estimator", "rloo", "--kl_in_reward", "false"),
     "--scale_rewards gdpo with --advantage_estimator rloo"),
    (("--scale_rewards", "gdpo", "--kl_in_reward", "true"), "--scale_rewards gdpo with --kl_in_reward true"),
    (("--loss_type", "kl_cov", "--importance_sampling_level", "sequence"),
     "--loss_type kl_cov with --importance_sampling_level sequence"),
    (("--top_entropy_quantile", "0",), "--top_entropy_quantile must be in"),
    (("--rollout_rs", "token_k1", "--rollout_rs_threshold", "0.5_2"), "add --use_vllm true"),
    (("--rollout_bypass_mode", "true", "--use_vllm", "true", "--rollout_importance_sampling_mode", "token_truncate"),
     "--rollout_bypass_mode true with --rollout_importance_sampling_mode token_truncate"),
    (("--rollout_rs", "seq_k1", "--rollout_rs_threshold", "2", "--use_vllm", "true"), "--rollout_rs seq_k1: not an option"),
])
def test_combinations_that_cannot_work_are_refused_before_any_model_loads(tmp_path, extra, message):
    result = run_grpo(tmp_path / "refused", *extra, check=False)
    assert result.returncode == 2 and message in result.stderr, result.stderr[-3000:]
    assert not (tmp_path / "refused").exists()
