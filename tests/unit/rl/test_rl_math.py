"""The GRPO-family math in swiftlike.rl.core, checked against values worked out by hand on tiny tensors."""
import math

import pytest
import torch

from swiftlike.rl.core.advantages import group_advantages, groups_with_signal
from swiftlike.rl.core.correction import effective_sample_size, mismatch_metrics, off_policy_sequence_mask, rollout_is_weights
from swiftlike.rl.core.losses import aggregate, importance_ratio, k3_kl, policy_loss
from swiftlike.rl.core.sampling import apply_temperature_and_filter, selected_logps

LN2 = math.log(2.0)


def approx(x, rel=1e-5, abs=1e-6):
    return pytest.approx(x, rel=rel, abs=abs)


def values(t):
    return t.detach().double().flatten().tolist()


# --------------------------------------------------------------------------- advantages

REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0])  # two prompts x 4 generations


def test_group_advantages_group_scaling():
    adv, std = group_advantages(REWARDS, 4, "group")
    s = math.sqrt((4 * 0.25) / 3)  # Bessel-corrected std of {1, 0, 0, 1}
    a = 0.5 / (s + 1e-4)
    assert values(std) == approx([s, 0.0])
    # the constant group gets 0 / (0 + 1e-4) = 0, not NaN
    assert values(adv) == approx([a, -a, -a, a, 0, 0, 0, 0])


def test_group_advantages_batch_scaling_keeps_group_mean_baseline():
    adv, std = group_advantages(REWARDS, 4, "batch")
    mean = 10 / 8
    batch_std = math.sqrt(sum((r - mean) ** 2 for r in REWARDS.tolist()) / 7)
    a = 0.5 / (batch_std + 1e-4)
    assert values(adv) == approx([a, -a, -a, a, 0, 0, 0, 0])
    assert values(std) == approx([math.sqrt(1 / 3), 0.0])  # still the per-group std


def test_group_advantages_none_is_dr_grpo():
    adv, _ = group_advantages(REWARDS, 4, "none")
    assert values(adv) == approx([0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0])


def test_group_advantages_single_generation_and_errors():
    adv, std = group_advantages(torch.tensor([3.0, 5.0]), 1)
    assert values(adv) == [0.0, 0.0] and values(std) == [0.0, 0.0]
    adv, _ = group_advantages(torch.tensor([1, 0]), 2)  # integer rewards are fine
    assert adv.is_floating_point()
    with pytest.raises(ValueError, match="groups"):
        group_advantages(torch.zeros(5), 2)
    with pytest.raises(ValueError, match="scale_rewards"):
        group_advantages(torch.zeros(4), 2, "whiten")


def test_groups_with_signal():
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.5] + [0.1] * 7 + [0.1] * 6 + [0.2])
    # the constant 0.1 group must count as no-signal even though float std() may be ~1e-8 there
    assert groups_with_signal(rewards[:4], 2).tolist() == [True, False]
    assert groups_with_signal(rewards[4:], 7).tolist() == [False, True]
    assert groups_with_signal(torch.tensor([1.0, 2.0]), 1).tolist() == [False, False]


# --------------------------------------------------------------------------- policy loss

# 2 x 3 hand example: sequence 0 has 3 completion tokens, sequence 1 has 1 (then padding)
MASK = torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=torch.float32)
ADV = torch.tensor([1.0, -2.0])


def _at_ratio_one(requires_grad=False):
    logps = torch.tensor([[-1.0, -2.0, -0.5], [-0.7, 0.0, 0.0]], requires_grad=requires_grad)
    return logps, logps.detach().clone()


@pytest.mark.parametrize("loss_type, kwargs, expected", [
    # per-token loss at ratio 1 is -A: row 0 = [-1, -1, -1], row 1 = [2]
    ("grpo", {}, ((-3 / 3) + (2 / 1)) / 2),               # 0.5: mean of per-sequence means
    ("bnpo", {}, (-3 + 2) / 4),                            # -0.25: sum / 4 tokens
    ("dr_grpo", {"max_completion_length": 4}, (-3 + 2) / (2 * 4)),  # -0.125
    ("dapo", {}, (-3 + 2) / 4),                            # one process: same as bnpo
    ("dapo", {"num_items_in_batch": 16, "num_processes": 2}, (-3 + 2) / 8),  # global count 16 over 2 ranks
])
def test_aggregations_on_hand_example(loss_type, kwargs, expected):
    logps, old = _at_ratio_one()
    loss, metrics = policy_loss(logps, old, ADV, MASK, loss_type=loss_type, **kwargs)
    assert loss.item() == approx(expected)
    assert metrics["clip_ratio/region_mean"].item() == 0.0
    assert "kl" not in metrics


@pytest.mark.parametrize("loss_type, kwargs, normaliser", [
    ("grpo", {}, [[2 * 3] * 3, [2 * 1] * 3]),  # batch * |y_i|
    ("bnpo", {}, [[4] * 3] * 2),
    ("dr_grpo", {"max_completion_length": 5}, [[10] * 3] * 2),
    ("dapo", {"num_items_in_batch": 12, "num_processes": 3}, [[4] * 3] * 2),
])
def test_gradient_at_ratio_one_is_minus_advantage_over_normaliser(loss_type, kwargs, normaliser):
    logps, old = _at_ratio_one(requires_grad=True)
    loss, _ = policy_loss(logps, old, ADV, MASK, loss_type=loss_type, **kwargs)
    loss.backward()
    expected = [[-ADV[i].item() / normaliser[i][t] * MASK[i, t].item() for t in range(3)] for i in range(2)]
    assert values(logps.grad) == approx([x for row in expected for x in row])


