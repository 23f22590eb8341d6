"""Answer extraction, correctness and pass@k: pure functions, tested against hand-computed values."""
from __future__ import annotations

import math
import re

NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def extract_final(text: str) -> str | None:
    """The final answer of a worked reply: after the last '####', else the last \\boxed{}, else the last number."""
    if "####" in text:
        tail = text.rsplit("####", 1)[1].strip()
        return tail.splitlines()[0].strip() if tail else None
    boxed = re.findall(r"\\boxed\{([^{}]*)\}", text)
    if boxed:
        return boxed[-1].strip()
    numbers = NUMBER.findall(text)
    return numbers[-1].replace(",", "") if numbers else None


def qa_correct(text: str, gold: str) -> bool:
    """math-verify equivalence of the extracted answer with the gold one (plain string match as fallback)."""
    found = extract_final(text)
    if found is None:
        return False
    from math_verify import ExprExtractionConfig, parse, verify
    config = [ExprExtractionConfig()]
    try:
        return bool(verify(parse(gold, extraction_config=config), parse(found, extraction_config=config)))
    except Exception:  # math-verify raises on inputs it cannot parse
        return found.replace(",", "").strip() == gold.strip()


def extract_choice(text: str, n_choices: int) -> str | None:
    """The chosen letter: 'answer is (B)' / 'Answer: B' first, else the first standalone letter."""
    letters = "ABCDEFGHIJ"[:n_choices]
    stated = re.findall(rf"answer\s*(?:is|:)?\s*\(?([{letters}])\b", text, flags=re.IGNORECASE)
    if stated:
        return stated[-1].upper()
    standalone = re.findall(rf"(?<![A-Za-z])([{letters}])(?![A-Za-z])", text)
    return standalone[0] if standalone else None


def pass_at_k(n: int, correct: int, k: int) -> float:
    """Unbiased pass@k from n samples with `correct` right (Chen et al., 2021): 1 - C(n-c, k) / C(n, k)."""
    if not 0 <= correct <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= correct <= n and 1 <= k <= n, got n={n} correct={correct} k={k}")
    if n - correct < k:
        return 1.0
    return 1.0 - math.comb(n - correct, k) / math.comb(n, k)


def reasoning_gym_score(dataset, entry: dict, text: str) -> tuple[float, str | None]:
    """The task's own verdict: reasoning-gym's `extract_answer` of the reply's <answer> tag, scored by the
    dataset's `score_answer` (a verifier that raises on a malformed answer scores it 0, as in training)."""
    from reasoning_gym.utils import extract_answer
    found = extract_answer(text)
    try:
        return float(dataset.score_answer(found, entry)), found
    except Exception:  # some tasks' verifiers raise on malformed answers: the model's fault, not the row's
        return 0.0, found
