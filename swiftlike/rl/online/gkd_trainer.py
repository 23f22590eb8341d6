"""GKD on transformers' Trainer: each micro-batch is the student's own samples (probability --lmbda) or the
dataset's answers, scored by the teacher, and the loss is the generalized JSD between the two (`distill.py`).

Why not TRL's `GKDTrainer`: it generates with `model.generate` only and keeps the teacher in-process. Here the
student samples through the same rollout worker as GRPO (the training model, a colocated vLLM engine, or
`swiftlike rollout` servers, with merged or LoRA-only weight sync and policy versions), and the teacher is
in-process, the student with its adapter disabled, or a server answering top-k prompt log-probs (`teacher.py`).
The divergence itself agrees with TRL's `generalized_jsd_loss` (tests/e2e/test_gkd.py).

Multi-turn (--multi_turn_scheduler): an on-policy micro-batch is the student's trajectories, rolled out by the
scheduler loop GRPO uses. The teacher scores each trajectory's ids whole, so it sees the tool results and
observations as context, and the divergence (and the --sft_alpha term) counts only the ids the student sampled
(loss mask 1), the mean over those: the teacher's distribution where a tool result follows says nothing about
the student.

With --seq_kd the off-policy micro-batches are the teacher's own samples instead of the dataset's answers
(sequence-level KD, as TRL's and ms-swift's): the teacher generates them (`teacher.generate`, on each placement),
then scores them as it scores any sequence.

On-policy or not is drawn once per micro-batch from a generator seeded with --seed, the same draw on every
process, so all ranks generate (and sync) together.
"""
from __future__ import annotations

import random
import time
import torch

from ...train.outputs import PLOTTED
from ..core.distill import generalized_jsd, masked_mean, topk_generalized_jsd
from ..core.options import GkdOptions, PolicyTrainingOptions, SamplingOptions
from .rollout_worker import Rollout, RolloutWorker
from .distributed import reduce_metrics
from .online_trainer import RolloutTrainer
from .teacher import PackedSequences, TeacherOutput, TeacherSampling, completion_logits
from .trajectories import multi_turn_metrics

# The curves a GKD run draws into images/.
GKD_PLOTTED = (*PLOTTED, "jsd", "teacher_kl", "eval_teacher_kl", "sft_loss", "on_policy", "completions/mean_length",
               "multi_turn/turns_mean", "timing/*")


def prompt_only(row: dict) -> dict:
    """The row as the student's rollout prompt: its messages up to the last user turn."""
    messages = list(row["messages"])
    while messages and messages[-1].get("role") == "assistant":
        messages.pop()
    return {**row, "messages": messages}


def trajectory_loss_mask(rollout: Rollout) -> list[int]:
    """What the divergence counts of a trajectory: its sampled ids; none at all when its environment raised
    (the trajectory is dropped, as GRPO drops it, and its failure is counted in multi_turn/env_errors)."""
    if rollout.env_error is not None:
        return [0] * len(rollout.completion_ids)
    return list(rollout.loss_mask) if rollout.loss_mask is not None else [1] * len(rollout.completion_ids)


def teacher_kl(student_logits: torch.Tensor, teacher: TeacherOutput, mask: torch.Tensor | None) -> torch.Tensor:
    """KL(teacher || student) per completion token at temperature 1 (over the teacher's top-k when that is all
    there is): the distance GKD shrinks, logged whatever --beta is."""
    return gkd_loss(student_logits, teacher, mask, beta=0.0, temperature=1.0)


def gkd_loss(student_logits: torch.Tensor, teacher: TeacherOutput, mask: torch.Tensor | None, beta: float,
             temperature: float) -> torch.Tensor:
    """The generalized JSD of one micro-batch. Vocabularies of different padded sizes (the same tokenizer,
    embedding matrices rounded up differently) are compared over the shared rows, the only real tokens."""
    if teacher.logits is not None:
        vocab = min(student_logits.shape[-1], teacher.logits.shape[-1])
        return generalized_jsd(student_logits[..., :vocab], teacher.logits[..., :vocab], mask, beta, temperature)
    return topk_generalized_jsd(student_logits, teacher.topk_logps, teacher.topk_ids, mask, beta, temperature)