# Two ranks of one optimizer step, with the per-token loss -A at ratio 1 (aggregate's input) by hand.
# Rank 0: one sequence, A = 1, 3 tokens -> per-token [-1, -1, -1], sum -3. Rank 1: A = -2, 1 token -> [2], sum 2.
RANK0_LOSS, RANK0_MASK = torch.tensor([[-1.0, -1.0, -1.0]]), torch.tensor([[1, 1, 1]])
RANK1_LOSS, RANK1_MASK = torch.tensor([[2.0, 0.0, 0.0]]), torch.tensor([[1, 0, 0]])


def test_bnpo_counts_the_micro_batch_over_all_processes():
    """DDP averages the ranks' gradients, so the step's loss is the mean of the ranks' losses. With the
    micro-batch's global count (4 tokens) / 2 processes as each rank's normaliser it is (-3 + 2) / 4 = -0.25,
    the bnpo loss of one process holding both sequences; TRL's local counts would give (-3/3 + 2/1) / 2 = 0.5."""
    per_rank = [aggregate(loss, mask, "bnpo", num_items_in_batch=4, num_processes=2)
                for loss, mask in ((RANK0_LOSS, RANK0_MASK), (RANK1_LOSS, RANK1_MASK))]
    assert [x.item() for x in per_rank] == approx([-3 / 2, 2 / 2])
    assert ((per_rank[0] + per_rank[1]) / 2).item() == approx(-0.25)
    one_process = aggregate(torch.cat([RANK0_LOSS, RANK1_LOSS]), torch.cat([RANK0_MASK, RANK1_MASK]), "bnpo")
    assert one_process.item() == approx(-0.25)
    local = [aggregate(loss, mask, "bnpo") for loss, mask in ((RANK0_LOSS, RANK0_MASK), (RANK1_LOSS, RANK1_MASK))]
    assert ((local[0] + local[1]) / 2).item() == approx(0.5)


def test_dapo_counts_the_whole_optimizer_step_over_all_processes():
    """Two ranks x two accumulated micro-batches; rank 0 holds the hand example above twice, rank 1 holds
    it once and then a micro-batch of one 2-token sequence with A = 0.5 (per-token [-0.5, -0.5], sum -1).
    Step tokens: 4 + 4 + 4 + 2 = 14, each micro-batch's normaliser 14 / 2. The trainer undoes the Trainer's
    division by the 2 accumulation steps for dapo, so each rank's gradient is the sum of its micro-batch
    losses, and DDP's mean over ranks gives (sum of all per-token losses) / 14 = (-1 - 1 - 1 - 1) / 14."""
    pair_loss, pair_mask = torch.cat([RANK0_LOSS, RANK1_LOSS]), torch.cat([RANK0_MASK, RANK1_MASK])
    short_loss, short_mask = torch.tensor([[-0.5, -0.5, 0.0]]), torch.tensor([[1, 1, 0]])
    ranks = [[(pair_loss, pair_mask), (pair_loss, pair_mask)], [(pair_loss, pair_mask), (short_loss, short_mask)]]
    step = sum(aggregate(loss, mask, "dapo", num_items_in_batch=14, num_processes=2)
               for micro_batches in ranks for loss, mask in micro_batches) / 2
    assert step.item() == approx(-4 / 14)
    everything = aggregate(torch.cat([pair_loss, pair_loss, pair_loss, short_loss]),
                           torch.cat([pair_mask, pair_mask, pair_mask, short_mask]), "dapo")
    assert everything.item() == approx(-4 / 14)


def test_rollout_is_weights_scale_the_gradient():
    logps, old = _at_ratio_one(requires_grad=True)
    w = torch.tensor([[0.5, 1.0, 2.0], [1.5, 7.0, 7.0]])
    loss, _ = policy_loss(logps, old, ADV, MASK, loss_type="bnpo", rollout_is_weights=w)
    loss.backward()
    assert values(logps.grad) == approx([-0.5 / 4, -1 / 4, -2 / 4, 2 * 1.5 / 4, 0, 0])
    assert loss.item() == approx((-0.5 - 1 - 2 + 2 * 1.5) / 4)


def test_clip_higher_bounds_and_clip_metrics():
    # six one-token sequences: (ratio, advantage)
    cases = [(1.5, 1.0), (1.25, 1.0), (0.5, -1.0), (0.5, 1.0), (1.5, -1.0), (0.85, -1.0)]
    ratios = torch.tensor([[r] for r, _ in cases])
    adv = torch.tensor([a for _, a in cases])
    old = torch.zeros(6, 1)
    logps = torch.log(ratios).requires_grad_(True)
    mask = torch.ones(6, 1)
    loss, metrics = policy_loss(logps, old, adv, mask, loss_type="bnpo", epsilon_low=0.2, epsilon_high=0.28)
    per_token = [
        -1.28,  # r=1.5, A>0: capped at 1 + 0.28
        -1.25,  # r=1.25, A>0: inside [0.8, 1.28] (a symmetric 0.2 would have clipped it)
        0.8,    # r=0.5, A<0: capped at 1 - 0.2
        -0.5,   # r=0.5, A>0: the min keeps the unclipped (pessimistic) term
        1.5,    # r=1.5, A<0: unclipped term is the min
        0.85,   # inside
    ]
    assert loss.item() == approx(sum(per_token) / 6)
    assert metrics["clip_ratio/low_mean"].item() == approx(1 / 6)
    assert metrics["clip_ratio/high_mean"].item() == approx(1 / 6)
    assert metrics["clip_ratio/region_mean"].item() == approx(2 / 6)
    loss.backward()
    # d(-r A)/d logp = -r A / 6 where unclipped; clipped tokens give no gradient
    assert values(logps.grad) == approx([0.0, -1.25 / 6, 0.0, -0.5 / 6, 1.5 / 6, 0.85 / 6])
    # symmetric default: epsilon_high=None means epsilon_high = epsilon_low
    _, sym = policy_loss(logps, old, adv, mask, loss_type="bnpo", epsilon_low=0.2)
    assert sym["clip_ratio/high_mean"].item() == approx(2 / 6)


