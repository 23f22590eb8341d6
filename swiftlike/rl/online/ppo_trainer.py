"""PPO with a critic, on GRPO's rollout machinery.

PPO and GRPO sample, score and reuse a batch the same way; they differ in the baseline. So PpoTrainer is the GRPO
trainer with one completion per prompt, its batch reuse set to TRL's PPO schedule (a rollout batch of
accumulation x `--num_mini_batches` micro-batches per process, `--num_ppo_epochs` passes, one optimizer step per
mini-batch), and three steps of its own: the critic's values at sampling time, per-token rewards (the score on
the last token, `--kl_coef` x the KL to the reference on every token) turned into advantages by GAE, and a loss
that adds `--vf_coef` x the critic's clipped value loss to the clipped surrogate. Everything else (vLLM colocated
or on rollout servers, LoRA-only or delta weight sync, reward functions, reward models in-process or served,
judges, the mismatch metrics, checkpoints) is GRPO's, unchanged.

Why not TRL's PPOTrainer: it generates with `model.generate` in the training process (no vLLM, no rollout
server, no LoRA-only sync) and takes a reward model only. The math is the same (rl/core/ppo.py, checked against
TRL's own run in tests/unit/rl/test_ppo_math.py); what differs is written in docs/rlhf.md.

The critic is a second module, not part of the policy the Trainer wraps: weight sync, the reference (the policy
with its adapter disabled) and the saved model stay the policy's alone. It trains in the Trainer's optimizer as an
extra parameter group (so the scheduler, the optimizer state in checkpoints and resume cover it); its gradients
are averaged over processes and clipped to --max_grad_norm on their own just before each optimizer step.
"""
from __future__ import annotations

import time

import torch
from transformers import TrainerCallback

from ..core import ppo as ppo_math
from ..core.correction import mismatch_metrics
from ..core.ppo_options import PpoOptions
from ..rewards.functions import ScoredRewards
from .critic import completion_values
from .distributed import gather_ragged, sum_across_processes
from .grpo_trainer import GRPO_PLOTTED, GrpoTrainer
from .online_trainer import disable_dropout, has_active_dropout

PPO_PLOTTED = (*GRPO_PLOTTED, "loss/*", "value/*", "ppo/*")


class _CriticGradients(TrainerCallback):
    """The Trainer handles the gradients of the model it wraps, the policy, only. So, just before each optimizer
    step, the critic's are averaged over processes (DDP wraps the policy only) and clipped to --max_grad_norm,
    their norm logged; a step whose policy update the non-finite guard dropped drops the critic's too. Just
    after it they are cleared, as the Trainer clears the policy's: without that each step would add every
    earlier step's gradient to its own."""

    def __init__(self, trainer: PpoTrainer):
        self.trainer = trainer

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        params = [p for p in self.trainer.critic.parameters() if p.grad is not None]
        if not params:
            return
        if model is not None and all(p.grad is None for p in model.parameters() if p.requires_grad):
            self.trainer.critic.zero_grad(set_to_none=True)  # the guard skipped this step
            return
        if args.world_size > 1:
            import torch.distributed as dist
            for p in params:
                dist.all_reduce(p.grad)
                p.grad.div_(args.world_size)
        max_norm = args.max_grad_norm if args.max_grad_norm > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        self.trainer._metrics["value/grad_norm"].append(float(norm))

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.trainer.critic.zero_grad(set_to_none=True)


