"""What the GRPO trainer does with multi-turn trajectories besides training on their sampled ids: drops those
whose environment raised (no reward, out of their group's statistics, no loss), reports the per-step
`multi_turn/*` metrics, and writes each trajectory's record in completions.jsonl, its completion ids split into the
turns the model sampled and the ids inserted between them."""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from itertools import groupby

import torch

from ...utils import get_logger
from ..rewards.functions import ScoredRewards
from .rollout_worker import Rollout

logger = get_logger("swiftlike.rl")


def multi_turn_metrics(rollouts: Sequence[Rollout]) -> dict[str, float]:
    """`multi_turn/turns_mean` and `turns_max` (assistant turns per trajectory), `tool_calls` and `tool_errors`
    (per trajectory, mean), `env_errors` (trajectories dropped because their environment raised, a count) and
    `truncated` (the fraction cut by a length limit)."""
    n = len(rollouts)
    if not n:
        return {}
    return {"multi_turn/turns_mean": sum(r.turns for r in rollouts) / n,
            "multi_turn/turns_max": float(max(r.turns for r in rollouts)),
            "multi_turn/tool_calls": sum(r.tool_calls for r in rollouts) / n,
            "multi_turn/tool_errors": sum(r.tool_errors for r in rollouts) / n,
            "multi_turn/env_errors": float(sum(r.env_error is not None for r in rollouts)),
            "multi_turn/truncated": sum(bool(r.truncated) for r in rollouts) / n}


def drop_failed_trajectories(rollouts: Sequence[Rollout], scored: ScoredRewards) -> ScoredRewards:
    """The rewards with the trajectories whose environment raised dropped, each logged as a warning with its row.

    Dropped means as if never generated: no valid reward (`env_failed`, so `valid` False, total and per-function
    values NaN), so they are out of their group's mean and std and of every batch statistic and get advantage 0,
    and no loss (`tensorize` gives them no completion tokens; the trainer narrows the mask by `valid`). A reward of 0
    instead would count them as wrong answers: three right answers beside one env error got advantages of
    0.5 each and -1.5 instead of 0."""
    failed = torch.tensor([r.env_error is not None for r in rollouts], dtype=torch.bool)
    if not failed.any():
        return scored
    for r in rollouts:
        if r.env_error is not None:
            logger.warning("an environment raised (%s); its trajectory is dropped (no reward, no loss) and the run "
                           "goes on. Row: %s", r.env_error, json.dumps(r.row, ensure_ascii=False, default=str)[:2000])
    nan = float("nan")
    return ScoredRewards(scored.total.masked_fill(failed, nan),
                         {name: values.masked_fill(failed, nan) for name, values in scored.per_func.items()},
                         scored.missing, scored.failed, env_failed=scored.env_failed | failed)


def turn_segments(rollout: Rollout, decode: Callable[[list[int]], str]) -> list[dict]:
    """The completion ids as runs of sampled ids (`"sampled": true`, trained on) and inserted ids (tool results,
    observations, next-turn headers: context only), in order, each with its token count and decoded text."""
    mask = rollout.loss_mask if rollout.loss_mask is not None else [1] * len(rollout.completion_ids)
    segments, start = [], 0
    for sampled, run in groupby(mask):
        count = len(list(run))
        ids = rollout.completion_ids[start:start + count]
        segments.append({"sampled": bool(sampled), "tokens": count, "text": decode(ids)})
        start += count
    return segments


def trajectory_record(rollout: Rollout, decode: Callable[[list[int]], str]) -> dict:
    """A trajectory's fields in completions.jsonl, beside the prompt, completion and reward every line has."""
    return {"turns": rollout.turns, "messages": rollout.messages, "segments": turn_segments(rollout, decode),
            "sampled_tokens": rollout.sampled_tokens, "truncated": rollout.truncated,
            "finish_reason": rollout.finish_reason, "tool_calls": rollout.tool_calls,
            "tool_errors": rollout.tool_errors, "step_rewards": rollout.step_rewards, "env_error": rollout.env_error,
            "rollout_infos": rollout.infos}
