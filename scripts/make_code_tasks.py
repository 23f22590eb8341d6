"""Write the built-in code task sets into swiftlike/dataset/data/ (make_builtin_datasets.py writes them too).

swiftlike/code-tasks: 200 rows, swiftlike/code-tasks-test: 50 held-out rows of small function-writing tasks for
`--reward_funcs code_exec`: thirteen kinds (the sum of a list's multiples of k, words reversed and joined by a
separator, a string reversed, rotated or Caesar-shifted, FizzBuzz with its own divisors and words, primes, letters
and vowels counted, digit powers, Fibonacci modulo m, palindromes in base b, long words counted, the k largest
numbers), each kind with a parameter in its prompt, so no two rows ask the same. A row is a user turn, five
`test_cases` (assert statements: code_exec's layout) with at least two different answers (no constant passes them
all), the `reference` solution and the `task` kind; no (kind, parameter) of a test row is also a training row. Every expected value is computed by running the reference
solution here, so the references pass their tests by construction (the tests also check it through the reward's
sandbox).

Deterministic (fixed seeds): rerunning reproduces the committed files byte for byte.

    .venv/bin/python scripts/make_code_tasks.py
"""
from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from swiftlike.utils import atomic_write_jsonl

DATA_DIR = Path(__file__).resolve().parent.parent / "swiftlike" / "dataset" / "data"
TRAIN_FILE, TEST_FILE = "code_tasks.jsonl", "code_tasks_test.jsonl"
TRAIN_ROWS, TEST_ROWS = 200, 50
TEST_SHARE = 0.2  # of each kind's parameters, held out for the test rows
CASES = 5
ANSWER_INSTRUCTION = "Answer with the complete function in one ```python code block."
WORDS = ("apple", "river", "stone", "cloud", "tiger", "maple", "ocean", "pixel", "lemon", "quartz", "zebra", "honey",
         "orbit", "velvet", "jungle", "anchor", "bridge", "candle", "dragon", "forest", "garden", "island", "kettle",
         "meadow", "needle", "pepper", "rocket", "silver", "tunnel", "wizard", "yellow", "sky", "owl", "ink", "a",
         "strawberry", "butterflies", "kaleidoscope", "thunderstorm", "marshmallow", "independent", "avocado",
         "photosynthesis", "encyclopedia", "labyrinth", "harmonica", "telescope")
PRIMES = tuple(p for p in range(2, 200) if all(p % d for d in range(2, int(p ** 0.5) + 1)))


@dataclass(frozen=True)
class Kind:
    """One kind of task: per parameter, the function to write and its reference solution; inputs to test it on."""
    task: str
    parameters: tuple
    # parameter -> (signature, what it does: the prompt's words after "Write a Python function `f(x)` that",
    # the reference solution's source)
    spec: Callable[[object], tuple[str, str, str]]
    inputs: Callable[[random.Random, object], tuple]  # (rng, parameter) -> one call's arguments


# --------------------------------------------------------------------------- test inputs


def _numbers(rng: random.Random, k: int = 1) -> tuple:
    """A list of up to 8 numbers, about half of them multiples of `k`."""
    return ([k * rng.randint(-5, 10) if rng.random() < 0.5 else rng.randint(-20, 50)
             for _ in range(rng.randint(0, 8))],)


