"""Write the built-in agent datasets into swiftlike/dataset/data/ (make_builtin_datasets.py writes them too).

swiftlike/calculator-agent: questions a 135M model cannot answer in its head (products of 3- and 4-digit
numbers, sums of two such products, a product less a refund, letters counted in a word), each as a full tool
trace in ms-swift's agent format: user -> tool_call(s) -> tool_response(s) -> ... -> final answer ending in
'#### <answer>'. Two tools are offered on every row (`calculator`, `count_letters`), so choosing the right one
is part of the task; some rows make two calls at once, some call again with an earlier result.
swiftlike/calculator-agent-test: held-out questions (none shared with the training rows), as prompts with the
same tools and the answer in `solution`, for evaluation and RL.

Every tool result is computed by the tools in swiftlike/tools/, so the traces are what a tool loop would see.
Deterministic (fixed seeds): rerunning reproduces the committed files byte for byte.

    .venv/bin/python scripts/make_agent_datasets.py
"""
from __future__ import annotations

import json
import random
from pathlib import Path

from swiftlike.tools import TOOL_REGISTRY, call_tool
from swiftlike.utils import atomic_write_jsonl

DATA_DIR = Path(__file__).resolve().parent.parent / "swiftlike" / "dataset" / "data"
TRAIN_FILE, TEST_FILE = "calculator_agent.jsonl", "calculator_agent_test.jsonl"
TRAIN_ROWS, TEST_ROWS = 1000, 200
ANSWER_INSTRUCTION = "End your reply with the final answer after '####', like '#### 42'."
TOOLS = json.dumps([TOOL_REGISTRY[name].schema() for name in ("calculator", "count_letters")], ensure_ascii=False)

WORDS = ("strawberry", "banana", "mississippi", "committee", "bookkeeper", "independence", "occurrence",
         "parallel", "possession", "assessment", "necessary", "accommodation", "embarrass", "millennium",
         "abracadabra", "bubble", "coffee", "balloon", "pepper", "address", "success", "tomorrow", "referee",
         "engineer", "excellent", "giraffe", "hippopotamus", "kangaroo", "lollipop", "mammal", "noodle",
         "papaya", "raspberry", "sassafras", "tennessee", "umbrella", "vanilla", "woodpecker", "zucchini",
         "alphabet", "cinnamon", "dessert", "elephant", "grasshopper", "honeybee", "jellyfish", "mirror",
         "narrator", "photograph", "pineapple", "programming", "remember", "statistics", "volleyball",
         "watermelon", "chocolate", "caterpillar", "dictionary", "helicopter", "butterfly")
PRODUCT_QUESTIONS = ("What is {a} * {b}?", "Calculate {a} × {b}.", "Multiply {a} by {b}.",
                     "What is the product of {a} and {b}?",
                     "A warehouse holds {a} boxes with {b} screws in each. How many screws is that?",
                     "A farm ships {a} crates of {b} apples each. How many apples does it ship?")
SUM_QUESTIONS = ("What is {a} * {b} + {c} * {d}?", "Calculate {a} × {b} + {c} × {d}.",
                 "A shop sold {a} pens at {b} cents and {c} notebooks at {d} cents. How many cents did it take in?")
REFUND_QUESTIONS = ("What is {a} * {b} - {c}?",
                    "A school orders {a} chairs at {b} dollars each and gets a discount of {c} dollars. "
                    "How many dollars does it pay?")
LETTER_QUESTIONS = ("How many times does the letter '{letter}' appear in '{word}'?",
                    "Count the letter '{letter}' in the word '{word}'.",
                    "How many '{letter}'s are there in '{word}'?")


def _call(name: str, **arguments) -> tuple[dict, dict]:
    """The tool_call message and the tool_response message the tool itself gives."""
    call = {"role": "tool_call", "content": json.dumps({"name": name, "arguments": arguments})}
    return call, {"role": "tool_response", "content": call_tool(name, arguments)}


def _result(response: dict) -> int:
    return json.loads(response["content"])["result"]


def _number(rng: random.Random) -> int:
    return rng.randint(100, 999) if rng.random() < 0.5 else rng.randint(1000, 9999)


def _product(rng: random.Random) -> tuple[tuple, str, list[dict], int]:
    a, b = _number(rng), _number(rng)
    call, response = _call("calculator", expression=f"{a} * {b}")
    answer = _result(response)
    final = {"role": "assistant", "content": f"{a} × {b} = {answer}.\n#### {answer}"}
    return ("product", a, b), rng.choice(PRODUCT_QUESTIONS).format(a=a, b=b), [call, response, final], answer


