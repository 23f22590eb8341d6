"""Built-in datasets, declared as data: each name maps to a JSONL file shipped in the package.

They exist so every command can be tried, and every test run, on a machine with no hub
access. `scripts/make_builtin_datasets.py` regenerates the files.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..utils.registry import Registry

DATA_DIR = Path(__file__).parent / "data"

# Rows of datasets with this tag hold {{NAME}} and {{AUTHOR}}, filled from --model_name/--model_author.
SELF_COGNITION_TAG = "self-cognition"


@dataclass(frozen=True)
class DatasetMeta:
    """One built-in dataset.

    `path` is relative to `swiftlike/dataset/data/`; `columns` shows the row shape without opening the file.
    """
    name: str
    path: str
    description: str
    columns: tuple[str, ...]
    tags: tuple[str, ...] = ()

    @property
    def file(self) -> Path:
        return DATA_DIR / self.path


DATASET_REGISTRY: Registry[DatasetMeta] = Registry("dataset", "--dataset")


def register_dataset(meta: DatasetMeta) -> DatasetMeta:
    return DATASET_REGISTRY.register(meta.name, meta)


register_dataset(DatasetMeta(
    name="swiftlike/arithmetic",
    path="arithmetic.jsonl",
    description="2000 +, -, * questions on 1-2 digit numbers, some two-step; a user turn and the answer "
                "in `solution`, for RL with a verifiable reward. Answers are asked for as '#### <number>'.",
    columns=("messages", "solution"),
    tags=("rl", "math"),
))
register_dataset(DatasetMeta(
    name="swiftlike/arithmetic-sft",
    path="arithmetic_sft.jsonl",
    description="1000 questions like swiftlike/arithmetic (none shared) with short worked answers ending in "
                "'#### <number>', to teach the answer format before RL.",
    columns=("messages", "solution"),
    tags=("sft", "math"),
))
register_dataset(DatasetMeta(
    name="swiftlike/arithmetic-preference",
    path="arithmetic_preference.jsonl",
    description="400 arithmetic questions (none shared with swiftlike/arithmetic or -sft), each with a chosen "
                "worked answer ending '#### <number>' and a rejected off-style reply (no working, no '####'; a "
                "wrong number in half): preference pairs for dpo, kto, cpo, simpo, orpo and rm.",
    columns=("messages", "rejected_response", "solution"),
    tags=("dpo", "math"),
))
register_dataset(DatasetMeta(
    name="swiftlike/self-cognition",
    path="self_cognition.jsonl",
    description="Who-are-you questions whose answers name the model and its author; needs "
                "--model_name and --model_author.",
    columns=("messages", "lang"),
    tags=("sft", SELF_COGNITION_TAG),
))
register_dataset(DatasetMeta(
    name="swiftlike/alpaca-mini",
    path="alpaca_mini.jsonl",
    description="50 short general-knowledge instructions with answers, for SFT smoke tests.",
    columns=("instruction", "input", "output"),
    tags=("sft",),
))
register_dataset(DatasetMeta(
    name="swiftlike/preference-mini",
    path="preference_mini.jsonl",
    description="30 questions with a better and a worse answer, for DPO-style smoke tests.",
    columns=("query", "chosen", "rejected"),
    tags=("dpo",),
))
register_dataset(DatasetMeta(
    name="swiftlike/text-mini",
    path="text_mini.jsonl",
    description="40 short general-knowledge paragraphs as plain `text` rows, for `swiftlike pt` smoke tests.",
    columns=("text",),
    tags=("pt",),
))
register_dataset(DatasetMeta(
    name="swiftlike/calculator-agent",
    path="calculator_agent.jsonl",
    description="1000 tool traces in ms-swift's agent format (tools column, tool_call / tool_response turns): "
                "products of 3- and 4-digit numbers, sums of two products (two calls at once, then a third), a "
                "product less a refund (a call on an earlier result), letters counted in a word; tools "
                "calculator and count_letters on every row; final answers end in '#### <answer>' (also in "
                "`solution`). Made by scripts/make_agent_datasets.py.",
    columns=("tools", "messages", "solution", "task"),
    tags=("sft", "agent", "math"),
))
register_dataset(DatasetMeta(
    name="swiftlike/calculator-agent-test",
    path="calculator_agent_test.jsonl",
    description="200 held-out questions of the swiftlike/calculator-agent kinds (none shared with it), as a user "
                "turn with the same tools and the answer in `solution`: for evaluation and RL through a tool loop.",
    columns=("tools", "messages", "solution", "task"),
    tags=("rl", "agent", "math"),
))
register_dataset(DatasetMeta(
    name="swiftlike/frozen-lake",
    path="frozen_lake.jsonl",
    description="512 solvable 4x4 FrozenLake maps for the built-in `frozen_lake` environment (multi-turn GRPO with "
                "--multi_turn_scheduler gym_scheduler): ms-swift's row format, `env_config` = {name, seed, size}; "
                "the messages are the environment's system prompt and first board. Made by "
                "scripts/make_frozen_lake_dataset.py.",
    columns=("messages", "env_config"),
    tags=("rl", "agent", "env"),
))
register_dataset(DatasetMeta(
    name="swiftlike/frozen-lake-test",
    path="frozen_lake_test.jsonl",
    description="128 held-out FrozenLake maps like swiftlike/frozen-lake (no map shared with it), for evaluation.",
    columns=("messages", "env_config"),
    tags=("rl", "agent", "env"),
))
register_dataset(DatasetMeta(
    name="swiftlike/code-tasks",
    path="code_tasks.jsonl",
    description="200 small function-writing tasks for `--reward_funcs code_exec` (the sum of a list's multiples of k, "
                "words reversed, a string reversed, rotated or Caesar-shifted, FizzBuzz with its own divisors, primes, "
                "letters counted, digit powers, Fibonacci modulo m, palindromes in base b, long words, the k largest "
                "numbers), each with a parameter in its prompt: a user turn, five assert statements in `test_cases`, "
                "the `reference` solution and the `task` kind. Made by scripts/make_code_tasks.py.",
    columns=("messages", "test_cases", "reference", "task"),
    tags=("rl", "code"),
))
register_dataset(DatasetMeta(
    name="swiftlike/code-tasks-test",
    path="code_tasks_test.jsonl",
    description="50 held-out tasks of the swiftlike/code-tasks kinds (no kind and parameter shared with it), for "
                "evaluation.",
    columns=("messages", "test_cases", "reference", "task"),
    tags=("rl", "code"),
))