def micro_batch_loss(logits: torch.Tensor, batch: PackedSequences, teacher: TeacherOutput, gkd: GkdOptions,
                     temperature: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The training loss of one micro-batch (the divergence, plus --sft_alpha x the NLL of its tokens) and its
    metrics, over the completion tokens the batch's loss mask keeps: a trajectory's inserted ids (tool results,
    observations) are context only."""
    mask = batch.loss_mask
    jsd = gkd_loss(logits, teacher, mask, gkd.beta, temperature)
    loss, metrics = jsd, {"jsd": jsd.detach()}
    if gkd.sft_alpha > 0:
        nll = masked_mean(-logits.float().log_softmax(-1).gather(-1, batch.targets[:, None])[:, 0], mask)
        loss = loss + gkd.sft_alpha * nll
        metrics["sft_loss"] = nll.detach()
    with torch.no_grad():
        metrics["teacher_kl"] = teacher_kl(logits.detach(), teacher, mask)
    return loss, metrics


class GkdTrainer(RolloutTrainer):
    def __init__(self, *a, gkd: GkdOptions, sampling: SamplingOptions, policy_training: PolicyTrainingOptions,
                 worker: RolloutWorker | None, teacher, teacher_sampling: TeacherSampling | None = None, **kw):
        """`teacher_sampling`: how the teacher samples the off-policy answers with --seq_kd (None: the dataset's
        answers are used)."""
        super().__init__(*a, policy_training=policy_training, worker=worker, **kw)
        self.gkd, self.sampling = gkd, sampling
        self.teacher, self.teacher_sampling = teacher, teacher_sampling
        self._coin = random.Random(self.args.seed)
        self._eval_teacher_kl: list[float] = []

    # ------------------------------------------------------------------ batches
    def _prepare_inputs(self, rows: list[dict]) -> dict:
        on_policy = self.worker is not None and self._coin.random() < self.gkd.lmbda
        if on_policy:
            sequences, loss_masks = self._generate(rows)
        elif self.teacher_sampling is not None:
            sequences, loss_masks = self._teacher_samples(rows), None
        else:
            sequences, loss_masks = [(r["prompt_ids"], r["answer_ids"]) for r in rows], None
        t = time.time()
        inputs = self._scored(sequences, loss_masks)
        self._metrics["timing/teacher"].append(time.time() - t)
        self._metrics["on_policy"].append(float(on_policy))
        sampled = [len(c) for _, c in sequences] if loss_masks is None else [sum(m) for m in loss_masks]
        self._metrics["completions/mean_length"].append(sum(sampled) / len(sequences))
        return inputs

    def _scored(self, sequences: list[tuple[list[int], list[int]]],
                loss_masks: list[list[int]] | None = None) -> dict:
        batch = PackedSequences.pack(sequences, loss_masks).to(self.args.device)
        return {"batch": batch, "teacher": self.teacher(self.accelerator.unwrap_model(self.model), batch)}

    def _teacher_samples(self, rows: list[dict]) -> list[tuple[list[int], list[int]]]:
        """--seq_kd: the teacher's own answers to the rows' prompts (TRL's and ms-swift's sequence-level KD)."""
        t = time.time()
        prompts = [r["prompt_ids"] for r in rows]
        answers = self.teacher.generate(self.accelerator.unwrap_model(self.model), prompts, self.teacher_sampling)
        self._metrics["timing/teacher_generate"].append(time.time() - t)
        return list(zip(prompts, answers))

    def _generate(self, rows: list[dict]) -> tuple[list[tuple[list[int], list[int]]], list[list[int]] | None]:
        """The student's samples and, for multi-turn trajectories, their loss masks (None for one turn each)."""
        self._sync_weights()
        t = time.time()
        with self.worker.memory.offloaded(self.model, self.optimizer):
            rollouts = self.worker.generate([prompt_only(r) for r in rows], self.model)
        self._metrics["timing/generate"].append(time.time() - t)
        sequences = [(r.prompt_ids, r.completion_ids) for r in rollouts]
        if not self.worker.multi_turn.enabled:  # (on rollout servers the worker has no scheduler: theirs ran)
            return sequences, None
        for key, value in multi_turn_metrics(rollouts).items():
            self._metrics[key].append(value)
        return sequences, [trajectory_loss_mask(r) for r in rollouts]

    # ------------------------------------------------------------------ loss
    def training_step(self, model, inputs, num_items_in_batch=None):
        t = time.time()
        out = super().training_step(model, inputs, num_items_in_batch)
        self._metrics["timing/train"].append(time.time() - t)  # forward, loss and backward of the student
        return out

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        """Validation scores the dataset's answers (no sampling, so every evaluation sees the same tokens) by the
        training divergence: eval_loss; KL(teacher || student) at temperature 1 is logged as eval_teacher_kl."""
        scored = self._scored([(r["prompt_ids"], r["answer_ids"]) for r in inputs])
        with torch.no_grad():
            logits = completion_logits(model, scored["batch"])
            loss = gkd_loss(logits, scored["teacher"], None, self.gkd.beta, self.sampling.temperature)
            self._eval_teacher_kl.append(float(teacher_kl(logits, scored["teacher"], None)))
        return loss.detach(), None, None

    def log(self, logs: dict, start_time: float | None = None) -> None:
        if "eval_loss" in logs and self._eval_teacher_kl:
            local = sum(self._eval_teacher_kl) / len(self._eval_teacher_kl)
            logs["eval_teacher_kl"] = reduce_metrics({"eval_teacher_kl": local})["eval_teacher_kl"]
            self._eval_teacher_kl.clear()
        super().log(logs, start_time)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        batch, teacher = inputs["batch"], inputs["teacher"]
        # (completion tokens, vocab): the divergence is over the completion tokens only, so only they are normalised
        logits = completion_logits(model, batch)
        loss, metrics = micro_batch_loss(logits, batch, teacher, self.gkd, self.sampling.temperature)
        self.nonfinite.check_loss(self.state.global_step + 1, loss)
        self._record(metrics)
        return loss