def _sum_of_products(rng: random.Random) -> tuple[tuple, str, list[dict], int]:
    """Two calls at once, then a third on their results: two tool rounds in one row."""
    a, b, c, d = (_number(rng) for _ in range(4))
    first, first_result = _call("calculator", expression=f"{a} * {b}")
    second, second_result = _call("calculator", expression=f"{c} * {d}")
    left, right = _result(first_result), _result(second_result)
    total_call, total_result = _call("calculator", expression=f"{left} + {right}")
    answer = _result(total_result)
    final = {"role": "assistant", "content": f"{a} × {b} = {left} and {c} × {d} = {right}, so the total is "
                                             f"{answer}.\n#### {answer}"}
    trace = [first, second, first_result, second_result, total_call, total_result, final]
    return ("sum", a, b, c, d), rng.choice(SUM_QUESTIONS).format(a=a, b=b, c=c, d=d), trace, answer


def _refund(rng: random.Random) -> tuple[tuple, str, list[dict], int]:
    """A call whose result the next call needs."""
    a, b = _number(rng), _number(rng)
    c = rng.randint(10, 999)
    product_call, product_result = _call("calculator", expression=f"{a} * {b}")
    product = _result(product_result)
    note = {"role": "assistant", "content": f"{a} × {b} = {product}. Now I subtract {c}."}
    less_call, less_result = _call("calculator", expression=f"{product} - {c}")
    answer = _result(less_result)
    final = {"role": "assistant", "content": f"{product} - {c} = {answer}.\n#### {answer}"}
    trace = [product_call, product_result, note, less_call, less_result, final]
    return ("refund", a, b, c), rng.choice(REFUND_QUESTIONS).format(a=a, b=b, c=c), trace, answer


def _letters(rng: random.Random) -> tuple[tuple, str, list[dict], int]:
    word = rng.choice(WORDS)
    letter = rng.choice(word) if rng.random() < 0.9 else rng.choice([x for x in "aeiourstln" if x not in word]
                                                                   or ["q"])
    call, response = _call("count_letters", word=word, letter=letter)
    count = json.loads(response["content"])["count"]
    times = "time" if count == 1 else "times"
    final = {"role": "assistant", "content": f"The letter '{letter}' appears {count} {times} in '{word}'.\n"
                                             f"#### {count}"}
    return ("letters", word, letter), rng.choice(LETTER_QUESTIONS).format(letter=letter, word=word), \
        [call, response, final], count


KINDS = ((_product, 0.6, "multiply"), (_sum_of_products, 0.15, "sum_of_products"), (_refund, 0.1, "refund"),
         (_letters, 0.15, "count_letters"))


def _problems(count: int, seed: int, exclude: set[tuple]) -> list[tuple[str, tuple, str, list[dict], int]]:
    rng = random.Random(seed)
    seen, out = set(exclude), []
    while len(out) < count:
        make, _, task = rng.choices(KINDS, weights=[weight for _, weight, _ in KINDS])[0]
        key, question, trace, answer = make(rng)
        if key in seen:
            continue
        seen.add(key)
        out.append((task, key, question, trace, answer))
    return out


def agent_files() -> dict[str, list[dict]]:
    """File name -> rows; make_builtin_datasets.builtin_files() includes them and the tests compare it with the
    committed files."""
    test = _problems(TEST_ROWS, seed=11, exclude=set())
    train = _problems(TRAIN_ROWS, seed=12, exclude={key for _, key, *_ in test})
    train_rows = [{"tools": TOOLS, "messages": [{"role": "user", "content": f"{question} {ANSWER_INSTRUCTION}"},
                                                *trace],
                   "solution": str(answer), "task": task} for task, _, question, trace, answer in train]
    test_rows = [{"tools": TOOLS, "messages": [{"role": "user", "content": f"{question} {ANSWER_INSTRUCTION}"}],
                  "solution": str(answer), "task": task} for task, _, question, _, answer in test]
    return {TRAIN_FILE: train_rows, TEST_FILE: test_rows}


def main() -> None:
    for name, rows in agent_files().items():
        atomic_write_jsonl(DATA_DIR / name, rows)
        print(f"{DATA_DIR / name}: {len(rows)} rows")


if __name__ == "__main__":
    main()