def test_sequence_level_ratio_values_and_padding():
    old = torch.zeros(2, 3)
    # row 1 has garbage in its padding, which must not leak into anything
    logps = torch.tensor([[0.1, 0.2, 0.3], [0.4, 50.0, float("nan")]])
    ratio = importance_ratio(logps, old, MASK, "sequence")
    s0, s1 = math.exp(0.2), math.exp(0.4)
    assert values(ratio[MASK.bool()]) == approx([s0, s0, s0, s1])  # off the mask a value no sum reads
    assert values(importance_ratio(logps, old, MASK, "sequence_token")) == approx([s0, s0, s0, s1, 1.0, 1.0])
    assert values(importance_ratio(logps, old, MASK, "token"))[:4] == approx([math.exp(x) for x in (0.1, 0.2, 0.3, 0.4)])
    loss, metrics = policy_loss(logps, old, ADV, MASK, loss_type="grpo", epsilon_low=0.2, epsilon_high=0.28,
                                importance_sampling_level="sequence")
    # row 0: s0 = 1.221 < 1.28, A = 1 -> -s0; row 1: A = -2, min(-2 s1, -2 * 1.28) = -2 s1 -> +2 s1
    assert loss.item() == approx((-s0 + 2 * s1) / 2)
    assert metrics["clip_ratio/region_mean"].item() == 0.0


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo"])
def test_sequence_level_gradient_matches_gspo(loss_type):
    """Both sequence levels have the gradient of GSPO's objective with s_i = exp(mean log-ratio) while every token of
    a sequence carries the same multiplier (here: none)."""
    torch.manual_seed(0)
    old = -torch.rand(2, 3)
    base = old + 0.1 * torch.randn(2, 3)
    adv = torch.tensor([1.0, -2.0])
    kw = {"loss_type": loss_type, "epsilon_low": 0.2, "epsilon_high": 0.28, "max_completion_length": 3}

    ours = base.clone().requires_grad_(True)
    policy_loss(ours, old, adv, MASK, importance_sampling_level="sequence", **kw)[0].backward()
    token_form = base.clone().requires_grad_(True)
    policy_loss(token_form, old, adv, MASK, importance_sampling_level="sequence_token", **kw)[0].backward()
    assert values(token_form.grad) == approx(values(ours.grad))

    # reference: a (batch, 1) GSPO ratio with the gradient flowing through the mean, broadcast per token
    ref = base.clone().requires_grad_(True)
    lengths = MASK.sum(-1)
    s = torch.exp(((ref - old) * MASK).sum(-1) / lengths).unsqueeze(-1)
    a = adv.unsqueeze(-1)
    per_token = -torch.min(s * a, torch.clamp(s, 0.8, 1.28) * a).expand(2, 3)
    aggregate(per_token, MASK, loss_type, max_completion_length=3).backward()
    assert values(ours.grad) == approx(values(ref.grad))
    assert ours.grad[1, 1:].abs().sum() == 0


