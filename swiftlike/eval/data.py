"""Benchmarks: the built-in sets shipped in eval/data/ and local jsonl files, as questions with prompts.

Two row formats: question answering `{"question", "answer"}` (answers compared with math-verify, so
"1/2" equals "0.5"), and multiple choice `{"question", "choices": [...], "answer": "B"}`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
BUILTIN = {"math": DATA / "math.jsonl", "mcq": DATA / "mcq.jsonl"}
LETTERS = "ABCDEFGHIJ"
QA_SUFFIX = "\nSolve it and end your reply with the final answer after '####', like '#### 42'."
MCQ_SUFFIX = "\nAnswer with the letter of the correct choice."


@dataclass
class Question:
    prompt: str
    answer: str
    kind: str  # "qa" or "mcq"
    choices: list[str] | None = None


def load_benchmark(name: str, limit: int | None = None) -> list[Question]:
    path = BUILTIN.get(name) or Path(name)
    if not path.is_file():
        raise ValueError(f"--eval_dataset {name!r}: not a built-in benchmark ({', '.join(BUILTIN)}) and no such file")
    questions = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{n}: not valid JSON ({e})") from None
        questions.append(_question(row, f"{path}:{n}"))
        if limit is not None and len(questions) >= limit:
            break
    if not questions:
        raise ValueError(f"{path}: no questions")
    return questions


def _question(row: dict, where: str) -> Question:
    if not isinstance(row, dict) or not isinstance(row.get("question"), str) or "answer" not in row:
        raise ValueError(f"{where}: a row needs `question` (text) and `answer`; multiple choice adds `choices`")
    choices = row.get("choices")
    if choices is None:
        return Question(row["question"] + QA_SUFFIX, str(row["answer"]), "qa")
    if not isinstance(choices, list) or not 2 <= len(choices) <= len(LETTERS):
        raise ValueError(f"{where}: `choices` must be a list of 2 to {len(LETTERS)} options")
    letter = str(row["answer"]).strip().upper()
    if letter not in LETTERS[:len(choices)]:
        raise ValueError(f"{where}: `answer` must be one of {LETTERS[:len(choices)]} (the correct choice's letter)")
    lines = "\n".join(f"{LETTERS[i]}. {c}" for i, c in enumerate(choices))
    return Question(f"{row['question']}\n{lines}{MCQ_SUFFIX}", letter, "mcq", [str(c) for c in choices])
