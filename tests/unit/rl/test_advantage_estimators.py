"""--advantage_estimator rloo / reinforce_plus_plus, --scale_rewards gdpo and --kl_in_reward's sequence KL,
against values worked out by hand: a batch with ties, a zero-variance group, and groups of two; and rewards that are
missing (an unparseable judge reply, a dropped group), which every estimator leaves out of its statistics."""
import math

import pytest
import torch

from swiftlike.rl.core.advantages import (default_kl_in_reward, default_scale_rewards, gdpo_advantages,
                                          group_advantages, groups_with_signal, sequence_kl, teacher_kl,
                                          teacher_token_advantages, whole_groups)

TIES = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0])  # a group with ties, then a zero-variance group
PAIRS = torch.tensor([1.0, 3.0, 0.5, 0.5])  # groups of two
NAN = float("nan")
# a group with its third reward missing, then a group with none: a missing reward may hold NaN or any value
ONE_MISSING = torch.tensor([1.0, 0.0, NAN, 1.0, NAN, 5.0, NAN, NAN])
ONE_MISSING_VALID = torch.tensor([True, True, False, True, False, False, False, False])
# then a group whose first and last rewards are missing (7 and 9 must not count)
TWO_GROUPS = torch.tensor([1.0, 0.0, NAN, 1.0, 7.0, 2.0, 4.0, 9.0])
TWO_GROUPS_VALID = torch.tensor([True, True, False, True, False, True, True, False])


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


def ms_swift_gdpo(per_func: torch.Tensor, weights: torch.Tensor, k: int) -> torch.Tensor:
    """ms-swift's GDPO, re-implemented from swift/rl_core/advantage.py `compute_advantages` (scale_rewards 'gdpo')
    with `nanstd` from swift/utils/torch_utils.py: per function, (r - nanmean) / (Bessel nanstd + 1e-8) within
    the group, NaN -> 0, weighted sum, then (s - mean) / (std + 1e-8) over the batch."""
    summed = 0
    for i in range(per_func.shape[1]):
        r = per_func[:, i].view(-1, k)
        mean = torch.nanmean(r, dim=1, keepdim=True)
        count = (~r.isnan()).sum(dim=1, keepdim=True)
        var = torch.nanmean((r - mean) ** 2, dim=1, keepdim=True) * count / (count - 1)
        z = torch.nan_to_num((r - mean) / (var.sqrt() + 1e-8), nan=0.0)
        summed = summed + weights[i] * z.view(-1)
    return (summed - summed.mean()) / (summed.std() + 1e-8)


def test_gdpo_gives_a_group_of_equal_non_round_rewards_exactly_zero():
    """Eight 0.1s sum to a float32 mean 7e-9 off 0.1; with GDPO's 1e-8 epsilon that rounding became a z-score of
    -0.41 for the whole group, and final advantages 0.26-0.50 away from ms-swift's. A function that gives a group
    the same value says nothing about its completions: it adds exactly 0."""
    accuracy = torch.tensor([1.0, 0, 1, 0, 1, 1, 0, 0, 1, 0, 0, 0, 1, 1, 1, 0])
    fmt = torch.tensor([0.1] * 8 + [0.3] * 8)
    per_func, weights = torch.stack([accuracy, fmt], dim=1), torch.tensor([1.0, 1.0])
    # by hand: format adds 0; accuracy's z in each group is +-0.5 / sqrt(2/7), and over the batch +-sqrt(15/16)
    expected = [math.sqrt(15 / 16) * (1 if a else -1) for a in accuracy.tolist()]
    adv = gdpo_advantages(per_func, weights, 8)
    assert adv.tolist() == approx(expected)
    # ms-swift's formula, in float64 (no rounding to amplify) and as ms-swift runs it in float32 (a strided column
    # of the (N, funcs) table, whose sum happens to be exact here)
    assert adv.tolist() == approx(ms_swift_gdpo(per_func.double(), weights.double(), 8).tolist())
    assert adv.tolist() == approx(ms_swift_gdpo(per_func, weights, 8).tolist())
    # a batch in which no function tells completions apart: all zeros, whatever the values
    assert gdpo_advantages(torch.full((16, 1), 0.1), torch.ones(1), 8).tolist() == [0.0] * 16
    # a group equal but for a NaN (the function does not apply there) is still equal
    mixed = torch.stack([accuracy, torch.tensor([0.1] * 7 + [NAN] + [0.7] * 8)], dim=1)
    assert gdpo_advantages(mixed, weights, 8).tolist() == approx(expected)


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


# ---------------------------------------------------------------- missing rewards


