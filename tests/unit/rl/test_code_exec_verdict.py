"""`code_exec`'s assert cases cannot be forged (issue 50, item 5): a wrong `add` that attacks the harness instead
of computing scores 0, whatever it tries: patching the harness's module, writing a forged answer to the result
pipe and exiting, returning an object (or an int subclass) equal to everything, reading the expected values off
the harness's memory, patching json, signalling the harness, shadowing a module the test imports, or reading the
reference solutions of the built-in code tasks and running them. The right `add` still scores 1, and what a test
may do across the runner/program boundary (swiftlike/tools/verdict.py) works: classes, in-place changes,
builtin exceptions, generators, the program's standard-library modules.
"""
import json
import sys

import pytest
from paths import REPO

from swiftlike.rl.rewards.code_exec import CodeExecReward
from swiftlike.tools import sandbox
from swiftlike.tools.sandbox import ToolLimits, run_program_isolated

LIMITS = ToolLimits(timeout_s=20.0, cpu_s=2, memory_mb=64, max_output_chars=2000)
ADD_TESTS = ["assert add(1, 2) == 3", "assert add(0, 5) == 5", "assert add(-4, 4) == 0", "assert add(10, 10) == 20"]
RIGHT = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a - b\n"  # right for add(-4, 4)? no: -8; for none of the four
FORGED_ANSWER = "json.dumps({'text': json.dumps({'stdout': '', 'stdout_cut': False, 'error': None}), 'error': None})"

FORGERIES = {
    # the harness that ran the test, patched to skip it
    "patch_harness": WRONG + "import sys\nsys.modules['swiftlike.tools.program']._execute = lambda *a: None\n",
    # a forged answer written to every descriptor (the inherited result pipe among them), then an exit
    "forged_result_pipe": WRONG + (
        "import json, os\n"
        f"forged = {FORGED_ANSWER}.encode()\n"
        "for fd in range(3, 1024):\n"
        "    try:\n"
        "        os.write(fd, forged)\n"
        "    except OSError:\n"
        "        pass\n"
        "os._exit(0)\n"),
    "always_equal": ("class Yes:\n    def __eq__(self, other):\n        return True\n    __hash__ = None\n"
                     "def add(a, b):\n    return Yes()\n"),
    "equal_int": ("class Yes(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
                  "def add(a, b):\n    return Yes(7)\n"),
    # the expected value read off the harness: its frames' locals (the test's source) and its objects (the request)
    "learn_expected": (
        "import gc, re, sys\n"
        "def texts():\n"
        "    frame = sys._getframe()\n"
        "    while frame is not None:\n"
        "        yield from (v for v in frame.f_locals.values() if isinstance(v, str))\n"
        "        frame = frame.f_back\n"
        "    for o in gc.get_objects():\n"
        "        if isinstance(o, dict):\n"
        "            for v in list(o.values()):\n"
        "                if isinstance(v, dict) and isinstance(v.get('test'), str):\n"
        "                    yield v['test']\n"
        "def add(a, b):\n"
        "    for text in texts():\n"
        "        m = re.search(r'add\\(' + str(a) + r', ' + str(b) + r'\\) == (-?\\d+)', text)\n"
        "        if m:\n"
        "            return int(m.group(1))\n"
        "    return a - b\n"),
    # json patched so that whatever answer is written says "no error"
    "patch_json": WRONG + (
        "import json\n"
        "real = json.dumps\n"
        "json.dumps = lambda obj, *a, **k: real({**obj, 'error': None} if isinstance(obj, dict) and 'error' in obj "
        "else obj, *a, **k)\n"),
    # every process it may signal, the harness first, killed, stopped or interrupted
    "signal_harness": WRONG + (
        "import os, signal\n"
        "for target in (1, os.getppid(), -1):\n"
        "    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGSTOP, signal.SIGKILL):\n"
        "        try:\n"
        "            os.kill(target, sig)\n"
        "        except OSError:\n"
        "            pass\n"),
    # a StopIteration out of a call, which would end a test's map() early, leaving all() nothing false to see
    "stop_iteration": "def add(a, b):\n    raise StopIteration\n",
    # builtins the test uses, shadowed by the program's module: all() always true, map() of nothing
    "shadow_builtins": WRONG + "def all(_):\n    return True\nmap = lambda *a: [True]\n",
    # the harness's memory and descriptors through /proc
    "read_harness": WRONG + (
        "import os\n"
        "for path in ('/proc/1/mem', '/proc/1/environ', *(f'/proc/1/fd/{n}' for n in range(64))):\n"
        "    try:\n"
        "        with open(path, 'wb') as f:\n"
        "            f.write(b'{}')\n"
        "    except OSError:\n"
        "        pass\n"),
}


