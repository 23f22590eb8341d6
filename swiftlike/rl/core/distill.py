"""The GKD divergence: generalized Jensen-Shannon between teacher and student next-token distributions.

Pure functions of logits (or of the teacher's top-k log-probs, which is all a served teacher sends), with
the prompt masked out at the token level. Written here rather than taken from TRL's
`GKDTrainer.generalized_jsd_loss` because that one needs the teacher's full logits, which a served teacher
does not send; the full-vocabulary path below agrees with TRL's to 1e-6 (tests/e2e/test_gkd.py).

Definitions (Agarwal et al. 2023, eq. 1, as TRL and ms-swift compute them), with P the teacher, Q the
student, both softmaxes of the logits divided by `temperature`, and M = beta * P + (1 - beta) * Q:

    JSD_beta(P || Q) = beta * KL(P || M) + (1 - beta) * KL(Q || M)

    beta = 0: KL(P || Q), forward KL (mass-covering); beta = 1: KL(Q || P), reverse KL (mode-seeking).

The loss is the mean over the unmasked (completion) tokens of the micro-batch, as ms-swift reduces it.

Top-k (`--gkd_logits_topk K`): both distributions are restricted to the teacher's K most likely tokens at
each position and renormalised over those K. The student's probability outside the teacher's top-k is
therefore dropped, not lumped into an extra "rest" bucket: the served teacher reports nothing about the
rest, and renormalising both sides is the rule ms-swift applies (so a run matches ms-swift's figures). The
top-k set is the same at any temperature (dividing by a positive constant keeps the order), and a served
teacher's log-probs differ from its logits by a per-position constant, which the renormalisation removes,
so the served and the in-process teacher give the same loss.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def _jsd_from_logps(student_logps: torch.Tensor, teacher_logps: torch.Tensor, beta: float) -> torch.Tensor:
    """Per-position generalized JSD of two normalised log-distributions over the last dimension."""
    if beta == 0:
        return (teacher_logps.exp() * (teacher_logps - student_logps)).sum(-1)
    if beta == 1:
        return (student_logps.exp() * (student_logps - teacher_logps)).sum(-1)
    mixture = torch.logaddexp(student_logps + math.log1p(-beta), teacher_logps + math.log(beta))
    kl_teacher = (teacher_logps.exp() * (teacher_logps - mixture)).sum(-1)
    kl_student = (student_logps.exp() * (student_logps - mixture)).sum(-1)
    return beta * kl_teacher + (1 - beta) * kl_student


def masked_mean(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if mask is None:  # an empty selection (no completion token) is 0, not the NaN of an empty mean
        return values.sum() / max(values.numel(), 1)
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1)


def _check_beta(beta: float) -> None:
    if not 0 <= beta <= 1:
        raise ValueError(f"beta must be in [0, 1], got {beta}")


def generalized_jsd(student_logits: torch.Tensor, teacher_logits: torch.Tensor, mask: torch.Tensor | None = None,
                    beta: float = 0.5, temperature: float = 1.0) -> torch.Tensor:
    """Mean generalized JSD over the full vocabulary at the positions where `mask` is true.

    student_logits, teacher_logits: (..., vocab), already aligned (position t predicts token t+1);
    mask: (...) booleans, true on completion tokens.
    """
    _check_beta(beta)
    student = F.log_softmax(student_logits.float() / temperature, dim=-1)
    teacher = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
    return masked_mean(_jsd_from_logps(student, teacher, beta), mask)


def teacher_topk(teacher_logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs, token ids) of the teacher's k most likely tokens at each position, at temperature 1: what a
    served teacher sends for `prompt_logprobs=k`."""
    logps = F.log_softmax(teacher_logits.float(), dim=-1)
    values, ids = logps.topk(k, dim=-1)
    return values, ids


def topk_generalized_jsd(student_logits: torch.Tensor, teacher_topk_logps: torch.Tensor,
                         teacher_topk_ids: torch.Tensor, mask: torch.Tensor | None = None, beta: float = 0.5,
                         temperature: float = 1.0) -> torch.Tensor:
    """Mean generalized JSD over the teacher's top-k tokens, both sides renormalised over them (module doc).

    teacher_topk_logps / teacher_topk_ids: (..., k), the teacher's log-probs (at temperature 1, or any
    per-position offset of them) and the ids they belong to.
    """
    _check_beta(beta)
    student = F.log_softmax(torch.gather(student_logits.float() / temperature, -1, teacher_topk_ids), dim=-1)
    teacher = F.log_softmax(teacher_topk_logps.float() / temperature, dim=-1)
    return masked_mean(_jsd_from_logps(student, teacher, beta), mask)


def forward_kl_per_token(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                         mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean KL(teacher || student) per completion token at temperature 1: the demo's held-out distance."""
    return generalized_jsd(student_logits, teacher_logits, mask, beta=0.0, temperature=1.0)
