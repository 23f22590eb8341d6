"""What a multi-turn rollout works on and what it hands to the trainer.

`RolloutRequest` is one trajectory's state between turns, as schedulers and environments see it (ms-swift's
RolloutInferRequest). `Trajectory` is the finished result: the token ids the engine saw and sampled, in order,
with a loss mask that is 1 exactly on sampled ids, their behaviour log-probs and the policy versions that
sampled them, plus the conversation and the counters the trainer logs.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RolloutRequest:
    """One trajectory's state between turns (ms-swift's RolloutInferRequest)."""
    messages: list[dict]                 # the conversation so far (canonical roles: system/user/assistant/tool)
    tools: list[dict] | None = None      # OpenAI function schemas offered to the model
    data_dict: dict = field(default_factory=dict)  # the dataset row's other columns (solution, env_config, ...)
    uuid: str = ""                       # stable id of the trajectory (an environment instance is keyed by it)


@dataclass
class Trajectory:
    prompt_ids: list[int]                # the first turn's prompt ids, as the engine saw them
    completion_ids: list[int]            # every id after the prompt: sampled turns and inserted ids, in order
    loss_mask: list[int]                 # 1 = sampled by the engine, 0 = inserted (tool results, observations,
                                         # tips, next-turn headers); len == len(completion_ids)
    logprobs: list[float]                # the engine's log-prob of each completion id, 0.0 where loss_mask is 0
    version_spans: list[tuple[int, int]] | None  # (engine policy version, count) covering completion_ids in
                                         # order; an inserted run takes the version of the turn before it;
                                         # None when the engine reports no versions
    messages: list[dict]                 # the whole conversation at the end (rewards, completions.jsonl)
    turns: int                           # assistant turns sampled
    finish_reason: str                   # the last turn's (stop, length, ...)
    truncated: bool                      # cut by --max_completion_length (per round or total) or the model's length
    step_rewards: list[float] = field(default_factory=list)  # environment reward of each step, in order
    tool_calls: int = 0                  # calls the model made (parsed or not)
    tool_errors: int = 0                 # calls that did not parse, named a missing tool, raised, timed out ...
    env_error: str | None = None         # an environment that raised: the trainer drops this trajectory
    infos: dict = field(default_factory=dict)  # rollout_infos merged over turns (reward functions see them)
    text: str = ""                       # completion_ids decoded, for logs