@pytest.fixture(scope="module")
def reward():
    return CodeExecReward(limits=LIMITS)


# the same checks written with map(): a call that raises StopIteration would end it as if all were checked
MAPPED_TESTS = ADD_TESTS + ["assert all(map(lambda case: add(*case[0]) == case[1], [((1, 2), 3), ((5, 5), 10)]))"]


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_each_forgery_scores_zero_and_the_right_code_one(reward, name):
    assert reward([FORGERIES[name], RIGHT], test_cases=[MAPPED_TESTS, MAPPED_TESTS]) == [0.0, 1.0]


def test_a_module_the_test_imports_comes_from_the_installation_not_from_the_program(reward):
    """The program writes `colorsys.py` where it may (its /tmp, the working directory) with a forged answer for
    the harness to import; the test imports colorsys. With '' (the working directory) on the import path."""
    shadow = WRONG + ("import json\n"
                      "forger = ('import json, os\\n'\n"
                      f"          'forged = ' + {FORGED_ANSWER!r} + '\\n'\n"
                      "          'for fd in range(3, 1024):\\n'\n"
                      "          '    try:\\n'\n"
                      "          '        os.write(fd, forged.encode())\\n'\n"
                      "          '    except OSError:\\n'\n"
                      "          '        pass\\n'\n"
                      "          'os._exit(0)\\n')\n"
                      "for directory in ('/tmp', '.'):\n"
                      "    with open(f'{directory}/colorsys.py', 'w') as f:\n"
                      "        f.write(forger)\n")
    saved = list(sys.path)
    sys.path.insert(0, "")
    if sandbox._server is not None:
        sandbox._server.stop()  # the next call starts a server with this import path
    try:
        tests = [f"import colorsys\n{case}" for case in ADD_TESTS]
        assert reward([shadow, RIGHT], test_cases=[tests, tests]) == [0.0, 1.0]
    finally:
        sys.path[:] = saved
        if sandbox._server is not None:
            sandbox._server.stop()


def test_the_reference_solutions_are_out_of_reach(reward):
    """A program that reads swiftlike/code-tasks' reference solutions by their absolute path and answers with the
    row whose tests hold the call it is asked (issue 50, item 4, end to end through the reward)."""
    data = REPO / "swiftlike" / "dataset" / "data" / "code_tasks.jsonl"
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    row = rows[0]
    name = row["test_cases"][0].split("assert ", 1)[1].split("(", 1)[0]
    cheat = (f"import json\n"
             f"def {name}(*args):\n"
             f"    try:\n"
             f"        rows = [json.loads(line) for line in open({str(data)!r})]\n"
             f"    except OSError:\n"
             f"        return None\n"
             f"    call = '{name}(' + ', '.join(map(repr, args)) + ')'\n"
             f"    for row in rows:\n"
             f"        if any(call in case for case in row['test_cases']):\n"
             f"            namespace = {{}}\n"
             f"            exec(row['reference'], namespace)\n"
             f"            return namespace['{name}'](*args)\n")
    assert reward([cheat, row["reference"]], test_cases=[row["test_cases"]] * 2) == [0.0, 1.0]