def ms_swift_sequence_loss(logps, old, advantages, mask, *, loss_type, token_mask=None, is_weights=None,
                           ref_logps=None, beta=0.0, max_completion_length=None):
    """ms-swift's `importance_sampling_level == 'sequence'` loss, re-implemented from
    swift/rlhf_trainers/grpo_trainer.py `_compute_loss_and_metrics`: the (B, 1) log weight
    sum(log_ratio * mask) / mask.sum(), coef_1 = exp of it, coef_2 = clamp(coef_1, 1 - 0.2, 1 + 0.28),
    per token -min(coef_1 * A, coef_2 * A) with A per token (B, T); then `* entropy_mask`, `+ beta * k3`,
    `* rollout_is_weights`, and the loss type's reduction over `completion_mask`."""
    mask = mask.float()
    log_w = (((logps - old) * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    coef_1 = torch.exp(log_w)
    coef_2 = torch.clamp(coef_1, 1 - 0.2, 1 + 0.28)
    adv = advantages if advantages.dim() == 2 else advantages.unsqueeze(-1).expand_as(logps)
    per_token = -torch.min(coef_1 * adv, coef_2 * adv)
    if token_mask is not None:
        per_token = per_token * token_mask
    if beta:
        d = torch.clamp(ref_logps - logps, min=-20, max=20)
        per_token = per_token + beta * torch.clamp(torch.exp(d) - d - 1, min=-10, max=10)
    if is_weights is not None:
        per_token = per_token * is_weights
    if loss_type == "grpo":
        return ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        return (per_token * mask).sum() / mask.sum().clamp(min=1.0)
    return (per_token * mask).sum() / (mask.shape[0] * max_completion_length)  # dr_grpo


@pytest.mark.parametrize("multiplier", ["none", "entropy_mask", "is_weights", "rollout_rs", "opd", "kl"])
@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo"])
def test_gspo_sequence_level_equals_ms_swifts_with_every_multiplier(loss_type, multiplier):
    """`--importance_sampling_level sequence` is ms-swift's: one ratio per sequence with the gradient through the
    mean of its log-ratios, so a token's gradient is the sequence's average of the per-token multipliers. The
    stop-gradient form (now `sequence_token`) gave each token its own: 96% off with a 50% entropy mask."""
    gen = torch.Generator().manual_seed(7)
    rows, width = 4, 6
    old = -torch.rand(rows, width, generator=gen) * 2
    base = old + 0.15 * torch.randn(rows, width, generator=gen)  # sequence ratios within and past the clip
    mask = torch.ones(rows, width, dtype=torch.bool)
    mask[1, 4:] = False
    mask[3, 2:] = False
    advantages = torch.tensor([1.0, -0.5, 2.0, -1.5])
    kw, theirs_kw = {}, {}
    if multiplier == "entropy_mask":  # half the tokens, by entropy
        keep = torch.rand(rows, width, generator=gen) < 0.5
        kw, theirs_kw = {"token_mask": keep}, {"token_mask": keep.float()}
    elif multiplier == "is_weights":  # token_truncate-like weights, and token_mask's zeros
        weights = torch.rand(rows, width, generator=gen) * 1.5 + 0.25
        weights[torch.rand(rows, width, generator=gen) < 0.3] = 0.0
        kw, theirs_kw = {"rollout_is_weights": weights}, {"is_weights": weights}
    elif multiplier == "rollout_rs":  # verl's: the rejected tokens leave the completion mask itself
        mask = mask & (torch.rand(rows, width, generator=gen) < 0.7)
    elif multiplier == "opd":  # OPD-RL: the teacher's log-ratio added per token
        advantages = advantages.unsqueeze(-1) + 0.5 * torch.randn(rows, width, generator=gen)
    elif multiplier == "kl":
        ref = old - 0.1 * torch.rand(rows, width, generator=gen)
        kw, theirs_kw = {"ref_logps": ref, "beta": 0.1}, {"ref_logps": ref, "beta": 0.1}
    ours = base.clone().requires_grad_(True)
    loss, _ = policy_loss(ours, old, advantages, mask, loss_type=loss_type, epsilon_low=0.2, epsilon_high=0.28,
                          importance_sampling_level="sequence", max_completion_length=width, **kw)
    loss.backward()
    ref_in = base.clone().requires_grad_(True)
    ref_loss = ms_swift_sequence_loss(ref_in, old, advantages, mask, loss_type=loss_type,
                                      max_completion_length=width, **theirs_kw)
    ref_loss.backward()
    assert loss.item() == approx(ref_loss.item())
    assert values(ours.grad) == approx(values(ref_in.grad))
    assert ours.grad[~mask].abs().sum() == 0


def test_sequence_token_level_is_the_stop_gradient_form():
    """GSPO-token gives each token the sequence ratio's value but its own multiplier: with an entropy mask that
    keeps one of a sequence's two tokens, only that token gets gradient (sequence level gives both half)."""
    logps = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    old = logps.detach().clone()  # ratio 1: the clip is idle
    mask = torch.ones(1, 2, dtype=torch.bool)
    token_mask = torch.tensor([[True, False]])
    loss, _ = policy_loss(logps, old, torch.tensor([1.0]), mask, loss_type="bnpo",
                          importance_sampling_level="sequence_token", token_mask=token_mask)
    loss.backward()
    assert logps.grad.tolist() == [[-0.5, 0.0]]  # -A * s / (2 tokens) on the kept token only
    seq = logps.detach().clone().requires_grad_(True)
    policy_loss(seq, old, torch.tensor([1.0]), mask, loss_type="bnpo", importance_sampling_level="sequence",
                token_mask=token_mask)[0].backward()
    assert seq.grad.tolist() == [[-0.25, -0.25]]  # d s / d logp_t = s / 2 for both, times the one kept term


def test_kl_penalty():
    logps, old = _at_ratio_one(requires_grad=True)
    ref = logps.detach() + LN2  # ref - logp = ln 2 on every token
    loss, metrics = policy_loss(logps, old, ADV, MASK, loss_type="bnpo", ref_logps=ref, beta=0.1)
    k3 = 2 - LN2 - 1  # exp(d) - d - 1
    assert values(k3_kl(logps, ref)) == approx([k3] * 6)
    assert metrics["kl"].item() == approx(k3)
    assert loss.item() == approx((-3 + 2) / 4 + 0.1 * k3)
    loss.backward()
    # d k3 / d logp = 1 - exp(ref - logp) = -1
    assert values(logps.grad) == approx([(-1 + 0.1 * -1) / 4] * 3 + [(2 + 0.1 * -1) / 4, 0, 0])
    with pytest.raises(ValueError, match="ref_logps"):
        policy_loss(logps, old, ADV, MASK, beta=0.1)


def test_policy_loss_argument_checks_and_per_token_advantages():
    logps, old = _at_ratio_one()
    with pytest.raises(ValueError, match="loss_type"):
        policy_loss(logps, old, ADV, MASK, loss_type="ppo")
    with pytest.raises(ValueError, match="max_completion_length"):
        policy_loss(logps, old, ADV, MASK, loss_type="dr_grpo")
    with pytest.raises(ValueError, match="importance_sampling_level"):
        policy_loss(logps, old, ADV, MASK, importance_sampling_level="word")
    per_seq, _ = policy_loss(logps, old, ADV, MASK)
    per_tok, _ = policy_loss(logps, old, ADV.unsqueeze(-1).expand(2, 3), MASK.bool())
    assert per_seq.item() == approx(per_tok.item())


# --------------------------------------------------------------------------- training-inference mismatch

def test_mismatch_metrics_equal_policies():
    torch.manual_seed(0)
    lp = -torch.rand(3, 4) * 3
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]])  # an empty row is ignored
    for mode in (None, "token_truncate", "token_mask", "sequence_truncate", "sequence_mask"):
        m = mismatch_metrics(lp, lp.clone(), mask, mode=mode)
        for key in ("kl", "k3_kl", "chi2_token", "chi2_seq", "log_ppl_diff", "log_ppl_abs_diff",
                    "log_ppl_diff_max", "log_ppl_diff_min", "clipped_frac"):
            assert m[key].item() == approx(0.0), (mode, key)
        for key in ("ess", "ess_unclamped", "ppl_ratio", "is_weight_mean"):
            assert m[key].item() == approx(1.0), (mode, key)
        assert m["training_ppl"].item() == approx(m["rollout_ppl"].item())


