"""Multi-turn GKD: the divergence counts the ids the student sampled only (loss mask 1), on hand-computed values;
the packed batch carries each trajectory's mask in the order the logits come; a trajectory whose environment
raised counts nothing; and the placements multi-turn GKD and Ray take or refuse."""
import math

import pytest
import torch
from model_ids import TINY

from swiftlike.arguments import RlhfArguments
from swiftlike.rl.core.distill import teacher_topk
from swiftlike.rl.core.options import GkdOptions, TeacherOptions
from swiftlike.rl.online.gkd_trainer import gkd_loss, micro_batch_loss, trajectory_loss_mask
from swiftlike.rl.online.rollout_worker import Rollout
from swiftlike.rl.online.teacher import PackedSequences, TeacherOutput


def logits_of(*probs: float) -> torch.Tensor:
    return torch.tensor([math.log(p) for p in probs])


# One trajectory: prompt [5, 6], then sampled 7, an inserted tool result 8 9, sampled 10. Its completion tokens
# are predicted at flat positions 1..4; the mask is 1, 0, 0, 1.
TRAJECTORY = ([5, 6], [7, 8, 9, 10])
MASK = [1, 0, 0, 1]
# student and teacher distributions at the four completion positions
STUDENT = torch.stack([logits_of(0.5, 0.5), logits_of(0.3, 0.7), logits_of(0.9, 0.1), logits_of(0.6, 0.4)])
TEACHER = torch.stack([logits_of(0.8, 0.2), logits_of(0.5, 0.5), logits_of(0.2, 0.8), logits_of(0.1, 0.9)])


def forward_kl(p: tuple[float, float], q: tuple[float, float]) -> float:
    return sum(pi * math.log(pi / qi) for pi, qi in zip(p, q))


def test_packed_trajectory_carries_its_loss_mask_in_logit_order():
    batch = PackedSequences.pack([([1, 2, 3], [4]), TRAJECTORY], [None, MASK])
    assert batch.predict_at.tolist() == [2, 5, 6, 7, 8]
    assert batch.targets.tolist() == [4, 7, 8, 9, 10]
    assert batch.loss_mask.tolist() == [True, True, False, False, True]  # a one-turn answer: all sampled
    assert PackedSequences.pack([TRAJECTORY], [None]).loss_mask is None
    assert PackedSequences.pack([TRAJECTORY]).loss_mask is None
    with pytest.raises(ValueError, match="a loss mask has 3 entries for a completion of 4 ids"):
        PackedSequences.pack([TRAJECTORY], [[1, 0, 1]])
    with pytest.raises(ValueError, match="1 loss masks for 2 sequences"):
        PackedSequences.pack([TRAJECTORY, TRAJECTORY], [MASK])


def test_divergence_counts_the_sampled_tokens_only_by_hand():
    """beta 0 (forward KL): the mean over positions 0 and 3 of KL(teacher || student), by hand; the teacher's
    logits where the tool result is predicted (positions 1 and 2) change nothing, its logits at a sampled
    position do."""
    batch = PackedSequences.pack([TRAJECTORY], [MASK])
    hand = (forward_kl((0.8, 0.2), (0.5, 0.5)) + forward_kl((0.1, 0.9), (0.6, 0.4))) / 2
    assert hand == pytest.approx((0.192745 + 0.550660) / 2, abs=1e-6)
    loss = gkd_loss(STUDENT, TeacherOutput(logits=TEACHER), batch.loss_mask, beta=0.0, temperature=1.0)
    assert float(loss) == pytest.approx(hand, abs=1e-6)
    inserted_changed = TEACHER.clone()
    inserted_changed[1:3] = torch.stack([logits_of(0.99, 0.01), logits_of(0.01, 0.99)])
    assert float(gkd_loss(STUDENT, TeacherOutput(logits=inserted_changed), batch.loss_mask, 0.0, 1.0)) == \
        pytest.approx(hand, abs=1e-6)
    sampled_changed = TEACHER.clone()
    sampled_changed[3] = logits_of(0.5, 0.5)
    moved = float(gkd_loss(STUDENT, TeacherOutput(logits=sampled_changed), batch.loss_mask, 0.0, 1.0))
    assert moved == pytest.approx((forward_kl((0.8, 0.2), (0.5, 0.5)) + forward_kl((0.5, 0.5), (0.6, 0.4))) / 2,
                                  abs=1e-6)
    # without the mask the tool result's positions would count: a different, larger value
    unmasked = sum(forward_kl(p, q) for p, q in [((0.8, 0.2), (0.5, 0.5)), ((0.5, 0.5), (0.3, 0.7)),
                                                 ((0.2, 0.8), (0.9, 0.1)), ((0.1, 0.9), (0.6, 0.4))]) / 4
    assert float(gkd_loss(STUDENT, TeacherOutput(logits=TEACHER), None, 0.0, 1.0)) == pytest.approx(unmasked, abs=1e-6)
    assert unmasked > hand + 0.1


