"""The swiftlike backend's benchmarks: the built-in sets shipped in eval/data/, reasoning-gym tasks, and local
jsonl files, as questions with prompts.

Row formats of a .jsonl file: question answering `{"question", "answer"}` (answers compared with math-verify,
so "1/2" equals "0.5"), multiple choice `{"question", "choices": [...], "answer": "B"}`, and the rows
scripts/make_reasoning_gym_dataset.py writes for GRPO (`env_config` naming a reasoning-gym entry), which are
scored like `rg:<task>`.

`rg:<task>`: the task's generator makes the questions (offline, deterministic in seed and index) and its own
`score_answer` scores the `<answer>...</answer>` of each reply. The default seed is RG_EVAL_SEED, far from the 0
that training rows use, so an eval set is held out from a GRPO set of the same task unless asked otherwise.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..arguments.eval_args import BUILTIN_SETS, REASONING_GYM_PREFIX
from ..utils.errors import UsageError

DATA = Path(__file__).resolve().parent / "data"
BUILTIN = {name: DATA / f"{name}.jsonl" for name in BUILTIN_SETS}
LETTERS = "ABCDEFGHIJ"
QA_SUFFIX = "\nSolve it and end your reply with the final answer after '####', like '#### 42'."
MCQ_SUFFIX = "\nAnswer with the letter of the correct choice."
RG_EVAL_SEED = 10_000  # reasoning-gym seeds entry i with seed + i: training rows (seed 0) stay below 10,000
RG_DEFAULT_SIZE = 100
RG_OWN_ARGS = ("seed", "size", "system_prompt")


@dataclass
class Question:
    prompt: str
    answer: str
    kind: str  # "qa", "mcq" or "rg"
    choices: list[str] | None = None
    system: str | None = None
    rg_dataset: Any = None  # kind "rg": the reasoning-gym dataset whose score_answer scores the reply
    rg_entry: dict | None = None


def load_benchmark(name: str, limit: int | None = None, dataset_args: dict | None = None) -> list[Question]:
    if name.startswith(REASONING_GYM_PREFIX):
        return reasoning_gym_questions(name[len(REASONING_GYM_PREFIX):], limit, dataset_args or {})
    path = BUILTIN.get(name) or Path(name)
    if not path.is_file():
        raise UsageError(f"--eval_dataset {name!r}: not a built-in benchmark ({', '.join(BUILTIN)}), not "
                         f"rg:<reasoning-gym task> and no such file")
    questions = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise UsageError(f"{path}:{n}: not valid JSON ({e})") from None
        questions.append(_question(row, f"{path}:{n}"))
        if limit is not None and len(questions) >= limit:
            break
    if not questions:
        raise UsageError(f"{path}: no questions")
    return questions


def reasoning_gym_questions(task: str, limit: int | None, dataset_args: dict) -> list[Question]:
    """`limit` (or dataset_args' `size`, default RG_DEFAULT_SIZE) entries of a reasoning-gym task; dataset_args'
    other keys are the task's own config fields."""
    from ..rollout.multi_turn.adapters import task_dataset
    size = dataset_args.get("size", limit or RG_DEFAULT_SIZE)
    seed = dataset_args.get("seed", RG_EVAL_SEED)
    for key, value in (("size", size), ("seed", seed)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if key == "size" else 0):
            raise UsageError(f"--eval_dataset_args rg:{task} {key}: expected an integer >= "
                             f"{1 if key == 'size' else 0}, got {value!r}")
    config = {k: v for k, v in dataset_args.items() if k not in RG_OWN_ARGS}
    dataset = task_dataset(task, seed, size, json.dumps(config, sort_keys=True))
    system = _rg_system_prompt(dataset_args.get("system_prompt", "default"))
    count = size if limit is None else min(limit, size)
    return [_rg_question(dataset, dataset[i], system) for i in range(count)]


def _rg_system_prompt(name: str) -> str:
    from reasoning_gym.utils import SYSTEM_PROMPTS
    if name not in SYSTEM_PROMPTS:
        raise UsageError(f"reasoning-gym system_prompt {name!r} is none of {', '.join(sorted(SYSTEM_PROMPTS))}")
    return SYSTEM_PROMPTS[name]


def _rg_question(dataset, entry: dict, system: str) -> Question:
    answer = "" if entry["answer"] is None else str(entry["answer"])
    return Question(entry["question"], answer, "rg", system=system, rg_dataset=dataset, rg_entry=entry)


def _rg_row_question(env_config: dict, where: str) -> Question:
    """A GRPO row of scripts/make_reasoning_gym_dataset.py: its env_config names the entry to regenerate."""
    from ..rollout.multi_turn.adapters import ReasoningGymEnv
    try:
        env = ReasoningGymEnv(env_config)
    except ValueError as e:
        raise UsageError(f"{where}: {e}") from None
    return _rg_question(env.dataset, env.entry, _rg_system_prompt(env.system_prompt))


def _question(row: dict, where: str) -> Question:
    env_config = row.get("env_config") if isinstance(row, dict) else None
    if isinstance(env_config, dict) and env_config.get("name") == "reasoning_gym":
        return _rg_row_question(env_config, where)
    if not isinstance(row, dict) or not isinstance(row.get("question"), str) or "answer" not in row:
        raise UsageError(f"{where}: a row needs `question` (text) and `answer`; multiple choice adds `choices`; "
                         "or a reasoning_gym `env_config`")
    choices = row.get("choices")
    if choices is None:
        return Question(row["question"] + QA_SUFFIX, str(row["answer"]), "qa")
    if not isinstance(choices, list) or not 2 <= len(choices) <= len(LETTERS):
        raise UsageError(f"{where}: `choices` must be a list of 2 to {len(LETTERS)} options")
    letter = str(row["answer"]).strip().upper()
    if letter not in LETTERS[:len(choices)]:
        raise UsageError(f"{where}: `answer` must be one of {LETTERS[:len(choices)]} (the correct choice's letter)")
    lines = "\n".join(f"{LETTERS[i]}. {c}" for i, c in enumerate(choices))
    return Question(f"{row['question']}\n{lines}{MCQ_SUFFIX}", letter, "mcq", [str(c) for c in choices])