def test_a_missing_reward_is_left_out_of_its_groups_mean_and_std_and_gets_advantage_0():
    adv, std = group_advantages(ONE_MISSING, 4, "group", valid=ONE_MISSING_VALID)
    # group 1: valid {1, 0, 1}, mean 2/3, Bessel std sqrt((1/9 + 4/9 + 1/9) / 2) = sqrt(1/3); group 2: nothing valid
    s = math.sqrt(1 / 3)
    assert adv.tolist() == approx([(1 / 3) / (s + 1e-4), (-2 / 3) / (s + 1e-4), 0, (1 / 3) / (s + 1e-4), 0, 0, 0, 0])
    assert std.tolist() == approx([s, 0.0])
    assert not adv.isnan().any() and not std.isnan().any()
    # all-valid is the default; a missing mask the wrong size is refused
    every = torch.ones(8, dtype=torch.bool)
    assert torch.equal(group_advantages(TIES, 4, valid=every)[0], group_advantages(TIES, 4)[0])
    with pytest.raises(ValueError, match="one flag per reward"):
        group_advantages(TIES, 4, valid=torch.ones(4, dtype=torch.bool))


def test_a_group_with_every_reward_missing_is_all_zeros_under_every_setting():
    rewards, valid = torch.full((4,), NAN), torch.zeros(4, dtype=torch.bool)
    for estimator in ("grpo", "rloo", "reinforce_plus_plus"):
        for scale in ("group", "batch", "none"):
            adv, std = group_advantages(rewards, 4, scale, estimator, valid=valid)
            assert adv.tolist() == [0.0] * 4 and std.tolist() == [0.0], (estimator, scale)


def test_rloo_with_a_missing_reward_counts_the_others_that_exist():
    adv, _ = group_advantages(ONE_MISSING, 4, "none", "rloo", valid=ONE_MISSING_VALID)
    # 1 - mean(0, 1) = 0.5; 0 - mean(1, 1) = -1; 1 - mean(1, 0) = 0.5; a group of one valid reward has no others
    assert adv.tolist() == approx([0.5, -1.0, 0.0, 0.5, 0, 0, 0, 0])
    adv, _ = group_advantages(TWO_GROUPS, 4, "none", "rloo", valid=TWO_GROUPS_VALID)
    assert adv.tolist() == approx([0.5, -1.0, 0.0, 0.5, 0.0, 2 - 4, 4 - 2, 0.0])


def test_batch_statistics_leave_missing_rewards_out():
    # centred: group 1 {1/3, -2/3, 1/3} (mean 2/3), group 2 {-1, 1} (mean 3); their std over the batch, mean 0:
    # sqrt((1/9 + 4/9 + 1/9 + 1 + 1) / 4) = sqrt(2/3)
    centred = [1 / 3, -2 / 3, 0, 1 / 3, 0, -1, 1, 0]
    adv, _ = group_advantages(TWO_GROUPS, 4, "batch", "reinforce_plus_plus", valid=TWO_GROUPS_VALID)
    assert adv.tolist() == approx([c / (math.sqrt(2 / 3) + 1e-4) for c in centred])
    # grpo's batch std is of the valid rewards {1, 0, 1, 2, 4}: mean 1.6, sqrt(9.2 / 4)
    adv, _ = group_advantages(TWO_GROUPS, 4, "batch", "grpo", valid=TWO_GROUPS_VALID)
    assert adv.tolist() == approx([c / (math.sqrt(2.3) + 1e-4) for c in centred])


def test_gdpo_leaves_a_row_without_a_valid_reward_out():
    per_func = torch.tensor([[1.0, 0.2], [0.0, 0.0], [1.0, NAN], [1.0, 0.1]])
    valid = torch.tensor([True, True, True, False])
    # group 1 as before: +-1/sqrt(2) per function; group 2 keeps row 2 alone, which z-scores to 0 in both functions,
    # so the summed [1.5 z, -1.5 z, 0] has mean 0 and std 1.5 z over the valid rows
    adv = gdpo_advantages(per_func, torch.tensor([1.0, 0.5]), 2, valid)
    assert adv.tolist() == approx([1.0, -1.0, 0.0, 0.0])
    total = torch.nansum(per_func * torch.tensor([1.0, 0.5]), dim=1)
    assert group_advantages(total, 2, "gdpo", per_func_rewards=per_func, reward_weights=torch.tensor([1.0, 0.5]),
                            valid=valid)[0].tolist() == approx([1.0, -1.0, 0.0, 0.0])


def test_signal_counts_valid_rewards_only_and_a_failed_reward_takes_its_whole_group():
    rewards = torch.tensor([1.0, NAN, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, NAN, NAN])
    valid = torch.tensor([True, False, True, True, True, False, True, True, True, True, False, False])
    assert groups_with_signal(rewards, 4, valid).tolist() == [False, False, True]
    failed = torch.tensor([False, True, False, False] + [False] * 8)
    assert whole_groups(failed, 4).tolist() == [True] * 4 + [False] * 8
