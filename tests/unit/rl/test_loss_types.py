"""--loss_type cispo / sapo / clip_cov / kl_cov and --top_entropy_quantile: equal to TRL 1.16's own loss code
(tests/helpers/trl_loss.py) on seeded random tensors, in value and gradient, where TRL has the option; by hand
otherwise."""
import math

import pytest
import torch
from trl_loss import TrlLoss

from swiftlike.rl.core.losses import aggregation_of, policy_loss
from swiftlike.rl.core.selection import clip_cov_mask, entropy_threshold, kl_cov_mask, top_entropy_mask


def batch(seed: int):
    gen = torch.Generator().manual_seed(seed)
    rows, width = 5, 7
    logps = torch.randn(rows, width, generator=gen) - 1.0
    old = logps + 0.4 * torch.randn(rows, width, generator=gen)  # ratios from about 0.3 to 3: clips bite
    mask = torch.ones(rows, width, dtype=torch.bool)
    mask[1, 5:] = False
    mask[3, 2:] = False
    advantages = torch.randn(rows, generator=gen)
    entropies = torch.rand(rows, width, generator=gen) * 3
    return logps, old, mask, advantages, entropies


def ours_and_trls(loss_type, seed, *, top_q=1.0, **kw):
    logps, old, mask, advantages, entropies = batch(seed)
    mine = logps.clone().requires_grad_()
    token_mask = None
    if top_q < 1.0:
        token_mask = top_entropy_mask(entropies, mask, entropy_threshold(entropies[mask], top_q))
    loss, metrics = policy_loss(mine, old, advantages, mask, loss_type=loss_type, token_mask=token_mask,
                                num_items_in_batch=mask.sum(), **kw)
    loss.backward()
    theirs = logps.clone().requires_grad_()
    trl = TrlLoss(theirs, entropies, loss_type=loss_type, top_entropy_quantile=top_q, **kw)
    trl_loss = trl.loss(old, advantages, mask)
    trl_loss.backward()
    return (loss, mine.grad, metrics), (trl_loss, theirs.grad, trl._metrics["train"]), token_mask


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cispo_equals_trls(seed):
    (loss, grad, metrics), (trl_loss, trl_grad, trl_metrics), _ = ours_and_trls("cispo", seed, epsilon_high=1.5)
    assert float(loss) == pytest.approx(float(trl_loss), abs=1e-6)
    assert torch.allclose(grad, trl_grad, atol=1e-6)
    assert float(metrics["cispo_clip_ratio"]) == pytest.approx(trl_metrics["cispo_clip_ratio"][0], abs=1e-6)
    assert float(metrics["cispo_clip_ratio"]) > 0  # epsilon_high 1.5 clips some weights here


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sapo_equals_trls(seed):
    (loss, grad, _), (trl_loss, trl_grad, _), _ = ours_and_trls("sapo", seed, tau_pos=1.0, tau_neg=1.05)
    assert float(loss) == pytest.approx(float(trl_loss), abs=1e-6)
    assert torch.allclose(grad, trl_grad, atol=1e-6)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_top_entropy_quantile_equals_trls(loss_type):
    (loss, grad, _), (trl_loss, trl_grad, _), token_mask = ours_and_trls(loss_type, 3, top_q=0.2)
    assert float(loss) == pytest.approx(float(trl_loss), abs=1e-6)
    assert torch.allclose(grad, trl_grad, atol=1e-6)
    _, _, mask, _, _ = batch(3)
    share = float(token_mask.sum() / mask.sum())
    assert 0.15 <= share <= 0.25  # the top fifth of the 28 completion tokens
    assert (grad[mask & ~token_mask] == 0).all() and (grad[token_mask] != 0).any()  # clipped ones get none either


def test_cispo_weight_is_clipped_and_detached_by_hand():
    logps = torch.tensor([[math.log(0.5), math.log(0.2)]], requires_grad=True)
    old = torch.tensor([[math.log(0.1), math.log(0.2)]])  # ratios 5 and 1
    mask = torch.ones(1, 2, dtype=torch.bool)
    loss, metrics = policy_loss(logps, old, torch.tensor([2.0]), mask, loss_type="cispo", epsilon_high=3.0,
                                num_items_in_batch=2)
    # per token: -min(r, 3) * A * logp -> -(3 * 2 * log .5) and -(1 * 2 * log .2), over 2 tokens
    assert float(loss) == pytest.approx(-(3 * 2 * math.log(0.5) + 1 * 2 * math.log(0.2)) / 2, rel=1e-6)
    loss.backward()
    assert logps.grad[0].tolist() == pytest.approx([-3.0, -1.0])  # d/dlogp = -w * A / 2: the weight is a constant
    assert float(metrics["cispo_clip_ratio"]) == 0.5