def test_what_a_test_can_do_across_the_boundary():
    """Classes (LeetCode's `Solution().method(...)`), in-place changes, builtin exceptions by their base, iteration
    and `in` over the program's generators, the program's `import math`, dict subclasses compared as dicts,
    `from solution import` (the program's `max` there, the builtin in the test), a standard-library function passed
    in; a test's own function cannot be passed."""
    program = ("import math\nfrom collections import Counter\n"
               "class Solution:\n    def twoSum(self, nums, target):\n"
               "        seen = {}\n        for i, n in enumerate(nums):\n"
               "            if target - n in seen:\n                return [seen[target - n], i]\n"
               "            seen[n] = i\n"
               "class Stack:\n    def __init__(self):\n        self.items = []\n"
               "    def push(self, x):\n        self.items.append(x)\n    def __len__(self):\n"
               "        return len(self.items)\n"
               "class Negative(ValueError):\n    pass\n"
               "def root(x):\n    if x < 0:\n        raise Negative(f'{x} < 0')\n    return math.sqrt(x)\n"
               "def sort_in_place(xs, seen=None):\n    xs.sort()\n    if seen is not None:\n        seen['sorted'] = True\n"
               "def evens(n):\n    yield from range(0, n, 2)\n"
               "def letters(s):\n    return Counter(s)\n"
               "def apply(f, x):\n    return f(x)\n"
               "def max(*args):\n    return 'mine'\n")
    test = ("assert Solution().twoSum([2, 7, 11, 15], 9) == [0, 1]\n"
            "s = Stack()\ns.push(1)\ns.push(2)\nassert len(s) == 2 and s.items == [1, 2] and s == s and s != Stack()\n"
            "try:\n    root(-1)\n    assert False\nexcept ValueError as e:\n    assert str(e) == '-1 < 0'\n"
            "assert math.isclose(root(2), 2 ** 0.5)\n"
            "xs, seen = [3, 1, 2], {}\nsort_in_place(xs, seen=seen)\nassert xs == [1, 2, 3] and seen == {'sorted': True}\n"
            "assert list(evens(7)) == [0, 2, 4, 6] and 4 in evens(7) and 5 not in evens(7)\n"
            "assert letters('abca') == {'a': 2, 'b': 1, 'c': 1}\n"
            "assert apply(len, 'abc') == 3\n"
            "from solution import root as r, max as mine\nassert r(4) == 2.0 and mine(1, 5) == 'mine'\n"
            "assert max(1, 5) == 5\n"
            "try:\n    apply(lambda x: x, 1)\n    assert False\nexcept TypeError as e:\n"
            "    assert 'the test passed a function to the program' in str(e)\n")
    assert run_program_isolated(program, test=test, limits=LIMITS).error is None


def test_an_exit_or_death_during_the_test_fails_it_even_when_the_test_catches_it():
    program = "import os, sys\ndef leave():\n    sys.exit(0)\ndef die():\n    os._exit(0)\n"
    for call, error in (("leave()", "the test ended in sys.exit(0)"),
                        ("die()", "the program's process ended (exit code 0) without answering")):
        test = f"try:\n    {call}\nexcept BaseException:\n    pass\n"
        assert run_program_isolated(program, test=test, limits=LIMITS).error == error


def test_the_programs_process_holds_no_descriptor_of_the_harness():
    """Its stdin, its stdout, /dev/null and the two pipes to the runner, not the pipe of the sandbox's answer, also
    when many calls run at once (the server then holds many descriptors, and a call's answer pipe a high number)."""
    program = ("import os\ndef is_open(fd):\n    try:\n        os.fstat(fd)\n        return True\n"
               "    except OSError:\n        return False\nprint([fd for fd in range(4096) if is_open(fd)])\n")
    outcome = run_program_isolated(program, limits=LIMITS)
    assert outcome.error is None and json.loads(outcome.stdout) == [0, 1, 2, 3, 4], outcome
    calls = 48
    reward = CodeExecReward(limits=LIMITS, workers=calls)
    completions = [f"import time\ntime.sleep(0.5)  # call {i}: the calls overlap\n{program}" for i in range(calls)]
    assert reward(completions, test_cases=[[{"input": "", "output": "[0, 1, 2, 3, 4]"}]] * calls) == [1.0] * calls
