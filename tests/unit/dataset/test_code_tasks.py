"""The built-in code task sets (swiftlike/code-tasks, swiftlike/code-tasks-test, made by scripts/make_code_tasks.py):
every reference solution passes its row's tests, through the code_exec reward's sandbox for one row of each kind;
the rows are distinct, the held-out set shares no task with the training set, and wrong code does not pass."""
import pytest

from swiftlike.dataset import load_dataset
from swiftlike.rl.rewards.code_exec import CodeExecReward

SETS = ["swiftlike/code-tasks", "swiftlike/code-tasks-test"]


def prompt(row: dict) -> str:
    return row["messages"][0]["content"]


@pytest.mark.parametrize("name", SETS)
def test_every_reference_passes_its_tests(name):
    """In this process for every row (our own code, so no sandbox needed); then as a completion, through the
    reward, for the first row of each kind."""
    rows = load_dataset([name])
    for row in rows:
        namespace: dict = {}
        exec(row["reference"], namespace)
        for test in row["test_cases"]:
            exec(test, namespace)
    first = list({row["task"]: row for row in reversed(rows)}.values())
    assert len(first) == 13
    completions = [f"Here is the function.\n```python\n{row['reference']}```" for row in first]
    assert CodeExecReward()(completions, test_cases=[row["test_cases"] for row in first]) == [1.0] * len(first)
    # a function that answers one constant (its first case's answer) does not pass a whole row
    constant = [f"```python\ndef {row['test_cases'][0][7:].split('(')[0]}(*args):\n"
                f"    return {row['test_cases'][0].rsplit(' == ', 1)[1]}\n```" for row in first]
    assert all(share < 1.0 for share in CodeExecReward()(constant, test_cases=[row["test_cases"] for row in first]))


def test_sizes_distinct_prompts_and_no_shared_task():
    train, test = (load_dataset([name]) for name in SETS)
    assert (len(train), len(test)) == (200, 50)
    assert len({prompt(row) for row in train}) == 200 and len({prompt(row) for row in test}) == 50
    assert not {prompt(row) for row in train} & {prompt(row) for row in test}
    assert {row["task"] for row in train} == {row["task"] for row in test}
    assert all(len(row["test_cases"]) == 5 and all(t.startswith("assert ") for t in row["test_cases"])
               for row in train + test)
    # two different answers in every row: a function returning a constant passes none whole
    assert all(len({t.rsplit(" == ", 1)[1] for t in row["test_cases"]}) > 1 for row in train + test)
