"""On-policy distillation inside GRPO (OPD-RL, `--rlhf_type grpo --teacher_model`): with no task reward the
teacher's per-token log-ratio is the whole signal (the per-token advantage itself is checked by hand in
tests/unit/rl/test_advantage_estimators.py)."""
from __future__ import annotations

import math

import pytest

from swiftlike.commands.rlhf import rlhf_main
from swiftlike.train.outputs import read_log

TINY = "tiny-random/qwen2_5"


def opd(tmp_path, *extra, steps=3):
    result = rlhf_main(["--rlhf_type", "grpo", "--model", TINY, "--dataset", "swiftlike/arithmetic#16",
                        "--num_generations", "1", "--per_device_train_batch_size", "4",
                        "--gradient_accumulation_steps", "1", "--max_completion_length", "16", "--max_steps",
                        str(steps), "--logging_steps", "1", "--learning_rate", "5e-2", "--lr_scheduler_type",
                        "constant", "--tuner_type", "full", "--beta", "0", "--gradient_checkpointing", "false",
                        "--torch_dtype", "float32", "--report_to", "none", "--save_steps", "100",
                        "--output_dir", str(tmp_path), *extra])
    return [e for e in read_log(result.run_dir) if "loss" in e]


def test_pure_distillation_trains_on_the_teacher_signal_alone(tmp_path, tiny_adapter):
    """No --reward_funcs, one completion per prompt: every advantage is the teacher's log-ratio, so the loss and
    gradient are non-zero with --teacher_kl_coef 1 and exactly zero with 0 (nothing else gives a signal)."""
    teacher = ("--teacher_model", TINY, "--teacher_adapters", str(tiny_adapter))
    log = opd(tmp_path / "on", *teacher, steps=3)
    assert all(math.isfinite(e["loss"]) and e["reward"] == 0 and e["teacher_kl"] > 0.1 for e in log), log
    assert all(e["grad_norm"] > 0 for e in log)
    off = opd(tmp_path / "off", *teacher, "--teacher_kl_coef", "0", steps=2)
    assert all(e["loss"] == 0 and e["grad_norm"] == 0 for e in off), off


@pytest.mark.parametrize("extra, message", [
    (("--off_policy_sequence_mask_delta", "0.5"), "--teacher_model with --off_policy_sequence_mask_delta"),
    (("--dynamic_sample", "true", "--num_generations", "2"), "--dynamic_sample true with --teacher_model and no"),
])
def test_what_needs_a_per_sequence_advantage_or_rewards_is_refused(tmp_path, capsys, extra, message):
    with pytest.raises(SystemExit):
        opd(tmp_path / "refused", "--teacher_model", TINY, *extra)
    assert message in capsys.readouterr().err and not (tmp_path / "refused").exists()