def test_mismatch_metrics_two_token_hand_case():
    # one sequence, two tokens: pi_train = (0.5, 0.3), pi_rollout = (0.25, 0.3) -> rho = (2, 1)
    train = torch.log(torch.tensor([[0.5, 0.3]]))
    rollout = torch.log(torch.tensor([[0.25, 0.3]]))
    mask = torch.ones(1, 2)
    m = mismatch_metrics(train, rollout, mask, mode="token_truncate", threshold=1.5)
    assert m["kl"].item() == approx((-LN2 + 0) / 2)             # K1 of KL(rollout || train): mean(rollout - train)
    assert m["k3_kl"].item() == approx(((2 - LN2 - 1) + 0) / 2)  # mean(rho - log rho - 1)
    assert m["training_ppl"].item() == approx(1 / math.sqrt(0.5 * 0.3))
    assert m["rollout_ppl"].item() == approx(1 / math.sqrt(0.25 * 0.3))
    assert m["training_log_ppl"].item() == approx(-(math.log(0.5) + math.log(0.3)) / 2)
    assert m["log_ppl_diff"].item() == approx(-LN2 / 2)
    assert m["log_ppl_abs_diff"].item() == approx(LN2 / 2)
    assert m["ppl_ratio"].item() == approx(1 / math.sqrt(2))
    assert m["ppl_ratio"].item() == approx(m["training_ppl"].item() / m["rollout_ppl"].item())
    assert m["chi2_token"].item() == approx((4 + 1) / 2 - 1)     # mean(rho^2) - 1 = 1.5
    assert m["chi2_seq"].item() == approx(2 - 1)                 # rho_geo = sqrt(2)
    # token_truncate at 1.5: weights (1.5, 1)
    assert m["is_weight_mean"].item() == approx(1.25)
    assert m["clipped_frac"].item() == approx(0.5)
    # ess: weights (1.5, 1) / mean 1.25 = (1.2, 0.8); 1 / mean(1.44, 0.64) = 1 / 1.04
    assert m["ess"].item() == approx(1 / 1.04)  # no weight outside [1/1.5, 1.5]: clamped or not alike
    assert m["ess_unclamped"].item() == approx(1 / 1.04)
    raw = mismatch_metrics(train, rollout, mask, threshold=3.0)  # diagnose only: raw rho = (2, 1)
    assert raw["is_weight_mean"].item() == approx(1.5)
    assert raw["ess"].item() == approx(1 / ((16 / 9 + 4 / 9) / 2))  # (4/3, 2/3) -> 0.9, inside [1/3, 3]
    assert raw["clipped_frac"].item() == 0.0


def test_truncate_vs_mask_at_token_level():
    # token ratios exactly 1, 2 and 0.5 (log-ratios 0, ln 2, -ln 2); threshold 1
    train = torch.tensor([[0.0, LN2, -LN2]])
    rollout = torch.zeros(1, 3)
    mask = torch.ones(1, 3)
    w, kept, m = rollout_is_weights(train, rollout, mask, mode="token_truncate", threshold=1.0)
    assert values(w) == approx([1.0, 1.0, 0.5])   # min(rho, 1): the ratio exactly at the threshold is kept as is
    assert kept.tolist() == [[True, True, True]]
    assert m["clipped_frac"].item() == approx(1 / 3)
    w, kept, m = rollout_is_weights(train, rollout, mask, mode="token_mask", threshold=1.0)
    assert values(w) == approx([1.0, 0.0, 0.5])   # rho > 1 dropped, rho == 1 kept, the rest keep their weight
    assert kept.tolist() == [[True, False, True]]
    assert m["clipped_frac"].item() == approx(1 / 3)
    assert m["is_weight_mean"].item() == approx(1.5 / 3)
    assert not w.requires_grad