class PpoTrainer(GrpoTrainer):
    def __init__(self, *a, ppo: PpoOptions, critic: torch.nn.Module, **kw):
        self.ppo, self.critic = ppo, critic
        self._critic_in_optimizer = False
        super().__init__(*a, **kw)
        if kw["policy_training"].disable_dropout:
            disable_dropout(critic)
        self.add_callback(_CriticGradients(self))

    def create_optimizer(self, model=None):
        optimizer = super().create_optimizer(model)
        if not self._critic_in_optimizer:
            optimizer.add_param_group({"params": [p for p in self.critic.parameters() if p.requires_grad],
                                       "weight_decay": self.args.weight_decay})
            self._critic_in_optimizer = True
        return optimizer

    # ------------------------------------------------------------------ rollout phase
    def _rewards(self, rollouts) -> ScoredRewards:
        """GRPO's reward columns, less --missing_eos_penalty for a completion cut by the length limit."""
        scored = super()._rewards(rollouts)
        if self.ppo.missing_eos_penalty:
            cut = torch.tensor([bool(r.truncated) for r in rollouts])
            scored.total = scored.total - self.ppo.missing_eos_penalty * cut.to(scored.total.dtype)
        return scored

    def _compares_with_other_models(self) -> bool:
        """GRPO's cases and the KL in the reward (`--kl_coef`), which compares the sampling-time policy with the
        reference: on the reference's footing, temperature-scaled without top-k/top-p (`old_kl_logps`), so an
        identical reference reads 0 where the filtered log-probs read a KL of the filter itself. Both need the
        old-policy pass (`_needs_old_logps`); a batch trained on once without a KL term needs none: the loss's
        log-probs, detached, are the old policy's, since no optimizer step comes between sampling and that
        forward."""
        return super()._compares_with_other_models() or self.ppo.kl_coef > 0

    def _values(self, batch: dict) -> torch.Tensor:
        """The critic's values of a micro-batch at sampling time, --local_rollout_forward_batch_size rows a pass."""
        rows, step = batch["completion_ids"].shape[0], self.ppo.local_rollout_forward_batch_size
        self.critic.eval()
        try:
            with torch.no_grad():
                return torch.cat([completion_values(self.critic, _row_slice(batch, slice(i, i + step)),
                                                    self.grpo.share_prompt_prefix)
                                  for i in range(0, rows, step)])
        finally:
            self.critic.train()

    def _whiten(self, x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
        """Whitened over the tokens of the whole batch on every process, as one process would."""
        every, _ = gather_ragged(x[mask].to(self.args.device))
        stats = (every.mean().cpu(), every.var().cpu()) if every.numel() > 1 else None
        if stats is None:  # one token in the whole batch: nothing to scale against
            return torch.where(mask, x, torch.zeros_like(x))
        return ppo_math.masked_whiten(x, mask, shift_mean, stats=stats)

    def _trains_critic_at_sampling(self) -> bool:
        """Whether the critic's value pass can be its training pass. A batch trained on once, in one optimizer
        step, with no dropout in the critic: no update comes between the sampling-time values and the loss's, so
        they are the same numbers, and the value loss of each row needs that row's returns only (GAE runs along a
        row; only the advantages are whitened over the batch). One forward with its backward then replaces a
        no-grad forward plus a forward with its backward. Not under DeepSpeed or an fp16 loss scaler, whose
        backward belongs to the wrapped policy's loss."""
        return (not self._reuses_batches() and not has_active_dropout(self.critic)
                and self.accelerator.scaler is None and not self.is_deepspeed_enabled)

    def _train_critic(self, batches: list[dict], starts: list[int], rewards: torch.Tensor,
                      mask: torch.Tensor) -> list[torch.Tensor]:
        """Each micro-batch's values, with the critic's clipped value loss backpropagated as the Trainer would
        backpropagate it in `compute_loss` (scaled by --vf_coef, divided by the accumulation steps, normalised
        by the micro-batch's tokens on every process as --loss_type bnpo is); the loss goes into the batch for
        the log. At this first use old and new values are equal, so the clip never binds."""
        ppo, values = self.ppo, []
        tokens = sum_across_processes([int(mask[a:z].sum()) for a, z in zip(starts, starts[1:])], self.args.device)
        for b, row, end, count in zip(batches, starts, starts[1:], tokens):
            w = b["completion_ids"].shape[1]
            rows_mask = mask[row:end, :w].to(self.args.device)
            with torch.enable_grad(), self.compute_loss_context_manager():  # inside the no-grad rollout phase
                v = completion_values(self.critic, b, self.grpo.share_prompt_prefix)
                _, returns = ppo_math.gae(rewards[row:end, :w].to(v.device), v.detach(), rows_mask,
                                          ppo.gamma, ppo.lam)
                loss, clip = ppo_math.clipped_value_loss(v, v.detach(), returns, rows_mask, ppo.cliprange_value,
                                                         count / self.accelerator.num_processes)
                (ppo.vf_coef * loss / len(batches)).backward()
            b["value_loss"] = loss.detach()
            self._record({"loss/value": loss.detach(), "clip_ratio/value": clip,
                          "value/predicted_mean": torch.where(rows_mask, v.detach(), 0.0).sum()
                          / rows_mask.sum().clamp(min=1)})
            values.append(v.detach())
        return values

    def _advantages(self, scored: ScoredRewards, valid: torch.Tensor,
                    batches: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token advantages by GAE, (rows, widest completion); the returns and the sampling-time values go
        into each micro-batch. A completion without a valid reward (a judge reply with no score, a dropped
        group) gets no tokens in the loss."""
        ppo, width = self.ppo, max(b["completion_ids"].shape[1] for b in batches)

        def stacked(tensors: list[torch.Tensor]) -> torch.Tensor:
            return torch.cat([torch.nn.functional.pad(x.cpu(), (0, width - x.shape[1])) for x in tensors])
        mask = stacked([b["completion_mask"] for b in batches]) & valid.unsqueeze(1)
        kl = (ppo_math.per_token_kl(stacked([b["old_kl_logps"] for b in batches]).float(),
                                    stacked([b["ref_logps"] for b in batches]).float(), ppo.kl_estimator)
              if ppo.kl_coef > 0 else torch.zeros(mask.shape))
        scores = torch.where(valid, scored.total.float(), torch.zeros_like(scored.total.float()))
        rewards = ppo_math.token_rewards(scores, kl, mask, ppo_math.last_token_index(mask), ppo.kl_coef)
        if ppo.whiten_rewards:
            rewards = self._whiten(rewards, mask, shift_mean=False)
        starts = [0]  # each micro-batch's first row in the stacked tensors, and the end
        for b in batches:
            starts.append(starts[-1] + b["completion_ids"].shape[0])
        t = time.time()
        per_batch = (self._train_critic(batches, starts, rewards, mask) if self._trains_critic_at_sampling()
                     else [self._values(b) for b in batches])
        self._timed("values", t)
        values = stacked(per_batch)
        advantages, returns = ppo_math.gae(rewards, values, mask, ppo.gamma, ppo.lam)
        advantages = self._whiten(advantages, mask)
        for b, v, row, end in zip(batches, per_batch, starts, starts[1:]):
            w = b["completion_ids"].shape[1]
            b["completion_mask"] = mask[row:end, :w].to(self.args.device)
            b["returns"] = returns[row:end, :w].to(self.args.device)
            b["values"] = v.to(self.args.device)
        m = self._metrics
        if mask.any():
            m["ppo/kl"].append(float(kl[mask].mean()))
            m["ppo/non_score_reward"].append(float((-ppo.kl_coef * kl * mask).sum(1).mean()))
            m["value/mean"].append(float(values[mask].mean()))
            m["value/returns_mean"].append(float(returns[mask].mean()))
            m["value/explained_variance"].append(float(ppo_math.explained_variance(values, returns, mask)))
        return advantages, torch.zeros(len(scored.total))

    def _log_rollout_metrics(self, rollouts, scored, valid, dropped, group_std) -> None:
        super()._log_rollout_metrics(rollouts, scored, valid, dropped, group_std)
        self._metrics.pop("frac_reward_zero_std", None)  # a group of one: always zero, meaningless for PPO

    # ------------------------------------------------------------------ loss
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        t = time.time()
        ppo, mask = self.ppo, inputs["completion_mask"]
        width = inputs["completion_ids"].shape[1]
        scored = self._logps(model, inputs, with_entropy=True)
        old = inputs["old_logps"] if inputs["old_logps"] is not None else scored.logps.detach()
        advantages = inputs["advantages"][:, :width]
        # the micro-batches of every process add up to their union's mean (the token count is global)
        tokens = inputs.get("num_items_in_batch")
        per_process = None if tokens is None else tokens / self.accelerator.num_processes
        policy_loss, policy_clip = ppo_math.clipped_policy_loss(scored.logps, old, advantages, mask, ppo.cliprange,
                                                                per_process)
        count = mask.sum().clamp(min=1)
        log_ratio = torch.where(mask, scored.logps.detach() - old, 0.0)
        metrics = {"loss/policy": policy_loss.detach(), "clip_ratio/policy": policy_clip,
                   "ppo/approx_kl": 0.5 * (log_ratio ** 2).sum() / count,
                   "entropy": torch.where(mask, scored.entropy, 0.0).sum() / count,
                   "sampling/forced_keep_frac": (scored.forced & mask).sum() / count}
        if "value_loss" in inputs:  # trained with its values at sampling time (`_train_critic`): logged only
            loss = policy_loss + ppo.vf_coef * inputs["value_loss"]
        else:
            values = completion_values(self.critic, inputs, self.grpo.share_prompt_prefix)
            value_loss, value_clip = ppo_math.clipped_value_loss(values, inputs["values"], inputs["returns"], mask,
                                                                 ppo.cliprange_value, per_process)
            loss = policy_loss + ppo.vf_coef * value_loss
            metrics.update({"loss/value": value_loss.detach(), "clip_ratio/value": value_clip,
                            "value/predicted_mean": torch.where(mask, values.detach(), 0.0).sum() / count})
        if inputs["rollout_logps"] is not None and self.rollout.log_rollout_offpolicy_metrics:
            for k, v in mismatch_metrics(old, inputs["rollout_logps"], mask).items():
                metrics[f"rollout_correction/{k}"] = v
        self.nonfinite.check_loss(self.state.global_step + 1, loss)
        self._record(metrics)
        self._timed("train_forward", t)
        return loss


def _row_slice(batch: dict, rows: slice) -> dict:
    """The rows `rows` of a `tensorize`d batch, with only the prompts they use (so a slice's passes run no other
    row's prompt)."""
    used, index = torch.unique(batch["prompt_index"][rows], return_inverse=True)
    return {**batch, "prompt_ids": batch["prompt_ids"][used],
            "prompt_attention_mask": batch["prompt_attention_mask"][used], "prompt_index": index,
            "completion_ids": batch["completion_ids"][rows],
            "completion_attention_mask": batch["completion_attention_mask"][rows]}
