"""Write the built-in evaluation sets under swiftlike/eval/data/ (deterministic; rerun to regenerate).

math.jsonl: 200 two-step word problems ({"question", "answer"}), worded unlike swiftlike/arithmetic so
no question is shared with the training sets. mcq.jsonl: 200 four-choice questions ({"question",
"choices", "answer": letter}) on arithmetic facts, with near-miss distractors.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "swiftlike" / "eval" / "data"
ITEMS = ["apples", "pencils", "stickers", "marbles", "books", "coins", "cookies", "stamps"]
NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana"]


def word_problem(rng: random.Random) -> dict:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    kind = rng.randrange(3)
    if kind == 0:
        a, b, c = rng.randint(5, 60), rng.randint(2, 30), rng.randint(1, 20)
        q = f"{name} has {a} {item}, buys {b} more and then gives away {c}. How many {item} does {name} have now?"
        ans = a + b - c
    elif kind == 1:
        boxes, per, extra = rng.randint(2, 12), rng.randint(2, 12), rng.randint(1, 15)
        q = f"{name} fills {boxes} boxes with {per} {item} each and has {extra} {item} left over. How many {item} " \
            f"were there in all?"
        ans = boxes * per + extra
    else:
        per, days, used = rng.randint(3, 15), rng.randint(2, 9), rng.randint(1, 10)
        q = f"{name} collects {per} {item} a day for {days} days, then loses {used}. How many {item} are left?"
        ans = per * days - used
    return {"question": q, "answer": str(ans)}


def mcq(rng: random.Random) -> dict:
    a, b = rng.randint(2, 19), rng.randint(2, 19)
    op = rng.choice(["+", "-", "*"])
    value = {"+": a + b, "-": a - b, "*": a * b}[op]
    wrong = set()
    while len(wrong) < 3:
        candidate = value + rng.choice([-10, -2, -1, 1, 2, 10, a, -b])
        if candidate != value:
            wrong.add(candidate)
    choices = [str(x) for x in [value, *wrong]]
    rng.shuffle(choices)
    return {"question": f"What is {a} {op} {b}?", "choices": choices, "answer": "ABCD"[choices.index(str(value))]}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rng = random.Random(20261129)
    for name, make in (("math.jsonl", word_problem), ("mcq.jsonl", mcq)):
        rows, seen = [], set()
        while len(rows) < 200:
            row = make(rng)
            if row["question"] not in seen:
                seen.add(row["question"])
                rows.append(row)
        (OUT / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"wrote {len(rows)} rows to {OUT / name}")


if __name__ == "__main__":
    main()