def test_top_k_teacher_and_the_gradient_respect_the_mask():
    """A served teacher's top-k path too; and the student's logits at inserted positions get no gradient."""
    batch = PackedSequences.pack([TRAJECTORY], [MASK])
    topk = TeacherOutput(*(None, *teacher_topk(TEACHER, 2)))
    student = STUDENT.clone().requires_grad_(True)
    loss = gkd_loss(student, topk, batch.loss_mask, beta=0.5, temperature=1.0)
    full = gkd_loss(STUDENT, TeacherOutput(logits=TEACHER), batch.loss_mask, beta=0.5, temperature=1.0)
    assert float(loss.detach()) == pytest.approx(float(full), abs=1e-6)  # k = vocab: the same distributions
    loss.backward()
    assert student.grad[[1, 2]].abs().max() == 0 and student.grad[[0, 3]].abs().min() > 0


def test_the_training_loss_and_its_sft_term_skip_inserted_ids():
    """What compute_loss trains on: jsd + sft_alpha x NLL of the sampled targets, each a mean over positions 0
    and 3; no logit at positions 1-2 (student's or teacher's) moves the loss or the logged teacher_kl."""
    batch = PackedSequences.pack([TRAJECTORY], [MASK])
    # a 12-token vocabulary, so the targets 7 and 10 have a logit; the student is uniform at sampled positions
    student, teacher = torch.zeros(4, 12), torch.zeros(4, 12)
    teacher[0, 7], teacher[3, 10] = math.log(3.0), math.log(5.0)
    options = GkdOptions(beta=0.0, sft_alpha=0.5, teacher=TeacherOptions(teacher_model=TINY))
    loss, metrics = micro_batch_loss(student, batch, TeacherOutput(logits=teacher), options, temperature=1.0)

    def kl_to_uniform(mass: float) -> float:  # KL(teacher || uniform) where one of 12 logits has weight `mass`
        z = 11 + mass
        return mass / z * math.log(12 * mass / z) + 11 / z * math.log(12 / z)
    jsd = (kl_to_uniform(3.0) + kl_to_uniform(5.0)) / 2
    assert float(metrics["jsd"]) == pytest.approx(jsd, abs=1e-6) == float(metrics["teacher_kl"])
    assert float(metrics["sft_loss"]) == pytest.approx(math.log(12), abs=1e-6)
    assert float(loss.detach()) == pytest.approx(jsd + 0.5 * math.log(12), abs=1e-6)
    student[1:3], teacher[1:3] = torch.randn(2, 12) * 5, torch.randn(2, 12) * 5
    again, metrics = micro_batch_loss(student, batch, TeacherOutput(logits=teacher), options, temperature=1.0)
    assert float(again.detach()) == pytest.approx(float(loss.detach()), abs=1e-6)
    assert float(metrics["teacher_kl"]) == pytest.approx(jsd, abs=1e-6)


def test_a_trajectory_whose_environment_raised_counts_nothing():
    def rollout(**kw):
        return Rollout([1], [2, 3, 4], "", "stop", [0.0] * 3, loss_mask=[1, 0, 1], **kw)
    assert trajectory_loss_mask(rollout()) == [1, 0, 1]
    assert trajectory_loss_mask(rollout(env_error="boom")) == [0, 0, 0]
    assert trajectory_loss_mask(Rollout([1], [2, 3], "", "stop", None)) == [1, 1]


def gkd(**kw):
    return RlhfArguments(rlhf_type="gkd", model=TINY, dataset=["d"], teacher_model=TINY, **kw)


def grpo(**kw):
    return RlhfArguments(rlhf_type="grpo", model=TINY, dataset=["d"], reward_funcs=["format"], num_generations=2,
                         per_device_train_batch_size=2, **kw)


def test_multi_turn_gkd_and_ray_placements():
    assert gkd(multi_turn_scheduler="math_tip_trick", lmbda=1.0).multi_turn_options().enabled
    with pytest.raises(ValueError, match="--multi_turn_scheduler with --lmbda 0: the student never samples"):
        gkd(multi_turn_scheduler="math_tip_trick", lmbda=0.0)
    # Ray: every placement runs multi-turn (colocated on the train role, or on separate rollout replicas)
    for placement in (dict(use_vllm=True, vllm_mode="colocate"), dict(use_vllm=False),
                      dict(use_vllm=True, vllm_mode="server")):
        assert grpo(multi_turn_scheduler="tool_call_scheduler", use_ray=True, **placement).multi_turn_options().enabled