def test_truncate_vs_mask_at_sequence_level():
    # sequence 0: rho = (2, 1) -> geometric mean sqrt 2 = 1.414; sequence 1: rho = (1, 1) plus padding
    train = torch.tensor([[LN2, 0.0], [0.0, 123.0]])
    rollout = torch.zeros(2, 2)
    mask = torch.tensor([[1, 1], [1, 0]])
    w, kept, m = rollout_is_weights(train, rollout, mask, mode="sequence_truncate", threshold=1.5)
    r = math.sqrt(2)
    assert values(w) == approx([r, r, 1.0, 1.0])
    assert m["clipped_frac"].item() == 0.0
    w, kept, m = rollout_is_weights(train, rollout, mask, mode="sequence_truncate", threshold=1.4)
    assert values(w) == approx([1.4, 1.4, 1.0, 1.0])
    assert m["clipped_frac"].item() == approx(0.5)
    w, kept, m = rollout_is_weights(train, rollout, mask, mode="sequence_mask", threshold=1.4)
    assert values(w) == approx([0.0, 0.0, 1.0, 1.0])
    assert kept.tolist() == [[False, False], [True, False]]
    assert m["clipped_frac"].item() == approx(0.5)
    # kept sequences carry their token ratios (ms-swift), not the sequence ratio
    w, _, _ = rollout_is_weights(train, rollout, mask, mode="sequence_mask", threshold=1.5)
    assert values(w) == approx([2.0, 1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="mode"):
        rollout_is_weights(train, rollout, mask, mode="clip", threshold=2.0)


def test_effective_sample_size():
    mask = torch.ones(1, 4)
    assert effective_sample_size(torch.ones(1, 4), mask).item() == approx(1.0)
    # one weight carries everything: ESS -> 1/n
    assert effective_sample_size(torch.tensor([[1.0, 0.0, 0.0, 0.0]]), mask).item() == approx(0.25)
    # (sum w)^2 / (n sum w^2) = 36 / (4 * 14)
    assert effective_sample_size(torch.tensor([[1.0, 2.0, 3.0, 0.0]]), mask).item() == approx(36 / 56)
    # every weight masked to zero: no sample counts; an empty mask says nothing (1)
    assert effective_sample_size(torch.zeros(1, 4), mask).item() == 0.0
    assert effective_sample_size(torch.ones(1, 4), torch.zeros(1, 4)).item() == 1.0
    # scale-free and exact at tiny scales (no epsilon): (8e-7, 8e-7, 1.6e-6, 0) -> (4e-6)^2 / ... = 16 / 24
    tiny = torch.tensor([[8e-7, 8e-7, 1.6e-6, 0.0]])
    assert effective_sample_size(tiny, mask).item() == approx(16 / 24, rel=1e-9)


def test_clamped_ess_is_ms_swifts_and_has_a_floor():
    from swiftlike.rl.core.correction import clamped_effective_sample_size
    mask = torch.ones(1, 5)
    # one weight in five at 100, the rest at 0.001: unclamped ESS is ~1/5; clamped to [0.5, 2] the weights
    # become (2, .5, .5, .5, .5): (4)^2 / (5 * 5) = 0.64, the floor 4t^2 / (1 + t^2)^2 for t = 2
    w = torch.tensor([[100.0, 1e-3, 1e-3, 1e-3, 1e-3]])
    assert effective_sample_size(w, mask).item() == approx(100.004 ** 2 / (5 * (1e4 + 4e-6)), rel=1e-9)
    assert clamped_effective_sample_size(w, mask, 2.0).item() == approx(0.64, rel=1e-6)
    assert 4 * 4 / (1 + 4) ** 2 == approx(0.64)


def test_token_mask_ess_sees_what_the_clamp_hid():
    # rho = (1e-6, 1e-6, 5, 1): token_mask at threshold 2 drops the 5; final weights (1e-6, 1e-6, 0, 1)
    train = torch.log(torch.tensor([[1e-6, 1e-6, 5.0, 1.0]]))
    rollout = torch.zeros(1, 4)
    mask = torch.ones(1, 4)
    _, _, m = rollout_is_weights(train, rollout, mask, mode="token_mask", threshold=2.0)
    w = [1e-6, 1e-6, 0.0, 1.0]
    assert m["ess_unclamped"].item() == approx(sum(w) ** 2 / (4 * sum(x * x for x in w)), rel=1e-5)  # ~0.25
    # ms-swift's clamp lifts (1e-6, 1e-6, 0) to 0.5: (0.5, 0.5, 0.5, 1) -> 6.25 / (4 * 1.75)
    assert m["ess"].item() == approx(6.25 / 7.0, rel=1e-5)
    assert m["is_weight_mean"].item() == approx(sum(w) / 4, rel=1e-4)


def ms_swift_ess(weights: torch.Tensor, mask: torch.Tensor, threshold: float) -> float:
    """ms-swift's `ess`, re-implemented from swift/rlhf_trainers/grpo_trainer.py `_compute_is_correction_metrics`:
    the weights clamped to [1/threshold, threshold], normalised by their masked mean (+1e-8), and
    1 / masked_mean(normalised^2) clamped below at 1e-10; masked_mean is (x * mask).sum() / mask.sum()."""
    mask = mask.float()
    clamped = weights.clamp(min=1.0 / threshold, max=threshold)
    mean = (clamped * mask).sum() / mask.sum().clamp(min=1.0)
    normalised = clamped / (mean + 1e-8)
    return float(1.0 / ((normalised.square() * mask).sum() / mask.sum().clamp(min=1.0)).clamp(min=1e-10))


@pytest.mark.parametrize("mode", [None, "token_truncate", "token_mask", "sequence_truncate", "sequence_mask"])
def test_logged_ess_is_ms_swifts_and_the_unclamped_one_has_a_name_of_its_own(mode):
    """`rollout_correction/ess` carries ms-swift's name, so it is ms-swift's quantity (weights clamped to
    [1/t, t]); Kish's ESS of the weights as they are is `ess_unclamped`. Was: the unclamped one under `ess`."""
    gen = torch.Generator().manual_seed(3)
    train = -torch.rand(4, 6, generator=gen) * 2
    rollout = train + torch.randn(4, 6, generator=gen)  # ratios from ~0.1 to ~10: the clamp at 2 bites
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[2, 3:] = False
    weights, _, _ = (rollout_is_weights(train, rollout, mask, mode=mode, threshold=2.0) if mode
                     else (torch.exp(train - rollout), None, None))
    m = mismatch_metrics(train, rollout, mask, mode=mode, threshold=2.0)
    assert m["ess"].item() == approx(ms_swift_ess(weights.double(), mask, 2.0))
    w = weights.double()[mask]
    assert m["ess_unclamped"].item() == approx(float(w.sum() ** 2 / (w.numel() * w.square().sum())))
    if ((w < 0.5) | (w > 2.0)).any():  # where the clamp bites the two differ (not in sequence_truncate here)
        assert m["ess"].item() != approx(m["ess_unclamped"].item())


def test_off_policy_sequence_mask():
    old = torch.zeros(4, 2)
    # mean(old - logp) per row: 0.5, 0.5, 0.2, 0.3 (row 3 exactly at delta, second token is padding)
    logps = torch.tensor([[-0.4, -0.6], [-0.5, -0.5], [-0.2, -0.2], [-0.3, -9.0]])
    mask = torch.tensor([[1, 1], [1, 1], [1, 1], [1, 0]])
    adv = torch.tensor([-1.0, 1.0, -1.0, -1.0])
    keep = off_policy_sequence_mask(logps, old, mask, adv, delta=0.3)
    # dropped only when the policy drifted away by more than delta AND the advantage is negative
    assert keep.tolist() == [False, True, True, True]
    keep_tok = off_policy_sequence_mask(logps, old, mask, adv.unsqueeze(-1).expand(4, 2), delta=0.3)
    assert keep_tok.tolist() == keep.tolist()


# --------------------------------------------------------------------------- vLLM sampling distribution

def test_filters_off_is_plain_log_softmax():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 7)
    for top_k in (-1, 0, 7, 100):
        out = apply_temperature_and_filter(logits, 0.7, top_k, 1.0)
        assert torch.allclose(out, torch.log_softmax(logits / 0.7, dim=-1))
    # greedy (temperature ~ 0): what vLLM reports for an all-greedy batch, unscaled and unfiltered
    assert torch.allclose(apply_temperature_and_filter(logits, 0.0, 2, 0.5), torch.log_softmax(logits, dim=-1))


