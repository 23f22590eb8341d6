"""--rollout_rs rejection on hand-built train/rollout ratios: each level and divergence, several rules ANDed,
the threshold syntax, and the metrics of how much was rejected and why; and every option against verl's own
formula (`compute_rollout_rejection_mask`, re-implemented below), whose names the flags carry."""
import math

import pytest
import torch

from swiftlike.rl.core.rejection import ROLLOUT_RS_OPTIONS, parse_rollout_rs, rollout_rejection_mask

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
    # verl's k1 is log(pi_rollout / pi_train): ratios 1, 1/3, 1/0.9 in row 0 and 1/1.1, 1/1.2 in row 1
    mask, metrics = keep("token_k1", "0.5_2.0")
    assert mask == [[True, False, True], [True, True, False]]  # 1/3 is out; padding is never kept
    assert metrics["masked_fraction"] == round(1 / 5, 6) and metrics["seq_masked_fraction"] == 0.5
    assert metrics["token_k1/masked_fraction"] == round(1 / 5, 6)


def test_one_k1_number_is_the_upper_bound_and_its_reciprocal():
    # bounds [1/1.15 = 0.87, 1.15]: 1, 1.11 and 0.91 are in, 1/3 and 0.83 are out
    assert keep("token_k1", "1.15")[0] == [[True, False, True], [True, False, False]]
    assert parse_rollout_rs("token_k1", "4")[0].lower == 0.25


def test_asymmetric_k1_bounds_read_pi_rollout_over_pi_train():
    """`0.8_1.5` keeps 0.8 <= pi_rollout / pi_train <= 1.5, verl's meaning. Row 0's geometric mean of
    pi_rollout / pi_train is 1 / 1.392 = 0.718, out of [0.8, 1.5]; row 1's is 1 / 1.149 = 0.870, in. Read as
    pi_train / pi_rollout (1.392 and 1.149) both would be in."""
    assert keep("seq_mean_k1", "0.8_1.5")[0] == [[False, False, False], [True, True, False]]
    # token by token: 1/3 (the trainer finds the token 3x likelier than the engine did) is out, 0.83 is in
    assert keep("token_k1", "0.8_1.5")[0] == [[True, False, True], [True, True, False]]


def test_sequence_levels_reject_whole_sequences():
    # product of pi_rollout / pi_train in row 0: 1 / 2.7 = 0.37; row 1: 1 / 1.32 = 0.76
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


def verl_rejection(log_ratio: torch.Tensor, mask: torch.Tensor, option: str, lower: float | None,
                   upper: float) -> torch.Tensor:
    """verl's `compute_rollout_rejection_mask` (verl/trainer/ppo/rollout_corr_helper.py) for one option,
    re-implemented: log_ratio = log pi_train - log pi_rollout clamped to +-20; token_k1 = -log_ratio, k2 =
    log_ratio^2 / 2, k3 = exp(log_ratio) - 1 - log_ratio; seq_sum / seq_mean by verl_F.masked_sum / masked_mean
    (+1e-8 in the count); seq_max the masked max (0 for an empty row); a k1 statistic kept within [log lower,
    log upper], the others <= upper. Returns the modified response mask."""
    lr = log_ratio.clamp(-20.0, 20.0)
    per_token = {"k1": -lr, "k2": 0.5 * lr ** 2, "k3": torch.exp(lr) - 1.0 - lr}[option.rsplit("_", 1)[1]]
    m = mask.float()
    level = option.rsplit("_", 1)[0]
    if level == "token":
        stat = per_token
    elif level == "seq_sum":
        stat = (torch.where(mask, per_token, 0.0) * m).sum(-1, keepdim=True)
    elif level == "seq_mean":
        stat = (torch.where(mask, per_token, 0.0) * m).sum(-1, keepdim=True) / (m.sum(-1, keepdim=True) + 1e-8)
    else:
        worst = per_token.masked_fill(~mask, float("-inf")).max(-1, keepdim=True).values
        stat = torch.where(worst == float("-inf"), torch.zeros_like(worst), worst)
    if lower is not None:
        kept = (stat >= math.log(lower)) & (stat <= math.log(upper))
    else:
        kept = stat <= upper
    return (m * kept.expand_as(m).float()).bool()


VERL_THRESHOLDS = {"k1": ["0.8_1.5", "0.5_2.0", "1.3"], "k2": ["0.05"], "k3": ["0.02"]}


@pytest.mark.parametrize("option", ROLLOUT_RS_OPTIONS)
def test_every_option_keeps_what_verls_formula_keeps(option):
    gen = torch.Generator().manual_seed(11)
    rows, width = 12, 9
    train = -torch.rand(rows, width, generator=gen) * 3
    rollout = train - 0.3 * torch.randn(rows, width, generator=gen)  # ratios mostly within 0.5-2
    mask = torch.ones(rows, width, dtype=torch.bool)
    for r in range(rows):
        mask[r, 9 - r % 4:] = False  # rows of 6 to 9 tokens
    for spec in VERL_THRESHOLDS[option.rsplit("_", 1)[1]]:
        rule = parse_rollout_rs(option, spec)[0]
        ours, _ = rollout_rejection_mask(train, rollout, mask, (rule,))
        theirs = verl_rejection(train - rollout, mask, option, rule.lower, rule.upper)
        assert ours.tolist() == theirs.tolist(), (option, spec, int((ours != theirs).sum()))
