"""GRPO on transformers' Trainer: our rollout, rewards, log-probs and loss in `_prepare_inputs` / `compute_loss`.

The Trainer keeps the optimizer, scheduler, checkpoints and logging; everything GRPO-specific is the pure
math of `swiftlike.rl` called from here. Batching follows TRL: the dataloader yields a *generation batch*
(per_device_train_batch_size * steps_per_generation rows, each prompt repeated num_generations times in a
row), repeated steps_per_generation * num_iterations times; the first time it arrives it is generated and
scored, then it is served back one micro-batch slice at a time. An optimizer step's micro-batches are all
prepared before its first backward pass (`get_batch_samples`), so dapo's normaliser counts the whole step
even when it spans two generation batches. With several processes each rank gets its share of the global
generation batch in whole prompt groups (`RepeatSampler`); the bnpo/dapo token counts and the logged
metrics are combined over ranks (`distributed.py`).

With `--async_generate` each generation batch also carries the rows of the next ones, which generate on the
rollout servers while this batch trains, as far ahead as `--max_staleness` allows at their last use
(async_rollout.py); a group that would be older than that bound is dropped and generated again.
"""
from __future__ import annotations

import copy
import json
import math
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Sampler

from ...train.outputs import PLOTTED
from ...utils import get_logger
from ..core.advantages import (group_advantages, groups_with_signal, select_groups, sequence_kl, teacher_kl,
                               teacher_token_advantages, whole_groups)
from ..core.staleness import prefetch_depth, stale_groups, steps_left
from .prefetch import EpochLoader, GenerationRows, LookaheadBatches, Prefetch, spliced_index
from .scoring import GroupScoring, ScoredBatch, score_after
from ..core.correction import mismatch_metrics, off_policy_sequence_mask, rollout_is_weights
from ..core.rejection import rollout_rejection_mask
from .distributed import concat_across_processes, gather_ragged, sum_across_processes
from .grpo_batch import completion_logps, per_token_rows, tensorize, unpadded_sequences
from ..core.losses import aggregation_of, policy_loss
from ..core.selection import clip_cov_mask, entropy_threshold, kl_cov_mask, top_entropy_mask
from ..rewards.functions import ScoredRewards, combine_rewards
from .rollout_worker import Rollout, RolloutWorker
from .trajectories import drop_failed_trajectories, multi_turn_metrics, trajectory_record
from .teacher import ServedTeacher, TeacherReplicas
from .online_trainer import RolloutTrainer, disable_dropout, has_active_dropout
from ..core.options import (GrpoOptions, PolicyTrainingOptions, RewardOptions, RolloutOptions,
                            SamplingOptions)
from ..core.sampling import SAMPLING_EPS, SampledLogps

logger = get_logger("swiftlike.rl")
# The trainer's spans in timeline.jsonl besides "sync" and "learn" (a training step's forward and backward, its
# inputs prepared); generation's are rollout.py's.
TIMELINE = ("generate_wait",)

# The curves a GRPO run draws into images/ (patterns are matched against the logged keys).
GRPO_PLOTTED = (*PLOTTED, "reward", "reward_std", "rewards/*/mean", "completions/mean_length", "kl", "entropy",
                "rollout_correction/k3_kl", "sampling/forced_keep_frac", "dynamic_sample/*", "staleness/*",
                "multi_turn/*", "timing/*")