def test_top_k_renormalises_over_kept_tokens():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    out = apply_temperature_and_filter(logits, 1.0, top_k=2)
    z = math.log(math.exp(2) + math.exp(1))
    assert values(out[:2]) == approx([2 - z, 1 - z])
    assert out[2:].tolist() == [float("-inf")] * 2
    # temperature first: same kept set (top-k is order-preserving) but a flatter distribution
    out = apply_temperature_and_filter(logits, 2.0, top_k=2)
    z = math.log(math.exp(1) + math.exp(0.5))
    assert values(out[:2]) == approx([1 - z, 0.5 - z])
    # ties with the k-th value are all kept (vLLM's PyTorch path)
    out = apply_temperature_and_filter(torch.tensor([1.0, 1.0, 1.0, 0.0]), 1.0, top_k=2)
    assert values(out[:3]) == approx([math.log(1 / 3)] * 3) and out[3].item() == float("-inf")


def test_top_p_keeps_smallest_set_reaching_p_after_temperature():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = torch.log(probs)
    # T = 1: 0.5 < 0.7 <= 0.5 + 0.3, so the top two survive, renormalised to (0.625, 0.375)
    out = apply_temperature_and_filter(logits, 1.0, top_p=0.7)
    assert values(out[:2]) == approx([math.log(0.625), math.log(0.375)])
    assert out[2:].tolist() == [float("-inf")] * 2
    # T = 2 first flattens to p ~ sqrt(probs): (0.379, 0.294, 0.208, 0.120); it takes three tokens to reach 0.7
    flat = [math.sqrt(p) for p in probs.tolist()]
    kept = flat[:3]
    out = apply_temperature_and_filter(logits, 2.0, top_p=0.7)
    assert values(out[:3]) == approx([math.log(p / sum(kept)) for p in kept])
    assert out[3].item() == float("-inf")
    # top-k first, then top-p on the renormalised top-k distribution: (0.526, 0.316, 0.158) reaches 0.83
    # with two tokens (on the original probabilities it would take three)
    out = apply_temperature_and_filter(logits, 1.0, top_k=3, top_p=0.83)
    assert values(out[:2]) == approx([math.log(0.625), math.log(0.375)])
    # top_p tiny: only the most likely token survives
    out = apply_temperature_and_filter(logits, 1.0, top_p=1e-6)
    assert out[0].item() == approx(0.0) and torch.isinf(out[1:]).all()
    with pytest.raises(ValueError, match="top_p"):
        apply_temperature_and_filter(logits, 1.0, top_p=0.0)


