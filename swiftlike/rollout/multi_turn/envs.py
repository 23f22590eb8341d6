"""Gym-style environments for multi-turn rollouts: ms-swift's `Env` interface, its `envs` registry and `math_env`.

An environment plays the user's side of a trajectory. `gym_scheduler` builds one per trajectory from the row's
`env_config` column (`{"name": "math_env", ...}`; `--gym_env` names it when the row does not), calls `reset` for
the first user message, then `step` after every assistant turn for the next observation, the step's reward and
whether the episode is over. Model output reaches `step` as untrusted text: an environment turns what it cannot
use into an observation saying so, and raises only for a broken row or a bug (the trainer then drops that
trajectory, counted and logged with its row).

Built-ins: `math_env` (here), `frozen_lake` (frozen_lake.py), `reasoning_gym` (adapters.py). More come from
`--external_plugins` files through `register_env`, or by ms-swift's `envs["name"] = MyEnv`.
"""
from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from typing import Any

from ...rl.rewards.functions import MathAccuracy
from ...utils.registry import Registry, source_of
from .trajectory import RolloutRequest


class Env(ABC):
    """One episode's environment; `env_config` is the row's `env_config` column (a dict, maybe empty)."""

    def __init__(self, env_config: dict):
        self.env_config = env_config

    @abstractmethod
    async def reset(self, request: RolloutRequest) -> tuple[str, dict, str]:
        """-> (observation: the first user message's text, info, system_message: '' keeps the row's)"""

    @abstractmethod
    async def step(self, action: list[dict]) -> tuple[str, float, bool, dict]:
        """action: the conversation so far, last message the assistant's -> (next_observation, reward, done, info)"""

    async def close(self) -> None:
        """Release what the episode holds (processes, connections); most environments hold nothing."""


# ms-swift's registry name, a dict: plugins written for ms-swift (`envs["my_env"] = MyEnv`) work unchanged, without
# the checks of register_env.
envs: Registry[type[Env]] = Registry("environment", "--gym_env")


def register_env(name: str, cls: type[Env] | None = None, override: bool = False):
    """Register an environment class under the name `--gym_env` or a row's `env_config["name"]` will use.

    Without `cls` this is a decorator: `@register_env("my_env")` above `class MyEnv(Env)`. A name registered
    to another class is refused unless `override=True` (the same rule as register_scheduler); registering the
    same class again does nothing.
    """
    if cls is None:
        return lambda c: register_env(name, c, override)
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"an environment name must be a non-empty string, got {name!r}")
    if not (inspect.isclass(cls) and issubclass(cls, Env)):
        raise ValueError(f"environment {name!r} must be a subclass of swiftlike.rollout.multi_turn.envs.Env "
                         f"(async reset, step, close), got {cls!r}")
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        raise ValueError(f"environment {name!r} ({cls.__name__}) does not implement {missing}")
    return envs.register(name, cls, override, origin=source_of)


def get_env(name: str) -> type[Env]:
    """The environment class registered as `name`."""
    if name not in envs:
        raise ValueError(f"unknown environment {name!r} (named by --gym_env or a row's env_config 'name'); "
                         f"registered: {', '.join(sorted(envs))}. A custom one must be registered with "
                         f"register_env({name!r}, cls) in a file passed to --external_plugins")
    return envs[name]


def last_assistant_text(action: list[dict], env_name: str) -> str:
    """The latest assistant reply of the conversation `step` receives ('' for a reply that only called tools)."""
    if not action or action[-1].get("role") != "assistant":
        last = action[-1].get("role") if action else "nothing"
        raise ValueError(f"{env_name}.step needs the conversation ending with the assistant's reply, got {last}")
    return action[-1].get("content") or ""


def question_of(request: RolloutRequest, env_name: str) -> str:
    """The row's question: ms-swift's `problem` column, else the text of the row's last user message."""
    problem = request.data_dict.get("problem")
    if isinstance(problem, str) and problem.strip():
        return problem
    for message in reversed(request.messages):
        if message.get("role") == "user" and isinstance(message.get("content"), str) and message["content"].strip():
            return message["content"]
    raise ValueError(f"{env_name}: the row has neither a 'problem' column nor a user message to ask; give one")


MATH_SYSTEM_PROMPT = ("You solve math problems step by step. Think the problem through, then give the final answer "
                      "inside <answer></answer> tags, for example <answer>42</answer>. If your answer is wrong you "
                      "will be asked to check it and answer again.")
MATH_RETRY = ("That answer is not correct. Check each step of your working carefully, then give the final answer "
              "again inside <answer></answer> tags.")


class MathEnv(Env):
    """ms-swift's SimpleMathEnv: the row's question, then 'not correct, try again' until the answer is right.

    The answer is checked against the row's `solution` column by the `accuracy` reward's own check (math-verify;
    `<answer>` tags, GSM8K's `####` and `\\boxed{}` all count). A right answer scores 1 and ends the episode; a
    wrong one scores 0 and asks again, so `--max_turns` bounds the attempts. ms-swift also ends an episode whose
    conversation passes 2048 Qwen tokens; here the scheduler's length limits (`--max_completion_length`,
    `--completion_length_limit_scope`) do that for every environment.
    """

    def __init__(self, env_config: dict):
        super().__init__(env_config)
        self.check = MathAccuracy()
        self.solution: str | None = None

    async def reset(self, request: RolloutRequest) -> tuple[str, dict, str]:
        solution = request.data_dict.get("solution")
        if solution is None or str(solution).strip() == "":
            raise ValueError("math_env needs a 'solution' column (the reference answer) in every row; this row has "
                             f"only: {', '.join(sorted(request.data_dict)) or 'messages'}")
        self.solution = str(solution)
        return question_of(request, "math_env"), {}, MATH_SYSTEM_PROMPT

    async def step(self, action: list[dict]) -> tuple[str, float, bool, dict[str, Any]]:
        if self.solution is None:
            raise RuntimeError("math_env.step before reset: call reset(request) first")
        score = self.check.score(last_assistant_text(action, "math_env"), self.solution)
        if score is None:
            raise ValueError(f"math_env: the row's solution {self.solution!r} cannot be read as a math answer by the "
                             "accuracy check; write it as a number or a LaTeX expression")
        if score == 1.0:
            return "Correct.", 1.0, True, {"correct": True}
        return MATH_RETRY, 0.0, False, {"correct": False}


register_env("math_env", MathEnv)
