"""PPO's math (swiftlike/rl/core/ppo.py) against values worked out by hand, and against TRL's own PPOTrainer on
tensors recorded from a real run of it (tests/fixtures/trl_ppo_reference.pt, made by
scripts/record_trl_ppo_reference.py with trl 1.12.0, the last release that has PPO)."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from swiftlike.rl.core import ppo

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "trl_ppo_reference.pt"


def _close(actual, expected, tol=1e-6):
    torch.testing.assert_close(torch.as_tensor(actual, dtype=torch.float64),
                               torch.as_tensor(expected, dtype=torch.float64), rtol=0, atol=tol)


def test_gae_of_a_four_token_sequence_by_hand():
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.6, 0.7, 0.8]])
    advantages, returns = ppo.gae(rewards, values, torch.ones(1, 4, dtype=torch.bool), gamma=0.9, lam=0.8)
    # delta_3 = 1 - 0.8 = 0.2; delta_2 = 0.9*0.8 - 0.7 = 0.02 -> A_2 = 0.02 + 0.72*0.2 = 0.164;
    # delta_1 = 0.9*0.7 - 0.6 = 0.03 -> A_1 = 0.03 + 0.72*0.164 = 0.14808;
    # delta_0 = 0.9*0.6 - 0.5 = 0.04 -> A_0 = 0.04 + 0.72*0.14808 = 0.1466176
    _close(advantages, [[0.1466176, 0.14808, 0.164, 0.2]])
    _close(returns, [[0.6466176, 0.74808, 0.864, 1.0]])


def test_gae_ignores_padding_and_bridges_holes():
    """Right padding holding garbage changes nothing; a hole (a tool result the policy did not sample) is
    skipped: the token before it bootstraps from the token after it."""
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0, 7.0, float("nan")]])
    values = torch.tensor([[0.5, 0.6, 0.7, 0.8, 3.0, float("inf")]])
    mask = torch.tensor([[True, True, True, True, False, False]])
    advantages, returns = ppo.gae(rewards, values, mask, gamma=0.9, lam=0.8)
    _close(advantages, [[0.1466176, 0.14808, 0.164, 0.2, 0.0, 0.0]])
    _close(returns, [[0.6466176, 0.74808, 0.864, 1.0, 0.0, 0.0]])

    holed_rewards = torch.tensor([[0.0, 5.0, 0.0, 1.0]])
    holed_values = torch.tensor([[0.6, -9.0, 0.7, 0.8]])
    holed_mask = torch.tensor([[True, False, True, True]])
    advantages, returns = ppo.gae(holed_rewards, holed_values, holed_mask, gamma=0.9, lam=0.8)
    _close(advantages, [[0.14808, 0.0, 0.164, 0.2]])
    _close(returns, [[0.74808, 0.0, 0.864, 1.0]])


def test_gamma_and_lam_of_one_give_monte_carlo_returns():
    rewards = torch.tensor([[0.1, -0.2, 0.3, 1.0], [0.5, 0.5, 0.0, 0.0]])
    values = torch.tensor([[0.3, 0.1, -0.4, 0.9], [0.2, 0.7, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    advantages, returns = ppo.gae(rewards, values, mask, gamma=1.0, lam=1.0)
    _close(returns, [[1.2, 1.1, 1.3, 1.0], [1.0, 0.5, 0.0, 0.0]])
    _close(advantages, [[0.9, 1.0, 1.7, 0.1], [0.8, -0.2, 0.0, 0.0]])


def test_token_rewards_put_the_score_on_the_last_token_and_the_kl_on_every_token():
    kl = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    rewards = ppo.token_rewards(torch.tensor([2.0, -1.0]), kl, mask, ppo.last_token_index(mask), kl_coef=0.05)
    _close(rewards, [[-0.005, -0.01, -0.015, 1.98], [-0.005, -1.01, 0.0, 0.0]])


def test_kl_estimators_by_hand():
    logps, ref = torch.tensor([-1.0, -2.0]), torch.tensor([-2.0, -2.0])
    _close(ppo.per_token_kl(logps, ref, "k1"), [1.0, 0.0])
    _close(ppo.per_token_kl(logps, ref, "k3"), [math.exp(-1.0), 0.0])
    with pytest.raises(ValueError, match="kl_estimator"):
        ppo.per_token_kl(logps, ref, "k2")


def test_masked_whiten_by_hand():
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0, 100.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]], dtype=torch.bool)
    std = math.sqrt(5.0 / 3.0 + 1e-8)  # unbiased variance of 1..4 is 5/3
    expected = [(v - 2.5) / std for v in (1, 2, 3, 4)]
    _close(ppo.masked_whiten(x, mask), [expected + [0.0]])
    _close(ppo.masked_whiten(x, mask, shift_mean=False), [[v + 2.5 for v in expected] + [0.0]])
    with pytest.raises(ValueError, match="at least two completion tokens"):
        ppo.masked_var(x, torch.tensor([[1, 0, 0, 0, 0]], dtype=torch.bool))


def test_clipped_policy_loss_by_hand():
    old = torch.zeros(1, 4)
    logps = torch.log(torch.tensor([[1.5, 0.5, 1.1, 9.0]]))
    advantages = torch.tensor([[1.0, -1.0, 1.0, 5.0]])
    mask = torch.tensor([[1, 1, 1, 0]], dtype=torch.bool)
    loss, clip_fraction = ppo.clipped_policy_loss(logps, old, advantages, mask, cliprange=0.2)
    # token 0: max(-1.5, -1.2) = -1.2 (clipped); token 1: max(0.5, 0.8) = 0.8 (clipped); token 2: -1.1
    _close(loss, (-1.2 + 0.8 - 1.1) / 3)
    _close(clip_fraction, 2 / 3)


def test_clipped_value_loss_by_hand():
    values, old = torch.tensor([[1.0, 0.0, 4.0]]), torch.tensor([[0.5, 0.5, 0.0]])
    returns = torch.tensor([[2.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0]], dtype=torch.bool)
    loss, clip_fraction = ppo.clipped_value_loss(values, old, returns, mask, cliprange_value=0.2)
    # token 0: V clipped to 0.7 -> max(1, 1.69) = 1.69; token 1: V clipped to 0.3 -> max(0, 0.09) = 0.09
    _close(loss, 0.5 * (1.69 + 0.09) / 2)
    _close(clip_fraction, 1.0)


def test_explained_variance():
    returns = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    mask = torch.ones(1, 4, dtype=torch.bool)
    _close(ppo.explained_variance(returns, returns, mask), 1.0)
    _close(ppo.explained_variance(torch.full_like(returns, 2.5), returns, mask), 0.0)


@pytest.fixture(scope="module")
def trl_run():
    if not FIXTURE.exists():
        pytest.fail(f"{FIXTURE} is missing: run scripts/record_trl_ppo_reference.py (see its docstring)")
    return torch.load(FIXTURE, weights_only=True)


def test_rewards_and_gae_equal_trls_on_a_recorded_run(trl_run):
    """TRL's rollout phase: its log-probs, values and scores in; its rewards, advantages and returns out."""
    r = trl_run
    kl = ppo.per_token_kl(r["logprobs"], r["ref_logprobs"], r["kl_estimator"])
    rewards = ppo.token_rewards(r["scores"], kl, r["value_mask"], r["score_index"], r["kl_coef"])
    if r["whiten_rewards"]:
        _close(rewards, r["rewards_before_whitening"])
        rewards = ppo.masked_whiten(rewards, r["value_mask"], shift_mean=False)
    _close(rewards, r["rewards"])
    advantages, returns = ppo.gae(rewards, r["values"], r["value_mask"], r["gamma"], r["lam"])
    _close(returns, r["returns"])
    _close(ppo.masked_whiten(advantages, r["token_mask"]), r["advantages"])


def test_losses_equal_trls_on_a_recorded_run(trl_run):
    """TRL's first optimisation micro-batch: its new log-probs and value predictions in; its losses out."""
    r = trl_run
    rows = r["micro_batch_rows"]
    policy_loss, policy_clip = ppo.clipped_policy_loss(r["new_logprobs"], r["logprobs"][rows], r["advantages"][rows],
                                                       r["token_mask"][rows], r["cliprange"])
    value_loss, value_clip = ppo.clipped_value_loss(r["vpred"], r["values"][rows], r["returns"][rows],
                                                    r["value_mask"][rows], r["cliprange_value"])
    _close(policy_loss, r["pg_loss"])
    _close(value_loss, r["vf_loss"])
    _close(policy_clip, r["pg_clipfrac"])
    _close(value_clip, r["vf_clipfrac"])
    _close(policy_loss + r["vf_coef"] * value_loss, r["loss"])