def test_selected_logps_inside_kept_set_are_finite_and_differentiable():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 11, requires_grad=True)
    full = apply_temperature_and_filter(logits, 0.8, top_k=4, top_p=0.9)
    kept = torch.isfinite(full)
    assert (kept.sum(-1) >= 1).all() and (kept.sum(-1) <= 4).all()
    assert torch.allclose(full.exp().sum(-1), torch.ones(2, 5))
    chosen = torch.multinomial(full.detach().exp().reshape(-1, 11), 1).reshape(2, 5)  # sampled like vLLM
    out = selected_logps(logits, chosen, 0.8, 4, 0.9)
    assert torch.isfinite(out.logps).all() and not out.forced.any()
    assert torch.equal(out.logps, full.gather(-1, chosen.unsqueeze(-1)).squeeze(-1))
    out.logps.sum().backward()
    assert torch.isfinite(logits.grad).all()
    assert (logits.grad[~kept] == 0).all()  # filtered-out tokens get no gradient


def test_sampled_token_outside_the_trainers_set_is_kept_and_counted():
    # logits (2, 1, 0, -1), top_k 2: the trainer keeps {0, 1}. The engine (whose logits differed a little)
    # sampled token 2: the set is widened to {0, 1, 2} and renormalised there, not -inf.
    logits = torch.tensor([[[2.0, 1.0, 0.0, -1.0], [2.0, 1.0, 0.0, -1.0]]], requires_grad=True)
    ids = torch.tensor([[2, 0]])
    out = selected_logps(logits, ids, 1.0, top_k=2, with_unfiltered=True, with_entropy=True)
    z3 = math.log(math.exp(2) + math.exp(1) + 1)
    z2 = math.log(math.exp(2) + math.exp(1))
    assert out.logps[0, 0].item() == approx(0.0 - z3, abs=1e-6)
    assert out.logps[0, 1].item() == approx(2.0 - z2, abs=1e-6)  # inside the set: the exact vLLM value
    assert out.forced.tolist() == [[True, False]]
    z4 = math.log(math.exp(2) + math.exp(1) + 1 + math.exp(-1))
    assert out.unfiltered[0].tolist() == approx([0.0 - z4, 2.0 - z4], abs=1e-6)
    assert torch.isfinite(out.entropy).all()
    (out.logps.sum() + out.unfiltered.sum()).backward()
    assert torch.isfinite(logits.grad).all()
    # top_p 0.5 over p = softmax(2, 1, 0, -1) = (.64, .24, .09, .03): only token 0 is kept; token 1 forced in
    out = selected_logps(logits.detach()[:, :1], torch.tensor([[1]]), 1.0, top_p=0.5)
    assert out.logps.item() == approx(1.0 - z2, abs=1e-6) and out.forced.item()


def test_no_filter_means_nothing_forced_and_unfiltered_equals_logps():
    torch.manual_seed(1)
    logits = torch.randn(3, 7)
    ids = torch.tensor([0, 3, 6])
    out = selected_logps(logits, ids, 0.7, with_unfiltered=True)
    assert not out.forced.any()
    assert torch.equal(out.logps, out.unfiltered)
    assert torch.allclose(out.logps, (logits / 0.7).log_softmax(-1).gather(-1, ids[:, None]).squeeze(-1))


def test_reference_kl_with_a_token_outside_the_references_set_is_finite_and_unsaturated():
    # Policy logits (0, 0, 0, 0): uniform. Reference logits (3, 2, 0, 0): with top_k 2 its set is {0, 1},
    # yet the policy sampled token 2. The KL uses both models' temperature-scaled, unfiltered log-probs.
    policy = torch.zeros(1, 1, 4, requires_grad=True)
    reference = torch.tensor([[[3.0, 2.0, 0.0, 0.0]]])
    ids = torch.tensor([[2]])
    pol = selected_logps(policy, ids, 1.0, top_k=2, with_unfiltered=True)
    ref = selected_logps(reference, ids, 1.0, top_k=2, with_unfiltered=True)
    ref_lp = math.log(1 / (math.exp(3) + math.exp(2) + 2))
    assert ref.unfiltered.item() == approx(ref_lp, abs=1e-6)
    d = ref_lp - math.log(0.25)
    expected = math.exp(d) - d - 1  # 1.30 nats: far below the clamp at 10
    mask = torch.ones(1, 1, dtype=torch.bool)
    loss, metrics = policy_loss(pol.logps, pol.logps.detach(), torch.zeros(1), mask, beta=1.0,
                                ref_logps=ref.unfiltered, kl_logps=pol.unfiltered)
    assert metrics["kl"].item() == approx(expected, abs=1e-5) and expected < 10
    loss.backward()
    assert torch.isfinite(policy.grad).all() and policy.grad.abs().sum() > 0  # the KL still pulls


def test_sampling_entropy_of_known_distributions():
    from swiftlike.rl.core.sampling import selected_logps
    # uniform over 4 tokens: entropy ln 4; with top_k 2 the kept two are uniform: ln 2, no NaN from -inf
    logits = torch.zeros(1, 1, 4)
    h = selected_logps(logits, torch.tensor([[0]]), with_entropy=True).entropy
    assert torch.allclose(h, torch.tensor([[math.log(4)]]))
    logits = torch.tensor([[[2.0, 2.0, 0.0, -1.0]]])
    h = selected_logps(logits, torch.tensor([[0]]), top_k=2, with_entropy=True).entropy
    assert torch.allclose(h, torch.tensor([[math.log(2)]]))
    # p = (0.75, 0.25) after temperature 0.5 on logits (ln 3 / 2, 0): H = -(.75 ln .75 + .25 ln .25)
    logits = torch.tensor([[[math.log(3) / 2, 0.0]]])
    h = selected_logps(logits, torch.tensor([[1]]), temperature=0.5, with_entropy=True).entropy
    assert torch.allclose(h, torch.tensor([[-(0.75 * math.log(0.75) + 0.25 * math.log(0.25))]]))