class RepeatSampler(Sampler):
    """This process's share of shuffled generation batches: `per_batch` prompts, each repeated
    `num_generations` times in a row, the whole share yielded `repeat` times (steps_per_generation *
    num_iterations).

    Every process draws the same permutation (same seed, same epoch) and cuts the same global generation
    batch of `per_batch * num_processes` prompts, the batch one process with a P-times larger
    per_device_train_batch_size would draw. Each rank takes whole prompts, so a group's completions stay on
    one rank and its advantages are exact without communication. The prompts are dealt round-robin in units
    of `prompts_per_unit`: with one micro-batch's prompts per unit, rank r's micro-batch s is the r-th slice
    of that single process's micro-batch s, so a normaliser summed over ranks per micro-batch (bnpo) counts
    the same tokens. When a group is larger than a micro-batch, the unit is the whole share (`per_batch`).
    """

    def __init__(self, n_rows: int, num_generations: int, per_batch: int, repeat: int, seed: int,
                 num_processes: int = 1, process_index: int = 0, prompts_per_unit: int | None = None):
        self.n, self.num_generations, self.per_batch, self.repeat, self.seed = n_rows, num_generations, per_batch, repeat, seed
        self.num_processes, self.process_index = num_processes, process_index
        self.unit = prompts_per_unit or per_batch
        if per_batch % self.unit:
            raise ValueError(f"{per_batch} prompts per generation batch are not whole units of {self.unit}")
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """The Trainer sets it before each epoch (EpochLoader); the order depends on it alone, so a resumed run
        draws each epoch's order as an uninterrupted one does."""
        self.epoch = epoch

    def __iter__(self):
        gen = torch.Generator().manual_seed(self.seed + self.epoch)
        order = torch.randperm(self.n, generator=gen).tolist()
        global_batch = self.per_batch * self.num_processes
        for start in range(0, self.n - global_batch + 1, global_batch):
            units = [order[i:i + self.unit] for i in range(start, start + global_batch, self.unit)]
            share = [i for unit in units[self.process_index::self.num_processes] for i in unit]
            for _ in range(self.repeat):
                yield from (i for i in share for _ in range(self.num_generations))

    def __len__(self) -> int:
        return (self.n // (self.per_batch * self.num_processes)) * self.per_batch * self.num_generations * self.repeat


class GrpoTrainer(RolloutTrainer):
    def __init__(self, *a, grpo: GrpoOptions, sampling: SamplingOptions, rollout: RolloutOptions,
                 reward: RewardOptions, policy_training: PolicyTrainingOptions, worker: RolloutWorker,
                 reward_funcs: dict, ref_model=None, teacher=None, run_dir: Path | None = None, **kw):
        super().__init__(*a, policy_training=policy_training, worker=worker, **kw)
        self.grpo, self.sampling, self.rollout, self.reward = grpo, sampling, rollout, reward
        self.reward_funcs = reward_funcs
        self.ref_model = ref_model
        # OPD-RL's teacher: a frozen model, ADAPTER_DISABLED for the student's own base, or a served one
        self.teacher = teacher
        self.run_dir = run_dir
        self.loss_is_scaled_for_ga = False  # the Trainer divides by accumulation steps (dapo undoes it)
        self._buffer: list[dict] = []  # the micro-batches of the generation batch being served
        self._buffer_rows: list[dict] | None = None  # the rows it was generated for
        self._micro_steps = grpo.micro_steps  # one generation batch's
        self._updates_per_epoch = 1  # optimizer steps per epoch, counted with the dataloader
        # each rank draws its own extra prompts
        self._resample_gen = torch.Generator().manual_seed(self.args.seed + 1 + self.args.process_index)
        self._micro_batches_scored = 0  # numbers Clip-Cov's draws (compute_loss)
        # Generation batches kept in flight ahead of training (--async_generate; 0 = synchronous)
        self._depth = (prefetch_depth(rollout.max_staleness, self._micro_steps, self.args.gradient_accumulation_steps)
                       if rollout.async_generate else 0)
        # Server mode: a batch goes out as one request per group, each scored as soon as it is back (scoring.py)
        self._scoring = None
        if rollout.server_mode:
            self._scoring = GroupScoring(lambda rows, server: worker.generate(rows, server=server), self._rewards,
                                         grpo.num_generations, len(worker.engine.clients), self._record_batch)
        self._prefetch = Prefetch(lambda rows: self._scoring.submit(rows, background=True))
        self._reward_wait = 0.0  # this generation batch's seconds waiting for rewards (timing/reward_wait)
        self._warned_stale = False
        self._timeline: list[dict] = []
        if policy_training.disable_dropout and ref_model is not None:
            disable_dropout(ref_model)
        # Without dropout the training pass in train mode gives the sampling-time log-probs exactly (the weights
        # move only at the optimizer step), so the mismatch metrics and IS weights take them from it, detached,
        # and a batch used once needs no pass of its own for them: on CPU that pass was ~1/6 of a step.
        self._eval_pass_differs = has_active_dropout(self.model)

    # ------------------------------------------------------------------ data
    def get_train_dataloader(self) -> DataLoader:
        """This process's generation batches (see RepeatSampler), each with the rows of the `_depth` next ones
        (LookaheadBatches; none when synchronous). Not `accelerator.prepare`d: the sampler already yields only
        this rank's share, cut at group boundaries, which accelerate's sharding is not."""
        spg, micro = self.grpo.steps_per_generation, self.args.per_device_train_batch_size
        group_size = self.grpo.num_generations
        gen_batch = micro * spg
        sampler = RepeatSampler(len(self.train_dataset), group_size, gen_batch // group_size, self._micro_steps,
                                self.args.seed, num_processes=self.args.world_size,
                                process_index=self.args.process_index,
                                prompts_per_unit=micro // group_size if micro % group_size == 0 else None)
        batches = LookaheadBatches(sampler, gen_batch, self._depth)
        self._updates_per_epoch = max(math.ceil(len(batches) / self.args.gradient_accumulation_steps), 1)
        return EpochLoader(self.train_dataset, batch_sampler=batches, num_workers=0,
                           collate_fn=GenerationRows.collate(gen_batch))

    # ------------------------------------------------------------------ generation and scoring
    def get_batch_samples(self, epoch_iterator, num_batches, device):
        """One optimizer step's micro-batches, generated and scored before its first backward pass.

        The Trainer collects a step's rows before it trains on any of them; preparing them here rather than
        one micro-step at a time (`_prepare_inputs`) lets dapo's normaliser count every token of the step when
        they come from two generation batches (--steps_per_generation not a multiple of
        --gradient_accumulation_steps). No optimizer step falls inside a step, so generating its later batch
        before the first backward pass changes no weights it is sampled with. Positions come from the
        Trainer's step count, so a run resumed between a batch's uses serves the right slices.
        """
        rows, _ = super().get_batch_samples(epoch_iterator, num_batches, device)
        first = (self.state.global_step % self._updates_per_epoch) * self.args.gradient_accumulation_steps
        batches = [self._micro_batch(first + i, r) for i, r in enumerate(rows)]
        if batches and aggregation_of(self.grpo.loss_type) == "dapo":
            tokens = sum(sum_across_processes([loss_tokens(b) for b in batches], self.args.device))
            for b in batches:
                b["num_items_in_batch"] = tokens
        self._log_staleness(batches)
        return batches, None

    def _prepare_inputs(self, inputs: dict) -> dict:
        """Prepared already, a whole step at a time (`get_batch_samples`)."""
        return inputs

    def _micro_batch(self, micro_step: int, rows: list[dict]) -> dict:
        """The micro-batch of `micro_step` (of the epoch). Its generation batch is generated and scored at the
        batch's first micro-step, or at the first one a resumed run trains on."""
        if micro_step % self._micro_steps == 0 or self._buffer_rows != list(rows):
            left = steps_left(micro_step, self._micro_steps, self.args.gradient_accumulation_steps)
            self._buffer, self._buffer_rows = self._generate_and_score(rows, left), list(rows)
        return self._buffer[micro_step % self._micro_steps % self.grpo.steps_per_generation]

    def _log_staleness(self, batches: list[dict]) -> None:
        """staleness/mean and staleness/max of the samples this optimizer step trains on, at this step: every
        use of a batch counts, its last one included."""
        step = self.state.global_step
        behind = [step - v for b in batches for v in b["policy_versions"] if v is not None]
        if behind:
            self._metrics["staleness/mean"].append(sum(behind) / len(behind))
            self._metrics["staleness/max"].append(float(max(behind)))

    def _timed(self, key: str, start: float) -> None:
        self._metrics[f"timing/{key}"].append(time.time() - start)
        if key in TIMELINE:
            self._span(key, start)

    def _span(self, event: str, start: float) -> None:
        self._timeline.append({"event": event, "start": start, "end": time.time(), "step": self.state.global_step})

    def write_timeline(self) -> None:
        """timeline.jsonl: wall-clock spans of generation (foreground or background), waits and training, for
        seeing how much generation overlaps training (docs/rollout.md draws one)."""
        spans, self._timeline = self._timeline + self.worker.timeline, []
        self.worker.timeline = []
        if self.run_dir is None or not self.accelerator.is_main_process or not spans:
            return
        with (self.run_dir / "timeline.jsonl").open("a", encoding="utf-8") as f:
            for span in sorted(spans, key=lambda s: s["start"]):
                f.write(json.dumps(span) + "\n")

    def _record_batch(self, start: float, end: float, rollouts: list[Rollout], background: bool) -> None:
        self.worker.record_generation(start, end, len(rollouts), sum(r.sampled_tokens for r in rollouts), background)

    def close(self) -> None:
        """Stop the group requests and reward calls still in flight (a run that stopped early)."""
        self._prefetch.clear()
        if self._scoring is not None:
            self._scoring.close()

    def _collect_rollouts(self, rows: list[dict], steps_left: int) -> tuple[list[Rollout], ScoredRewards]:
        """This batch's rollouts and rewards: prefetched in the background (async) or generated now, after the sync.

        The sync comes first and does not wait for the batches generating ahead (the servers continue them
        under the new weights); then this batch is taken, the groups too stale for its `steps_left` further
        steps generated again, and the batches ahead topped up so the servers keep generating while this one
        trains.
        """
        self.write_timeline()
        t = time.time()
        self._sync_weights()
        self._span("sync", t)
        batch: ScoredBatch | None = self._prefetch.take(rows) if self._depth else None
        if batch is not None:
            self._metrics["timing/generate_wait"].append(batch.generate_wait)
            self._reward_wait += batch.reward_wait
        else:
            batch = self._generate_scored(rows)
        rollouts, scored = self._drop_stale(batch.rollouts, batch.scored, steps_left)
        if self._depth:
            self._prefetch.top_up(getattr(rows, "ahead", []))
        return rollouts, scored

    def _generate_scored(self, rows: list[dict]) -> ScoredBatch:
        """`rows` generated and scored now: in groups scored as they come back (server mode), else the batch
        generated in this process and then scored."""
        if self._scoring is not None:
            batch = self._scoring.submit(rows).result()
        else:
            t = time.time()
            with self.worker.memory.offloaded(self.model, self.optimizer):
                rollouts = self.worker.generate(rows, self.model)
            batch = score_after(rollouts, self._rewards, time.time() - t)
        self._metrics["timing/generate"].append(batch.generate_wait)
        self._reward_wait += batch.reward_wait
        return batch

    def _drop_stale(self, rollouts: list[Rollout], scored: ScoredRewards,
                    steps_left: int) -> tuple[list[Rollout], ScoredRewards]:
        """Groups that would be more than --max_staleness steps old at the last of the `steps_left` further steps
        that train on them are generated again now (fresh), in place. Synchronous training (bound 0) drops
        only what is behind the weights of this step. The new groups are scored; the others keep their rewards."""
        current, group_size = self.worker.policy_version, self.grpo.num_generations
        if current is not None:
            bound = max(self.rollout.max_staleness - steps_left, 0)
            stale = stale_groups([r.policy_version for r in rollouts], current, bound, group_size)
            if stale:
                fresh = self._generate_scored([rollouts[k * group_size + i].row for k in stale
                                               for i in range(group_size)])
                index = spliced_index(len(rollouts), stale, group_size)
                rollouts = [(rollouts + fresh.rollouts)[i] for i in index]
                scored = ScoredRewards.cat([scored, fresh.scored]).select(torch.tensor(index))
            self._metrics["staleness/dropped"].append(float(len(stale) * group_size))
            behind = max((current - r.policy_version for r in rollouts if r.policy_version is not None), default=0)
            if behind > 0 and self.rollout.rollout_importance_sampling_mode is None and not self._warned_stale:
                self._warned_stale = True
                logger.warning(
                    "training on samples up to %d optimizer steps stale (--async_generate, --max_staleness %d) "
                    "without --rollout_importance_sampling_mode: the loss treats them as samples of the current "
                    "policy. Set --rollout_importance_sampling_mode token_truncate (or another mode) to reweight "
                    "each token by pi_current / pi_behaviour", behind + steps_left, self.rollout.max_staleness)
        return rollouts, scored

    @torch.no_grad()
    def _generate_and_score(self, rows: list[dict], steps_left: int) -> list[dict]:
        """The generation batch's micro-batches, ready to train on; it serves `steps_left` more optimizer steps
        after this one."""
        self._reward_wait = 0.0
        rollouts, scored = self._collect_rollouts(rows, steps_left)
        if self.grpo.dynamic_sample:
            rollouts, scored = self._dynamic_sample(rollouts, scored)
        # the seconds this batch's rewards held the trainer up: all of them in-process, what outlasted the
        # generation in server mode (scoring.py)
        self._metrics["timing/reward_wait"].append(self._reward_wait)
        # a group with a failed reward (--reward_on_error skip) is dropped whole: no advantage, no loss
        dropped = whole_groups(scored.failed_any, self.grpo.num_generations)
        valid = scored.valid & ~dropped
        micro = self.args.per_device_train_batch_size
        t = time.time()
        pass_seconds: dict[str, float] = defaultdict(float)
        batches = [self._prepared_micro_batch(rollouts[s * micro:(s + 1) * micro], valid[s * micro:(s + 1) * micro],
                                              pass_seconds) for s in range(self.grpo.steps_per_generation)]
        for key, seconds in pass_seconds.items():
            self._metrics[f"timing/{key}"].append(seconds)
        self._timed("logps", t)
        advantages, group_std = self._advantages(scored, valid, batches)
        for s, batch in enumerate(batches):
            batch["advantages"] = advantages[s * micro:(s + 1) * micro].to(self.args.device)
            if self.teacher is not None:
                self._metrics["teacher_kl"].append(float(teacher_kl(batch["teacher_logps"], batch["old_kl_logps"],
                                                                    batch["completion_mask"])))
                batch["advantages"] = teacher_token_advantages(batch["advantages"], batch["teacher_logps"],
                                                               batch["old_kl_logps"], batch["completion_mask"],
                                                               self.grpo.teacher_kl_coef)
        self._log_rollout_metrics(rollouts, scored, valid, dropped, group_std)
        if self.grpo.log_completions and self.run_dir is not None and self.accelerator.is_main_process:
            self._write_completions(rollouts, scored, dropped, advantages)
        # bnpo's normaliser (see `aggregate`): the micro-batch's loss tokens on every rank. dapo's counts the whole
        # optimizer step, which may reach into the next generation batch (`get_batch_samples`).
        if self.grpo.loss_type == "bnpo":
            tokens = sum_across_processes([loss_tokens(b) for b in batches], self.args.device)
            for b, count in zip(batches, tokens):
                b["num_items_in_batch"] = count
        return batches

    def _prepared_micro_batch(self, part: list[Rollout], valid: torch.Tensor, pass_seconds: dict[str, float]) -> dict:
        """One micro-batch as tensors with the log-probs its loss and advantages read, each forward pass timed into
        `pass_seconds` under its own key (timing/old_logps, ref_logps, teacher_logps, old_kl_logps): a key
        missing from the log is a pass that was skipped.

        A row without a valid reward (missing, failed, a dropped group, an environment that raised) leaves the
        loss whole (`tensorize`'s `valid`): no normaliser, KL or entropy counts it."""
        model, device = self.model, self.args.device

        def timed_pass(key: str, compute):
            started = time.time()
            value = compute()
            pass_seconds[key] += time.time() - started
            return value

        batch = {k: v.to(device) if v is not None else None
                 for k, v in tensorize(part, self.processing_class.pad_token_id, self.grpo.overlong_filter,
                                       valid).items()}
        batch["policy_versions"] = [r.policy_version for r in part]
        # The policy's own log-probs at sampling time, without dropout: the PPO "old" policy when the batch is reused
        # (otherwise the loss uses the current log-probs detached), the training side of the mismatch metrics and
        # of --rollout_rs. Each is a whole forward pass, so it runs only when something reads it.
        model.eval()
        try:
            old_kl = self._compares_with_other_models()
            if self.rollout.rollout_bypass_mode:  # the engine's log-probs are the old policy: no forward
                batch["old_logps"] = batch["rollout_logps"]
            elif self._needs_old_logps(batch):
                old = timed_pass("old_logps", lambda: self._logps(model, batch, with_unfiltered=old_kl))
                batch["old_logps"], batch["old_kl_logps"] = old.logps, old.unfiltered
            else:
                batch["old_logps"] = None
            if old_kl and batch.get("old_kl_logps") is None:  # bypass mode: the engine's are filtered or not ours
                batch["old_kl_logps"] = (timed_pass("old_kl_logps", lambda: self._logps(
                    model, batch, with_unfiltered=True).unfiltered) if self._filters_sampling() else batch["old_logps"])
            if self.grpo.beta > 0:
                batch["ref_logps"] = timed_pass("ref_logps", lambda: self._ref_logps(batch))
            if self.teacher is not None:
                batch["teacher_logps"] = timed_pass("teacher_logps", lambda: self._teacher_logps(batch))
        finally:
            model.train()
        rules = self.rollout.rejection()
        if rules and batch["rollout_logps"] is not None and not self.rollout.rollout_bypass_mode:
            # decided now, from the sampling-time log-probs, so the bnpo/dapo token counts leave the rejected out
            batch["rollout_rs_keep"], _ = rollout_rejection_mask(batch["old_logps"], batch["rollout_logps"],
                                                                 batch["completion_mask"], rules)
        return batch

    def _advantages(self, scored: ScoredRewards, valid: torch.Tensor,
                    batches: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
        """Advantages of this rank's rows (`--advantage_estimator`, `--scale_rewards`), from rewards less
        `--beta` x each sequence's KL under `--kl_in_reward`; a row without a valid reward is left out of every
        statistic and gets 0. Groups never straddle ranks, so only the batch-wide statistics (`batch`'s std,
        `gdpo`'s z-score) need the others: they are taken over the global batch's rows, as in one process."""
        grpo, rewards, per_func = self.grpo, scored.total, scored.per_func
        if grpo.kl_in_reward and grpo.beta > 0:
            kl = torch.cat([sequence_kl(b["old_kl_logps"], b["ref_logps"], b["completion_mask"]).cpu()
                            for b in batches])
            self._metrics["kl_in_reward/kl"].append(float(kl.mean()))
            rewards = rewards - grpo.beta * kl
        weights = torch.tensor(self.reward.weights() or [1.0] * len(per_func), dtype=torch.float32)
        table = (torch.stack(list(per_func.values()), dim=1) if per_func
                 else torch.zeros(len(rewards), 0))
        if grpo.scale_rewards not in ("batch", "gdpo") or self.accelerator.num_processes == 1:
            return group_advantages(rewards, grpo.num_generations, grpo.scale_rewards, grpo.advantage_estimator,
                                    table, weights, valid)
        columns = torch.cat([valid.float().unsqueeze(1), rewards.unsqueeze(1), table], 1)
        rows, mine = concat_across_processes(columns.to(self.args.device))
        rows = rows.cpu()
        advantages, group_std = group_advantages(rows[:, 1], grpo.num_generations, grpo.scale_rewards,
                                                 grpo.advantage_estimator, rows[:, 2:], weights, rows[:, 0].bool())
        groups = slice(mine.start // grpo.num_generations, mine.stop // grpo.num_generations)
        return advantages[mine], group_std[groups]

    def _needs_old_logps(self, batch: dict) -> bool:
        rollout = self.rollout
        has_rollout_lp = batch["rollout_logps"] is not None
        return (self._reuses_batches() or self._compares_with_other_models()
                or (self._eval_pass_differs and has_rollout_lp
                    and (rollout.rollout_importance_sampling_mode is not None or rollout.log_rollout_offpolicy_metrics))
                or (has_rollout_lp and bool(rollout.rejection()))
                or (not has_rollout_lp and rollout.off_policy_sequence_mask_delta is not None))

    def _compares_with_other_models(self) -> bool:
        """Whether the sampling-time policy is compared with another model's log-probs when the batch is prepared:
        the reference under --kl_in_reward, the OPD-RL teacher (PPO adds its KL penalty). Those comparisons read
        `old_kl_logps`, the policy on the other model's footing: temperature-scaled without top-k/top-p, as the
        other side is (sampling.py's KL rule, TRL's and ms-swift's), so an identical model reads 0."""
        return (self.grpo.kl_in_reward and self.grpo.beta > 0) or self.teacher is not None

    def _filters_sampling(self) -> bool:
        """Whether top-k / top-p restrict the sampling distribution (not greedy), so the filtered log-probs differ
        from the temperature-scaled ones every comparison with another model reads."""
        sampling = self.sampling
        return sampling.temperature >= SAMPLING_EPS and (sampling.top_k > 0 or sampling.top_p < 1.0)

    def _reuses_batches(self) -> bool:
        """A generation batch serves more than one optimizer step, so the policy moves between its uses."""
        return self.grpo.num_iterations > 1 or self.grpo.steps_per_generation > self.args.gradient_accumulation_steps

    def _dynamic_sample(self, rollouts: list[Rollout], scored: ScoredRewards):
        """DAPO dynamic sampling: up to --max_resample_times rounds of fresh prompts replace zero-std groups.

        Extra prompts are a seeded random draw of distinct train-set rows (not the sampler's epoch order,
        which the Trainer owns), so a run is reproducible (a resumed one draws afresh). Whole groups are kept or dropped, in pool order.
        """
        group_size, needed = self.grpo.num_generations, len(rollouts) // self.grpo.num_generations
        pool, pool_scores = list(rollouts), [scored]

        def with_signal(every: ScoredRewards) -> torch.Tensor:  # a dropped group has no valid reward: no signal
            return groups_with_signal(every.total, group_size,
                                      every.valid & ~whole_groups(every.failed_any, group_size))
        rounds = 0
        while (rounds < self.grpo.max_resample_times
               and int(with_signal(ScoredRewards.cat(pool_scores)).sum()) < needed):
            picks = torch.randperm(len(self.train_dataset), generator=self._resample_gen)[:needed].tolist()
            more = self._generate_scored([self.train_dataset[i] for i in picks for _ in range(group_size)])
            pool += more.rollouts
            pool_scores.append(more.scored)
            rounds += 1
        every = ScoredRewards.cat(pool_scores)
        signal = with_signal(every)
        groups = select_groups(signal, needed)
        index = torch.tensor([gi * group_size + k for gi in groups for k in range(group_size)])
        self._metrics["dynamic_sample/rounds"].append(float(rounds))
        # `reward` is over the kept groups, which the selection biases towards mixed outcomes; this one is the
        # policy's success rate on every prompt it was shown this step, the figure whose trend means learning.
        if every.valid.any():
            self._metrics["dynamic_sample/reward_generated"].append(float(every.total[every.valid].mean()))
        self._metrics["dynamic_sample/resampled_groups"].append(float(sum(gi >= needed for gi in groups)))
        self._metrics["dynamic_sample/zero_std_groups_kept"].append(float(sum(not signal[gi] for gi in groups)))
        return [pool[i] for i in index.tolist()], every.select(index)

    def _rewards(self, rollouts: list[Rollout]) -> ScoredRewards:
        """The reward functions' columns (rl/rewards/functions.py); a trajectory is scored as a whole, on its
        final answer with its conversation. A trajectory whose environment raised is dropped: no valid reward (out
        of its group's statistics and the rewards/* means) and no loss (`drop_failed_trajectories`)."""
        columns: dict[str, list] = defaultdict(list)
        keys = {k for r in rollouts for k in r.row if k != "messages"}
        for r in rollouts:
            for k in keys:
                columns[k].append(r.row.get(k))
        columns["completion_ids"] = [r.completion_ids for r in rollouts]
        columns["completion_lengths"] = [len(r.completion_ids) for r in rollouts]
        columns["prompts"] = [r.row["messages"] for r in rollouts]
        if self.worker.multi_turn.enabled:
            columns["messages"] = [r.messages for r in rollouts]
            columns["rollout_infos"] = [r.infos for r in rollouts]
            columns["step_rewards"] = [r.step_rewards for r in rollouts]
        if not self.reward_funcs:  # pure OPD-RL distillation: the teacher's per-token term is the whole signal
            return drop_failed_trajectories(rollouts, ScoredRewards(torch.zeros(len(rollouts)), {}, {}, {}))
        scored = combine_rewards(self.reward_funcs, self.reward.weights(), [r.answer for r in rollouts], **columns)
        return drop_failed_trajectories(rollouts, scored)

    def _logps(self, model, batch: dict, with_entropy: bool = False, with_unfiltered: bool = False) -> SampledLogps:
        """Per-token log-probs (rows, completion width) of the completion tokens under vLLM's sampling
        distribution (`grpo_batch.completion_logps`)."""
        return completion_logps(model, batch, self.sampling.temperature, self.sampling.top_k, self.sampling.top_p,
                                share_prompts=self.grpo.share_prompt_prefix,
                                prompt_model=self.accelerator.unwrap_model(model), with_entropy=with_entropy,
                                with_unfiltered=with_unfiltered)

    def _ref_logps(self, batch: dict) -> torch.Tensor:
        """The reference's temperature-scaled log-probs, without top-k/top-p (the KL rule in sampling.py)."""
        if self.ref_model is not None:
            return self._logps(self.ref_model, batch, with_unfiltered=True).unfiltered
        with self.accelerator.unwrap_model(self.model).disable_adapter():
            return self._logps(self.model, batch, with_unfiltered=True).unfiltered

    def _teacher_logps(self, batch: dict) -> torch.Tensor:
        """OPD-RL: the teacher's log-probs of the sampled tokens, temperature-scaled without top-k/top-p (the
        reference's rule: the teacher's own distribution, not the student's sampling set). A served teacher
        answers at temperature 1, which the arguments require then."""
        if isinstance(self.teacher, (ServedTeacher, TeacherReplicas)):
            return per_token_rows(self.teacher.sampled_logps(unpadded_sequences(batch)), batch["completion_ids"])
        if self.teacher is ADAPTER_DISABLED:
            with self.accelerator.unwrap_model(self.model).disable_adapter():
                return self._logps(self.model, batch, with_unfiltered=True).unfiltered
        return self._logps(self.teacher, batch, with_unfiltered=True).unfiltered

    # ------------------------------------------------------------------ loss
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        t = time.time()
        scored = self._logps(model, inputs, with_entropy=True, with_unfiltered=self.grpo.beta > 0)
        mask = inputs["completion_mask"]  # the sampled tokens only (a trajectory's inserted ids are context)
        tokens = mask.sum().clamp(min=1)
        metrics = {"entropy": torch.where(mask, scored.entropy, 0.0).sum() / tokens,
                   "sampling/forced_keep_frac": (scored.forced & mask).sum() / tokens}
        if self.grpo.top_entropy_quantile < 1.0:
            every, _ = gather_ragged(scored.entropy.detach()[mask])
            threshold = entropy_threshold(every, self.grpo.top_entropy_quantile)
            inputs = {**inputs, "entropy_mask": top_entropy_mask(scored.entropy, mask, threshold)}
        # Clip-Cov's draw: seeded by the run's seed and the micro-batch's number, alike on every rank
        self._micro_batches_scored += 1
        draw = torch.Generator().manual_seed(self.args.seed * 1_000_003 + self._micro_batches_scored)
        loss, loss_metrics = corrected_policy_loss(scored.logps, inputs, self.grpo, self.rollout, self.sampling,
                                                   reused=self._reuses_batches(),
                                                   num_processes=self.accelerator.num_processes,
                                                   kl_logps=scored.unfiltered, generator=draw)
        if aggregation_of(self.grpo.loss_type) == "dapo":  # its normaliser already covers the whole step
            loss = loss * self.current_gradient_accumulation_steps
        self.nonfinite.check_loss(self.state.global_step + 1, loss)
        self._record({**metrics, **loss_metrics})
        self._timed("train_forward", t)
        return loss

    def training_step(self, model, inputs, num_items_in_batch=None):
        t = time.time()
        out = super().training_step(model, inputs, num_items_in_batch)
        self._timed("train", t)
        self._span("learn", t)
        return out

    # ------------------------------------------------------------------ logging
    def _log_rollout_metrics(self, rollouts, scored: ScoredRewards, valid: torch.Tensor, dropped: torch.Tensor,
                             group_std: torch.Tensor) -> None:
        """`reward` and `reward_std` over the valid rewards; per function its mean and std where it applies and
        `rewards/<name>/missing`, the completions it could not score; under --reward_on_error skip also
        `rewards/<name>/failed` (completions whose call failed) and `reward_on_error/dropped_groups`."""
        m, rewards = self._metrics, scored.total[valid]
        if rewards.numel():  # none: every group dropped or unscored, no mean to report
            m["reward"].append(float(rewards.mean()))
            m["reward_std"].append(float(rewards.std()) if rewards.numel() > 1 else 0.0)
        m["frac_reward_zero_std"].append(float((group_std == 0).float().mean()))
        for name, vals in scored.per_func.items():
            m[f"rewards/{name}/missing"].append(float(scored.missing[name].sum()))
            if self.reward.reward_on_error == "skip":
                m[f"rewards/{name}/failed"].append(float(scored.failed[name].sum()))
            if vals.isnan().all():  # the function returned None for every sample: nothing to report
                continue
            m[f"rewards/{name}/mean"].append(float(torch.nanmean(vals)))
            m[f"rewards/{name}/std"].append(float(vals[~vals.isnan()].std()) if (~vals.isnan()).sum() > 1 else 0.0)
        if self.reward.reward_on_error == "skip":
            m["reward_on_error/dropped_groups"].append(float(dropped.sum()) / self.grpo.num_generations)
        current = self.worker.policy_version
        if current is not None:
            m["policy_version"].append(float(current))
        lengths = torch.tensor([len(r.completion_ids) for r in rollouts], dtype=torch.float32)
        m["completions/mean_length"].append(float(lengths.mean()))
        m["completions/min_length"].append(float(lengths.min()))
        m["completions/max_length"].append(float(lengths.max()))
        clipped = [bool(r.truncated) for r in rollouts]
        m["completions/clipped_ratio"].append(sum(clipped) / len(clipped))
        if self.worker.multi_turn.enabled:
            for key, value in multi_turn_metrics(rollouts).items():
                m[key].append(value)

    def _write_completions(self, rollouts, scored: ScoredRewards, dropped: torch.Tensor, advantages) -> None:
        """One line per completion: its total reward and each function's (null where there is none: not
        applicable, missing or failed; `missing` / `failed` name the functions of the last two; `dropped` marks
        every completion of a group dropped for a failed call); a trajectory's line also has its turns
        (`trajectory_record`)."""
        current = self.worker.policy_version
        decode = self.processing_class.decode
        with (self.run_dir / "completions.jsonl").open("a", encoding="utf-8") as f:
            for i, (r, adv) in enumerate(zip(rollouts, advantages.tolist())):
                line = {"step": self.state.global_step, "prompt": r.row["messages"][-1]["content"],
                        "completion": r.text, "reward": _number(scored.total[i]), "advantage": adv,
                        "rewards": {name: _number(v[i]) for name, v in scored.per_func.items()},
                        "policy_version": r.policy_version, "trainer_version": current}
                for kind, marks in (("missing", scored.missing), ("failed", scored.failed)):
                    names = [name for name, marked in marks.items() if marked[i]]
                    if names:
                        line[kind] = names
                if dropped[i]:
                    line["dropped"] = True
                if r.messages is not None:
                    line.update(answer=r.answer, **trajectory_record(r, decode))
                f.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")


def _number(value: torch.Tensor) -> float | None:
    """A reward for JSON: None for NaN (no reward), which JSON cannot write."""
    return None if value.isnan() else float(value)


def corrected_policy_loss(logps: torch.Tensor, inputs: dict, grpo: GrpoOptions, rollout: RolloutOptions,
                          sampling: SamplingOptions, *, reused: bool, num_processes: int = 1,
                          kl_logps: torch.Tensor | None = None, generator: torch.Generator | None = None
                          ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The GRPO loss of one micro-batch with the rollout corrections `rollout` asks for.

    ms-swift's order: mismatch metrics and IS weights on the full completion mask, then the off-policy
    sequence mask (against the rollout engine's log-probs, else the old ones) narrows the mask the loss
    is reduced over. `reused`: the batch serves more than one optimizer step, so the ratio's
    denominator is the sampling-time log-probs rather than the current ones detached. `kl_logps`: the
    policy's unfiltered log-probs for the KL to the reference (see `policy_loss`).

    `--rollout_rs` rejection (rl/core/rejection.py) narrows the mask, as verl's does: a rejected token has no loss
    and no place in a normaliser (the trainer's bnpo/dapo counts, `loss_tokens`, leave it out too). Under
    `--rollout_bypass_mode` the old log-probs are the engine's (set by the trainer), the ratio's denominator
    always, and the mismatch and rejection compare the current log-probs with them. `reward_valid` in `inputs`
    (the rows with a valid reward) is what grpo's mean over sequences and dr_grpo's batch size count.
    """
    mask = inputs["completion_mask"]
    # Without a stored copy (the trainer skips that pass when nothing needs it) the weights have not moved
    # since sampling, so the current log-probs are the sampling-time ones.
    at_rollout = inputs["old_logps"] if inputs.get("old_logps") is not None else logps.detach()
    bypass = rollout.rollout_bypass_mode
    old = at_rollout if reused or bypass else logps.detach()
    train_side = logps.detach() if bypass else at_rollout
    metrics: dict[str, torch.Tensor] = {}
    is_weights = None
    rollout_lp = inputs["rollout_logps"]
    mode, thr = rollout.rollout_importance_sampling_mode, rollout.rollout_importance_sampling_threshold
    if rollout_lp is not None and (mode is not None or rollout.log_rollout_offpolicy_metrics):
        for k, v in mismatch_metrics(train_side, rollout_lp, mask, mode=mode, threshold=thr).items():
            metrics[f"rollout_correction/{k}"] = v
    if rollout_lp is not None and mode is not None:
        is_weights, _, _ = rollout_is_weights(train_side, rollout_lp, mask, mode=mode, threshold=thr)
    rules = rollout.rejection()
    if rollout_lp is not None and rules:  # verl's: a rejected token leaves the mask, and so every normaliser
        keep, rejection_metrics = rollout_rejection_mask(train_side, rollout_lp, mask, rules)
        metrics.update({f"rollout_rs/{k}": v for k, v in rejection_metrics.items()})
        mask = mask & keep
    if rollout.off_policy_sequence_mask_delta is not None:
        behaviour = rollout_lp if rollout_lp is not None else at_rollout
        keep = off_policy_sequence_mask(logps, behaviour, mask, inputs["advantages"], rollout.off_policy_sequence_mask_delta)
        rows = mask.any(-1)
        metrics["off_policy_sequence_mask/masked_frac"] = (~keep & rows).sum() / rows.sum().clamp(min=1)
        mask = mask & keep.unsqueeze(-1)
    token_mask, kl_cov_tokens, selection_metrics = selected_tokens(logps, old, inputs, mask, grpo, generator)
    loss, loss_metrics = policy_loss(
        logps, old, inputs["advantages"], mask, loss_type=grpo.loss_type, epsilon_low=grpo.epsilon,
        epsilon_high=grpo.epsilon_high, tau_pos=grpo.tau_pos, tau_neg=grpo.tau_neg,
        importance_sampling_level=grpo.importance_sampling_level, token_mask=token_mask,
        kl_cov_tokens=kl_cov_tokens, ppo_kl_coef=grpo.ppo_kl_coef,
        ref_logps=inputs.get("ref_logps"), beta=0.0 if grpo.kl_in_reward else grpo.beta, kl_logps=kl_logps,
        max_completion_length=sampling.max_completion_length,
        rollout_is_weights=is_weights, num_items_in_batch=inputs.get("num_items_in_batch"),
        num_processes=num_processes, rows=inputs.get("reward_valid"))
    return loss, {**metrics, **selection_metrics, **loss_metrics}


def loss_tokens(batch: dict) -> int:
    """The completion tokens of a prepared micro-batch that the bnpo/dapo normalisers count: its completion mask
    (sampled ids with a valid reward) less what `--rollout_rs` rejected (verl's rule; under bypass mode decided in
    the loss pass itself, so not here). Tokens the off-policy sequence mask drops keep counting (`correction.py`)."""
    mask = batch["completion_mask"]
    keep = batch.get("rollout_rs_keep")
    return int((mask if keep is None else mask & keep).sum())


def selected_tokens(logps: torch.Tensor, old: torch.Tensor, inputs: dict, mask: torch.Tensor, grpo: GrpoOptions,
                    generator: torch.Generator | None = None
                    ) -> tuple[torch.Tensor | None, torch.Tensor | None, dict[str, torch.Tensor]]:
    """The tokens that get a policy gradient (`--top_entropy_quantile`, `--loss_type clip_cov`) and those that
    get KL-Cov's penalty, with the share of each among the completion tokens."""
    tokens = mask.sum().clamp(min=1)
    token_mask, kl_cov_tokens, metrics = inputs.get("entropy_mask"), None, {}
    if grpo.loss_type == "clip_cov":
        keep = clip_cov_mask(inputs["advantages"], logps, old, mask, clip_ratio=grpo.clip_cov_ratio,
                             lower=grpo.clip_cov_lb, upper=grpo.clip_cov_ub, epsilon_low=grpo.epsilon,
                             epsilon_high=grpo.epsilon if grpo.epsilon_high is None else grpo.epsilon_high,
                             generator=generator, gather=gather_ragged)
        metrics["clip_cov/stopped_frac"] = ((keep == 0) & mask).sum() / tokens
        token_mask = keep.bool() if token_mask is None else token_mask & keep.bool()
    if grpo.loss_type == "kl_cov":
        kl_cov_tokens = kl_cov_mask(inputs["advantages"], logps, mask, kl_ratio=grpo.kl_cov_ratio, gather=gather_ragged)
        metrics["kl_cov/selected_frac"] = kl_cov_tokens.sum() / tokens
    if token_mask is not None:
        metrics["token_selection/gradient_frac"] = (token_mask & mask).sum() / tokens
    return token_mask, kl_cov_tokens, metrics


# The OPD-RL teacher that is the student's own base: scored with the LoRA adapter disabled, no second copy.
ADAPTER_DISABLED = "adapter-disabled"


def make_ref_model(model, beta: float, tuner_type: str):
    """A frozen copy for full training with beta > 0; LoRA uses the base with adapters disabled."""
    if beta == 0 or tuner_type == "lora":
        return None
    from ...train.megatron.model import MegatronCausalLM
    if isinstance(model, MegatronCausalLM):  # its layers hold process groups, which do not copy: load it again
        ref = MegatronCausalLM(model.model_dir, params_dtype=model.params_dtype).to(model.device).eval()
    else:
        ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref
