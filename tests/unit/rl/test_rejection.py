"""--rollout_rs rejection on hand-built train/rollout ratios: each level and divergence, several rules ANDed,
the threshold syntax, and the metrics of how much was rejected and why."""
import math

import pytest
import torch

from swiftlike.rl.core.rejection import parse_rollout_rs, rollout_rejection_mask

# Two sequences; log-ratios log(pi_train / pi_rollout) per token, the last token of row 1 is padding.
LOG_RATIO = torch.tensor([[0.0, math.log(3.0), math.log(0.9)],
                          [math.log(1.1), math.log(1.2), 5.0]])
MASK = torch.tensor([[True, True, True], [True, True, False]])
ROLLOUT = torch.full((2, 3), -2.0)
TRAIN = ROLLOUT + LOG_RATIO


def keep(options, thresholds):
    mask, metrics = rollout_rejection_mask(TRAIN, ROLLOUT, MASK, parse_rollout_rs(options, thresholds))
    return mask.tolist(), {k: round(float(v), 6) for k, v in metrics.items()}


def test_token_k1_bounds_each_tokens_ratio():
    mask, metrics = keep("token_k1", "0.5_2.0")
    assert mask == [[True, False, True], [True, True, False]]  # ratio 3 is out; padding is never kept
    assert metrics["masked_fraction"] == round(1 / 5, 6) and metrics["seq_masked_fraction"] == 0.5
    assert metrics["token_k1/masked_fraction"] == round(1 / 5, 6)


def test_one_k1_number_is_the_upper_bound_and_its_reciprocal():
    # bounds [1/1.15 = 0.87, 1.15]: 0.9 and 1.1 are in, 3 and 1.2 are out
    assert keep("token_k1", "1.15")[0] == [[True, False, True], [True, False, False]]
    assert parse_rollout_rs("token_k1", "4")[0].lower == 0.25


def test_sequence_levels_reject_whole_sequences():
    # geometric mean of row 0: (1 * 3 * 0.9) ** (1/3) = 1.392; row 1: (1.1 * 1.2) ** (1/2) = 1.149
    assert keep("seq_mean_k1", "0.5_1.3")[0] == [[False, False, False], [True, True, False]]
    # full product of row 0: 2.7; row 1: 1.32
    assert keep("seq_sum_k1", "0.5_2.0")[0] == [[False, False, False], [True, True, False]]
    # worst token's k2 = (log 3)^2 / 2 = 0.603 in row 0; row 1's worst is (log 1.2)^2 / 2 = 0.0166
    assert keep("seq_max_k2", "0.1")[0] == [[False, False, False], [True, True, False]]


def test_k2_and_k3_values_by_hand():
    k3 = {r: r - 1 - math.log(r) for r in (3.0, 0.9, 1.1, 1.2)}  # 0.901, 0.00536, 0.00469, 0.0177
    assert keep("token_k3", "0.01")[0] == [[True, False, True], [True, False, False]]
    assert k3[0.9] < 0.01 < k3[1.2] < k3[3.0] and k3[1.1] < 0.01
    # seq_mean_k3 of row 1: ((1.1 - 1 - log 1.1) + (1.2 - 1 - log 1.2)) / 2 = 0.0113
    assert keep("seq_mean_k3", "0.012")[0] == [[False, False, False], [True, True, False]]
    assert keep("seq_mean_k3", "0.011")[0] == [[False, False, False], [False, False, False]]


def test_rules_are_anded_and_each_reports_its_share():
    mask, metrics = keep("token_k1,seq_mean_k3", "0.5_2.0,0.012")
    assert mask == [[False, False, False], [True, True, False]]
    assert metrics["token_k1/masked_fraction"] == 0.2
    assert metrics["seq_mean_k3/masked_fraction"] == 0.6 and metrics["seq_mean_k3/seq_masked_fraction"] == 0.5
    assert metrics["masked_fraction"] == 0.6


def test_bad_settings_name_the_flag():
    with pytest.raises(ValueError, match="--rollout_rs token_k4: not an option"):
        parse_rollout_rs("token_k4", "2")
    with pytest.raises(ValueError, match="needs --rollout_rs_threshold"):
        parse_rollout_rs("token_k1", None)
    with pytest.raises(ValueError, match="LOWER_UPPER"):
        parse_rollout_rs("token_k1", "2.0_0.5")
    with pytest.raises(ValueError, match="one upper bound"):
        parse_rollout_rs("token_k2", "0.1_0.2")
    with pytest.raises(ValueError, match="2 thresholds for 3"):
        parse_rollout_rs("token_k1,token_k2,seq_max_k3", "2,0.1")
