"""--advantage_estimator rloo / reinforce_plus_plus, --scale_rewards gdpo and --kl_in_reward's sequence KL,
against values worked out by hand: a batch with ties, a zero-variance group, and groups of two."""
import math

import pytest
import torch

from swiftlike.rl.core.advantages import (default_kl_in_reward, default_scale_rewards, gdpo_advantages,
                                          group_advantages, sequence_kl, teacher_kl, teacher_token_advantages)

TIES = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0])  # a group with ties, then a zero-variance group
PAIRS = torch.tensor([1.0, 3.0, 0.5, 0.5])  # groups of two


def approx(x):
    return pytest.approx(x, rel=1e-5, abs=1e-6)


def test_rloo_baseline_is_the_mean_of_the_others():
    adv, std = group_advantages(TIES, 4, "none", "rloo")
    # completion 0: 1 - mean(0, 0, 1) = 2/3; completion 1: 0 - mean(1, 0, 1) = -2/3
    assert adv.tolist() == approx([2 / 3, -2 / 3, -2 / 3, 2 / 3, 0, 0, 0, 0])
    assert std.tolist() == approx([math.sqrt(1 / 3), 0.0])
    adv, _ = group_advantages(PAIRS, 2, "none", "rloo")
    assert adv.tolist() == approx([1 - 3, 3 - 1, 0, 0])


def test_rloo_group_scaling_divides_the_leave_one_out_advantage():
    adv, _ = group_advantages(PAIRS, 2, "group", "rloo")
    s = math.sqrt(2.0)  # Bessel std of {1, 3}
    assert adv.tolist() == approx([-2 / (s + 1e-4), 2 / (s + 1e-4), 0, 0])


def test_a_group_of_one_has_no_others():
    adv, _ = group_advantages(torch.tensor([3.0, 5.0]), 1, "none", "rloo")
    assert adv.tolist() == [0.0, 0.0]


def test_reinforce_plus_plus_whitens_the_centred_rewards_over_the_batch():
    adv, _ = group_advantages(TIES, 4, "batch", "reinforce_plus_plus")
    centred = [0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0]
    std = math.sqrt(sum(c * c for c in centred) / 7)  # their mean is 0
    assert adv.tolist() == approx([c / (std + 1e-4) for c in centred])
    grpo, _ = group_advantages(TIES, 4, "batch", "grpo")
    reward_std = math.sqrt(sum((r - 1.25) ** 2 for r in TIES.tolist()) / 7)  # grpo divides by the rewards' std
    assert grpo.tolist() == approx([c / (reward_std + 1e-4) for c in centred])
    assert not torch.allclose(adv, grpo)


def test_reinforce_plus_plus_group_scaling_equals_grpos():
    assert torch.equal(group_advantages(PAIRS, 2, "group", "reinforce_plus_plus")[0],
                       group_advantages(PAIRS, 2, "group", "grpo")[0])


def test_gdpo_normalises_each_function_in_its_group_then_the_sum_over_the_batch():
    per_func = torch.tensor([[1.0, 0.2], [0.0, 0.0], [1.0, float("nan")], [1.0, 0.1]])
    weights = torch.tensor([1.0, 0.5])
    # accuracy in group 1: {1, 0} -> z = +-1/sqrt(2); group 2: {1, 1} -> 0
    # format in group 1: {0.2, 0} -> z = +-1/sqrt(2); group 2: {NaN, 0.1} -> one value, its z is 0 (NaN -> 0)
    z = 1 / math.sqrt(2)
    summed = [z + 0.5 * z, -z - 0.5 * z, 0.0, 0.0]
    std = math.sqrt(2 * summed[0] ** 2 / 3)
    expected = [s / std for s in summed]
    assert gdpo_advantages(per_func, weights, 2).tolist() == approx(expected)
    total = torch.nansum(per_func * weights, dim=1)
    adv, group_std = group_advantages(total, 2, "gdpo", per_func_rewards=per_func, reward_weights=weights)
    assert adv.tolist() == approx(expected)
    # the logged group std is of the summed rewards, {1.1, 0} and {1, 1.05} (NaN summed as 0)
    assert group_std.tolist() == approx([1.1 / math.sqrt(2), 0.05 / math.sqrt(2)])


def test_gdpo_is_refused_with_another_estimator_or_without_per_function_rewards():
    with pytest.raises(ValueError, match="gdpo.*advantage_estimator"):
        group_advantages(PAIRS, 2, "gdpo", "rloo", PAIRS.view(-1, 1), torch.ones(1))
    with pytest.raises(ValueError, match="per-function rewards"):
        group_advantages(PAIRS, 2, "gdpo")


def test_defaults_per_estimator_are_ms_swifts():
    assert [default_scale_rewards(e) for e in ("grpo", "rloo", "reinforce_plus_plus")] == ["group", "none", "batch"]
    assert [default_kl_in_reward(e) for e in ("grpo", "rloo", "reinforce_plus_plus")] == [False, True, True]


def test_sequence_kl_sums_old_minus_ref_over_the_completion():
    old = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, -0.5, -0.5]])
    ref = torch.tensor([[-1.5, -1.0, float("-inf")], [-0.5, -1.0, -2.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    assert sequence_kl(old, ref, mask).tolist() == approx([0.5 - 1.0, 0 + 0.5 + 1.5])


def test_teacher_log_ratio_is_added_per_token():
    base = torch.tensor([0.5, -1.0])
    teacher = torch.tensor([[-1.0, -0.2, -9.0], [-2.0, -3.0, -1.0]])
    old = torch.tensor([[-1.5, -0.2, 0.0], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    adv = teacher_token_advantages(base, teacher, old, mask, teacher_kl_coef=2.0)
    assert adv.flatten().tolist() == approx([0.5 + 2 * 0.5, 0.5 + 0.0, 0.0, -1.0 - 2.0, -1.0 - 4.0, -1.0 + 0.0])
    assert teacher_token_advantages(torch.zeros(2), teacher, old, mask, 1.0)[1].tolist() == approx([-1, -2, 0])
    k3 = [math.exp(0.5) - 0.5 - 1, 0.0, math.exp(-1) + 1 - 1, math.exp(-2) + 2 - 1, 0.0]
    assert float(teacher_kl(teacher, old, mask)) == approx(sum(k3) / 5)