def test_sapo_gate_by_hand():
    logps = torch.tensor([[0.0, 0.0]], requires_grad=True)
    old = torch.tensor([[-math.log(2.0), 0.0]])  # ratios 2 and 1
    mask = torch.ones(1, 2, dtype=torch.bool)
    loss, _ = policy_loss(logps, old, torch.tensor([-1.0]), mask, loss_type="sapo", tau_pos=1.0, tau_neg=2.0)
    # A < 0 -> tau_neg = 2: -sigmoid(2 (r - 1)) * 4 / 2 * A, mean over the sequence's tokens
    expected = (torch.sigmoid(torch.tensor(2.0)) * 2 + torch.sigmoid(torch.tensor(0.0)) * 2) / 2
    assert float(loss) == pytest.approx(float(expected), rel=1e-6)


def test_kl_cov_adds_the_abs_log_ratio_on_the_largest_covariance_tokens_by_hand():
    logps = torch.tensor([[-1.0, -2.0], [-3.0, -0.5]], requires_grad=True)
    old = torch.tensor([[-1.5, -2.0], [-3.5, -1.0]])
    advantages = torch.tensor([1.0, -1.0])
    mask = torch.ones(2, 2, dtype=torch.bool)
    # means: A 0, logp -1.625; cov terms: (1)(0.625), (1)(-0.375), (-1)(-1.375), (-1)(1.125) -> largest: [1, 0]
    selected = kl_cov_mask(advantages, logps, mask, kl_ratio=0.25)
    assert selected.tolist() == [[False, False], [True, False]]
    loss, _ = policy_loss(logps, old, advantages, mask, loss_type="kl_cov", kl_cov_tokens=selected, ppo_kl_coef=2.0,
                          num_items_in_batch=4)
    ratios = torch.exp(logps.detach() - old)
    per_token = -advantages[:, None] * ratios
    per_token[1, 0] += 2.0 * 0.5  # ppo_kl_coef * |logp - old| at the selected token only
    assert float(loss) == pytest.approx(float(per_token.sum() / 4), rel=1e-6)
    assert aggregation_of("kl_cov") == "dapo" and aggregation_of("sapo") == "grpo"


def test_clip_cov_stops_a_share_of_the_high_covariance_band_only():
    logps, old, mask, advantages, _ = batch(4)
    old = logps.clone()  # ratio 1: nothing clipped by PPO, so only the band decides
    keep = clip_cov_mask(advantages, logps, old, mask, clip_ratio=0.1, lower=0.0, upper=5.0, epsilon_low=0.2,
                         epsilon_high=0.2, generator=torch.Generator().manual_seed(0))
    adv = advantages[:, None].expand_as(logps)
    cov = (adv - adv[mask].mean()) * (logps - logps[mask].mean())
    stopped = keep == 0
    assert int(stopped.sum()) == max(int(0.1 * int(mask.sum())), 1) == 2
    assert (cov[stopped] > 0).all() and (mask[stopped]).all()
    none_in_band = clip_cov_mask(advantages, logps, old, mask, clip_ratio=0.1, lower=100.0, upper=200.0,
                                 epsilon_low=0.2, epsilon_high=0.2)
    assert (none_in_band == 1).all()


def test_entropy_threshold_is_checked():
    with pytest.raises(ValueError, match="top_entropy_quantile"):
        entropy_threshold(torch.rand(4), 0.0)


def test_kl_cov_picks_exactly_its_share_when_every_term_ties():
    """All advantages 0 (a group whose rewards are equal): every covariance term is 0, and the share is still
    the share, not every tied token."""
    logps, _, mask, _, _ = batch(5)
    selected = kl_cov_mask(torch.zeros(5), logps, mask, kl_ratio=0.1)
    assert int(selected.sum()) == max(int(0.1 * int(mask.sum())), 1) and not (selected & ~mask).any()
