"""Environments from other libraries, run unchanged behind our `Env`: reasoning-gym's procedural tasks.

`reasoning_gym` (the `agent` extra: `pip install 'swiftlike[agent]'`): each row's `env_config` names a
reasoning-gym task and the entry to play, `{"name": "reasoning_gym", "task": "basic_arithmetic", "seed": 0,
"size": 500, "index": 17, "config": {...}}`; `config` holds the task's own options (its config dataclass fields)
and may be left out. The environment regenerates that entry (the task's generator is deterministic in seed,
size and index), asks its question, and scores the reply's `<answer>...</answer>` with the task's own
`score_answer`. One answer ends the episode unless `max_attempts` allows more: then a reply scoring below 1
earns 0 and is asked again, and the last attempt's score is the reward, so a trajectory's total stays in [0, 1].
A verifier that raises on a reply (prime_factorization's does on a malformed list) scores it 0, the error in info.

`reasoning_gym_rows` writes such rows (question, `solution`, `env_config`): the dataset comes from the task's
generator itself, so no file is shipped per task; scripts/make_reasoning_gym_dataset.py writes them to JSONL.

verifiers environments (the library prime-rl trains on) have their own adapter, verifiers_env.py: verifiers cannot
be installed beside swiftlike, so it runs in its own virtualenv.
"""
from __future__ import annotations

import functools
import json
from typing import Any

from .envs import Env, last_assistant_text, register_env
from .trajectory import RolloutRequest

# The entry keys a row's env_config carries besides the env name; `config` holds the task's own options.
RG_KEYS = ("task", "seed", "size", "index", "config", "max_attempts", "system_prompt")
RG_RETRY = ("That answer is not right. Think again and give your final answer inside <answer></answer> tags.")


def _reasoning_gym():
    try:
        import reasoning_gym
        import reasoning_gym.utils
    except ImportError as e:
        raise RuntimeError("the reasoning_gym environment needs the reasoning-gym package: "
                           "pip install 'swiftlike[agent]'") from e
    return reasoning_gym


@functools.lru_cache(maxsize=64)
def task_dataset(task: str, seed: int, size: int, config_json: str):
    """One task's generator (cached: every trajectory of a row, and every row of a run, shares it)."""
    reasoning_gym = _reasoning_gym()
    if task not in reasoning_gym.factory.DATASETS:
        raise ValueError(f"reasoning_gym: unknown task {task!r}; reasoning-gym {reasoning_gym.__version__} has: "
                         f"{', '.join(sorted(reasoning_gym.factory.DATASETS))}")
    try:
        return reasoning_gym.create_dataset(task, seed=seed, size=size, **json.loads(config_json))
    except (TypeError, ValueError, AssertionError) as e:
        raise ValueError(f"reasoning_gym: task {task!r} refuses env_config config {config_json}: {e}") from e


def _int_field(env_config: dict, key: str, default: int | None, minimum: int) -> int:
    value = env_config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"reasoning_gym: env_config {key!r} must be an integer >= {minimum}, got {value!r} "
                         f"(env_config: {env_config})")
    return value


class ReasoningGymEnv(Env):
    """A reasoning-gym task entry: its question, its own verifier as the reward (see the module docstring)."""

    def __init__(self, env_config: dict):
        super().__init__(env_config)
        unknown = sorted(set(env_config) - set(RG_KEYS) - {"name"})
        if unknown:
            raise ValueError(f"reasoning_gym: unknown env_config keys {unknown}; it takes {', '.join(RG_KEYS)}")
        task = env_config.get("task")
        if not isinstance(task, str) or not task:
            raise ValueError(f"reasoning_gym: env_config needs 'task' (a reasoning-gym dataset name), got {env_config}")
        config = env_config.get("config") or {}
        if not isinstance(config, dict):
            raise ValueError(f"reasoning_gym: env_config 'config' must be an object of task options, got {config!r}")
        seed = _int_field(env_config, "seed", 0, 0)
        size = _int_field(env_config, "size", None, 1)
        self.index = _int_field(env_config, "index", None, 0)
        if self.index >= size:
            raise ValueError(f"reasoning_gym: env_config index {self.index} is past the task's size {size}")
        self.max_attempts = _int_field(env_config, "max_attempts", 1, 1)
        self.system_prompt = env_config.get("system_prompt", "default")
        self.dataset = task_dataset(task, seed, size, json.dumps(config, sort_keys=True))
        self.entry: dict[str, Any] = self.dataset[self.index]
        self.attempts = 0

    async def reset(self, request: RolloutRequest) -> tuple[str, dict, str]:
        prompts = _reasoning_gym().utils.SYSTEM_PROMPTS
        if self.system_prompt not in prompts:
            raise ValueError(f"reasoning_gym: env_config system_prompt {self.system_prompt!r} is none of "
                             f"reasoning-gym's: {', '.join(sorted(prompts))}")
        solution = request.data_dict.get("solution")
        if solution is not None and str(solution) != str(self.entry["answer"]):
            raise ValueError(f"reasoning_gym: the row's solution {solution!r} is not the answer of the entry its "
                             f"env_config names ({self.entry['answer']!r}); the row was written by another "
                             f"reasoning-gym release or another config: write the rows again")
        self.attempts = 0
        return self.entry["question"], {"task": self.env_config["task"], "index": self.index}, prompts[self.system_prompt]

    async def step(self, action: list[dict]) -> tuple[str, float, bool, dict[str, Any]]:
        answer = _reasoning_gym().utils.extract_answer(last_assistant_text(action, "reasoning_gym"))
        self.attempts += 1
        info: dict[str, Any] = {"attempt": self.attempts, "answer": answer}
        try:
            score = float(self.dataset.score_answer(answer, self.entry))
        except Exception as error:  # some tasks' verifiers raise on malformed answers: the model's, not the row's
            score, info["verifier_error"] = 0.0, f"{type(error).__name__}: {error}"
        info["score"] = score
        if score >= 1.0 or self.attempts >= self.max_attempts:
            return ("Correct." if score >= 1.0 else "No attempts left."), score, True, info
        return RG_RETRY, 0.0, False, info


def reasoning_gym_rows(task: str, *, size: int, seed: int = 0, config: dict | None = None,
                       max_attempts: int = 1) -> list[dict]:
    """`size` rows of one reasoning-gym task: the question as the user turn (so the rows also serve single-turn
    training and evaluation), the reference answer as `solution`, and the env_config `reasoning_gym` plays."""
    dataset = task_dataset(task, seed, size, json.dumps(config or {}, sort_keys=True))
    rows = []
    for index in range(size):
        entry = dataset[index]
        env_config = {"name": "reasoning_gym", "task": task, "seed": seed, "size": size, "index": index,
                      **({"config": config} if config else {}), **({"max_attempts": max_attempts}
                                                                   if max_attempts != 1 else {})}
        rows.append({"messages": [{"role": "user", "content": entry["question"]}],
                     "solution": None if entry["answer"] is None else str(entry["answer"]),
                     "env_config": env_config})
    return rows


register_env("reasoning_gym", ReasoningGymEnv)