def _sentence(rng: random.Random, _=None) -> tuple:
    return (" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 5))),)


def _word(rng: random.Random, _=None) -> tuple:
    return ("".join(rng.choice(string.ascii_letters) for _ in range(rng.randint(0, 9))),)


def _text(rng: random.Random, _=None) -> tuple:
    return (" ".join(rng.choice(WORDS).capitalize() if rng.random() < 0.3 else rng.choice(WORDS)
                     for _ in range(rng.randint(1, 4))) + rng.choice(("", "!", ", ok.", " 42")),)


def _letters_input(rng: random.Random, letters: str) -> tuple:
    """A text in which, more often than not, one to three of `letters` were put at random places."""
    text = list(_text(rng)[0])
    for _ in range(rng.choice((0, 0, 1, 2, 3))):
        letter = rng.choice(letters)
        text.insert(rng.randint(0, len(text)), letter.upper() if rng.random() < 0.3 else letter)
    return ("".join(text),)


def _fizzbuzz_input(rng: random.Random, parameter: tuple) -> tuple:
    """A multiple of both divisors, of one only, or of neither, each kind there is (4 | n means 2 | n) as often."""
    a, b = parameter[:2]
    kinds: dict[tuple[bool, bool], list[int]] = {}
    for n in range(1, 151):
        kinds.setdefault((n % a == 0, n % b == 0), []).append(n)
    return (rng.choice(kinds[rng.choice(sorted(kinds))]),)


def _palindrome_input(rng: random.Random, base: int) -> tuple:
    """Half the time a palindrome in `base` (made by mirroring random digits), else any number."""
    if rng.random() < 0.5:
        return (rng.randint(0, 5000),)
    half = [rng.randrange(1, base)] + [rng.randrange(base) for _ in range(rng.randint(0, 2))]
    digits = half + half[-1 - rng.randint(0, 1)::-1]
    return (sum(d * base ** i for i, d in enumerate(digits)),)


def _prime_input(rng: random.Random, name: str) -> tuple:
    if name == "is_prime":  # half of them primes
        return (rng.choice(PRIMES) if rng.random() < 0.5 else rng.randint(-3, 200),)
    low, high = {"count_primes": (0, 150), "next_prime": (-5, 200), "prime_factors": (2, 500)}[name]
    return (rng.randint(low, high),)


# --------------------------------------------------------------------------- the kinds, one function each


def _sum_divisible(k: int) -> tuple[str, str, str]:
    what = "returns the sum of the numbers in the list `xs`" + (f" that are divisible by {k}" if k > 1 else "")
    return "sum_divisible(xs)", what, f"def sum_divisible(xs):\n    return sum(x for x in xs if x % {k} == 0)\n"


def _reverse_words(sep: str) -> tuple[str, str, str]:
    return ("reverse_words(s)", f"splits the string `s` on spaces and returns its words in reverse order, joined "
            f"by {sep!r}", f"def reverse_words(s):\n    return {sep!r}.join(reversed(s.split()))\n")


_REVERSALS = {"reversed": "", "reversed and in upper case": ".upper()", "reversed and in lower case": ".lower()",
              "reversed with the case of each letter swapped": ".swapcase()"}


def _reverse_string(how: str) -> tuple[str, str, str]:
    return "reverse_string(s)", f"returns the string `s` {how}", \
        f"def reverse_string(s):\n    return s[::-1]{_REVERSALS[how]}\n"


def _rotate_left(k: int) -> tuple[str, str, str]:
    what = (f"returns the string `s` rotated left by {k} character{'s' * (k > 1)} (its first {k} move to the end; a "
            f"string shorter than that rotates by {k} modulo its length, and an empty string stays empty)")
    return "rotate_left(s)", what, \
        f"def rotate_left(s):\n    if not s:\n        return s\n    k = {k} % len(s)\n    return s[k:] + s[:k]\n"


_FIZZ_WORDS = (("Fizz", "Buzz"), ("Foo", "Bar"), ("Ping", "Pong"))


def _fizzbuzz(parameter: tuple) -> tuple[str, str, str]:
    a, b, (fizz, buzz) = parameter
    what = (f"returns {fizz + buzz!r} if the integer `n` is divisible by both {a} and {b}, {fizz!r} if only by {a}, "
            f"{buzz!r} if only by {b}, and otherwise `n` as a string")
    return "fizzbuzz(n)", what, (
        f"def fizzbuzz(n):\n    if n % {a} == 0 and n % {b} == 0:\n        return {fizz + buzz!r}\n"
        f"    if n % {a} == 0:\n        return {fizz!r}\n    if n % {b} == 0:\n        return {buzz!r}\n"
        "    return str(n)\n")


_PRIMES = {
    "is_prime": ("returns True if the integer `n` is a prime number and False otherwise",
                 "    if n < 2:\n        return False\n    d = 2\n    while d * d <= n:\n        if n % d == 0:\n"
                 "            return False\n        d += 1\n    return True\n"),
    "count_primes": ("returns how many prime numbers are smaller than the integer `n`",
                     "    return sum(all(p % d for d in range(2, int(p ** 0.5) + 1)) for p in range(2, n))\n"),
    "next_prime": ("returns the smallest prime number greater than the integer `n`",
                   "    p = max(n + 1, 2)\n    while any(p % d == 0 for d in range(2, int(p ** 0.5) + 1)):\n"
                   "        p += 1\n    return p\n"),
    "prime_factors": ("returns the prime factors of the integer `n` (n >= 2) in increasing order, each as often as "
                      "it divides `n`",
                      "    factors, d = [], 2\n    while d * d <= n:\n        while n % d == 0:\n"
                      "            factors.append(d)\n            n //= d\n        d += 1\n    if n > 1:\n"
                      "        factors.append(n)\n    return factors\n"),
}


def _primes(name: str) -> tuple[str, str, str]:
    what, body = _PRIMES[name]
    return f"{name}(n)", what, f"def {name}(n):\n{body}"


def _count_letters(letters: str) -> tuple[str, str, str]:
    """One letter to count, or the vowels (several letters)."""
    if len(letters) > 1:
        return ("count_vowels(s)", f"returns the number of vowels ({', '.join(letters)}; upper or lower case) in the "
                "string `s`", f"def count_vowels(s):\n    return sum(c in {letters!r} for c in s.lower())\n")
    return ("count_letter(s)", f"returns how many times the letter '{letters}' occurs in the string `s`, in upper or "
            "lower case", f"def count_letter(s):\n    return s.lower().count({letters!r})\n")


def _digit_power_sum(k: int) -> tuple[str, str, str]:
    return ("digit_power_sum(n)", f"returns the sum of the digits of the non-negative integer `n`, each raised to the "
            f"power {k}", f"def digit_power_sum(n):\n    return sum(int(d) ** {k} for d in str(n))\n")


def _fib_mod(m: int) -> tuple[str, str, str]:
    return ("fib_mod(n)", f"returns the `n`-th Fibonacci number modulo {m}, where the sequence starts fib_mod(0) == 0 "
            "and fib_mod(1) == 1",
            f"def fib_mod(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a % {m}\n")


def _palindrome_base(b: int) -> tuple[str, str, str]:
    return ("is_palindrome_base(n)", f"returns True if the non-negative integer `n`, written in base {b}, reads the "
            "same backwards, and False otherwise",
            f"def is_palindrome_base(n):\n    digits = []\n    while True:\n        digits.append(n % {b})\n"
            f"        n //= {b}\n        if n == 0:\n            return digits == digits[::-1]\n")


def _caesar(k: int) -> tuple[str, str, str]:
    return ("caesar(s)", f"shifts each lowercase letter of the string `s` forward by {k} places in the alphabet, "
            "wrapping around from 'z' to 'a', and leaves every other character as it is",
            f"def caesar(s):\n    return ''.join(chr((ord(c) - 97 + {k}) % 26 + 97) if 'a' <= c <= 'z' else c "
            "for c in s)\n")


def _count_longer(k: int) -> tuple[str, str, str]:
    return ("count_longer(words)", f"returns how many strings in the list `words` are longer than {k} characters",
            f"def count_longer(words):\n    return sum(len(w) > {k} for w in words)\n")


def _top_k(k: int) -> tuple[str, str, str]:
    return ("top_k(xs)", f"returns the {k} largest numbers of the list `xs` in decreasing order (all of them, sorted "
            f"so, when it has fewer than {k})", f"def top_k(xs):\n    return sorted(xs, reverse=True)[:{k}]\n")


KINDS: tuple[Kind, ...] = (
    Kind("sum_divisible", tuple(range(1, 21)), _sum_divisible, _numbers),
    Kind("reverse_words", (" ", "-", ", ", "|", "_", "/", " + ", "."), _reverse_words, _sentence),
    Kind("reverse_string", tuple(_REVERSALS), _reverse_string, _word),
    Kind("rotate_left", tuple(range(1, 21)), _rotate_left, _word),
    Kind("fizzbuzz", tuple((a, b, words) for a in range(2, 10) for b in range(a + 1, 10) for words in _FIZZ_WORDS),
         _fizzbuzz, _fizzbuzz_input),
    Kind("primes", tuple(_PRIMES), _primes, _prime_input),
    Kind("count_letters", tuple(string.ascii_lowercase) + ("aeiou", "aeiouy"), _count_letters, _letters_input),
    Kind("digit_power_sum", tuple(range(1, 7)), _digit_power_sum,
         lambda rng, _: (rng.choice((0, rng.randint(1, 99), rng.randint(100, 99999))),)),
    Kind("fib_mod", tuple(range(2, 41)) + (100, 1000, 10 ** 9 + 7), _fib_mod, lambda rng, _: (rng.randint(0, 90),)),
    Kind("palindrome_base", tuple(range(2, 17)), _palindrome_base, _palindrome_input),
    Kind("caesar", tuple(range(1, 26)), _caesar, _text),
    Kind("count_longer", tuple(range(1, 11)), _count_longer, lambda rng, _: (_sentence(rng)[0].split(),)),
    Kind("top_k", tuple(range(1, 7)), _top_k, lambda rng, _: _numbers(rng)),
)


def _row(kind: Kind, parameter, rng: random.Random) -> dict:
    signature, what, reference = kind.spec(parameter)
    namespace: dict = {}
    exec(reference, namespace)  # our own reference solution, to compute the expected values
    name = signature.split("(")[0]
    calls: dict[str, object] = {}  # call -> the reference's answer
    for _ in range(1000):
        arguments = kind.inputs(rng, parameter)
        calls.setdefault(f"{name}({', '.join(repr(a) for a in arguments)})", namespace[name](*arguments))
        if len(calls) == CASES:
            if len({repr(answer) for answer in calls.values()}) > 1:
                break
            calls.popitem()  # one answer to every case: a function returning a constant would pass them all
    else:
        raise ValueError(f"{kind.task} {parameter!r}: no {CASES} cases with two different answers")
    prompt = f"Write a Python function `{signature}` that {what}. {ANSWER_INSTRUCTION}"
    return {"messages": [{"role": "user", "content": prompt}],
            "test_cases": [f"assert {call} == {expected!r}" for call, expected in calls.items()],
            "reference": reference, "task": kind.task}


def _round_robin(pools: list[list], count: int) -> list:
    """`count` items taken one per pool in turn (a pool that runs out is skipped), so every kind is represented."""
    taken, position = [], 0
    while len(taken) < count:
        if not any(len(pool) > position for pool in pools):
            raise ValueError(f"only {len(taken)} tasks for {count} rows")
        taken += [pool[position] for pool in pools if len(pool) > position][:count - len(taken)]
        position += 1
    return taken


def code_task_files() -> dict[str, list[dict]]:
    """File name -> rows; make_builtin_datasets.builtin_files() includes them and the tests compare it with the
    committed files."""
    rng = random.Random(20261)
    train_pools, test_pools = [], []
    for kind in KINDS:
        parameters = list(kind.parameters)
        rng.shuffle(parameters)
        held_out = max(1, round(len(parameters) * TEST_SHARE))
        test_pools.append([(kind, p) for p in parameters[:held_out]])
        train_pools.append([(kind, p) for p in parameters[held_out:]])
    test = [_row(kind, parameter, rng) for kind, parameter in _round_robin(test_pools, TEST_ROWS)]
    train = [_row(kind, parameter, rng) for kind, parameter in _round_robin(train_pools, TRAIN_ROWS)]
    return {TRAIN_FILE: train, TEST_FILE: test}


def main() -> None:
    for name, rows in code_task_files().items():
        atomic_write_jsonl(DATA_DIR / name, rows)
        print(f"{DATA_DIR / name}: {len(rows)} rows")


if __name__ == "__main__":
    main()
