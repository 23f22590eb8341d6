"""`--reward_funcs code_exec`: right, half-right and broken code on hand-built tasks, every test layout, and each
attack a completion can make (a fork bomb, endless loops, a huge print, writes outside its directory, the network,
the trainer's secrets) contained: the reward is the share of cases that passed, the call returns within its
limits, nothing is left running, the host is untouched, and the next completion is scored as before.
"""
import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest
from paths import REPO
from sandbox_checks import nobody_processes, settled

from swiftlike.rl.rewards import code_exec
from swiftlike.rl.rewards.code_exec import CODE_LIMITS, CodeCase, CodeExecReward, extract_code, row_cases
from swiftlike.rl.rewards.functions import build_reward_funcs, combine_rewards
from swiftlike.tools import sandbox
from swiftlike.tools.sandbox import ToolLimits, run_program_isolated

# a generous wall clock: on a busy machine a case may wait long for a core (timeout tests set their own)
LIMITS = ToolLimits(timeout_s=20.0, cpu_s=1, memory_mb=64, max_output_chars=2000)
SECRET = "swiftlike-code-secret-" + uuid.uuid4().hex
ADD_TESTS = ["assert add(1, 2) == 3", "assert add(0, 5) == 5", "assert add(-4, 4) == 0", "assert add(10, 10) == 20"]
RIGHT = "Here it is:\n```python\ndef add(a, b):\n    return a + b\n```\n"


@pytest.fixture(scope="module")
def reward():
    """The reward with small limits, and a sandbox server started after a secret entered our environment."""
    os.environ["SWIFTLIKE_CODE_SECRET"] = SECRET
    if sandbox._server is not None:  # started by an earlier test module: the next call starts one that sees it
        sandbox._server.stop()
    yield CodeExecReward(limits=LIMITS)
    os.environ.pop("SWIFTLIKE_CODE_SECRET")


def score(reward, completion, tests):
    return reward([completion], test_cases=[tests])[0]


def assert_contained(reward):
    """Nothing the code started is left, and a right answer still scores 1."""
    if os.geteuid() == 0:
        assert settled(lambda: not nobody_processes()), nobody_processes()
    assert score(reward, RIGHT, ADD_TESTS) == 1.0


# --------------------------------------------------------------------------- correctness


def test_right_half_right_and_broken_code(reward):
    half = "```python\ndef add(a, b):\n    return a * 2 if a > 0 else b\n```"  # right for add(0, 5), add(10, 10)
    completions = [RIGHT, half, "```python\ndef add(a, b) return a + b\n```", "The sum is a + b.",
                   "```python\ndef add(a, b):\n    raise ValueError('no')\n```", ""]
    assert reward(completions, test_cases=[ADD_TESTS] * len(completions)) == [1.0, 0.5, 0.0, 0.0, 0.0, 0.0]


def test_stdin_stdout_cases_in_both_layouts():
    program = "```python\nn = int(input())\nprint(n * 2)\n```"
    cases = [{"input": "3\n", "output": "6"}, {"input": "5", "output": "10\n"}, {"input": "1", "output": "3"}]
    reward = CodeExecReward(limits=LIMITS)
    assert reward([program], test_cases=[cases]) == [pytest.approx(2 / 3)]
    info = {"language": "python", "test_cases": [dict(case, type="stdin_stdout") for case in cases]}
    # ms-swift's column, as a dict and as JSON text; another language is not ours to judge
    assert reward([program] * 3, verification_info=[info, json.dumps(info), {**info, "language": "cpp"}]) == [
        pytest.approx(2 / 3), pytest.approx(2 / 3), None]
    # assert statements and stdin/stdout cases mixed; test_cases wins over verification_info
    mixed = ["assert True", {"input": "4", "output": "8"}]
    assert reward([program], test_cases=[mixed], verification_info=[info]) == [0.5]  # the assert hits input(): EOF
    assert reward(["import sys\nprint(sum(map(int, sys.stdin.buffer.read().split())))"],
                  test_cases=[[{"input": "1 2\n3", "output": "6"}]]) == [1.0]


def test_a_script_exits_normally_but_an_exit_skips_the_tests(reward):
    exits = "import sys\nprint(6)\nsys.exit(0)"
    assert reward([exits, exits + "\ndef add(a, b):\n    return a + b"],
                  test_cases=[[{"input": "", "output": "6"}], ADD_TESTS]) == [1.0, 0.0]
    assert run_program_isolated(exits, test="assert True", limits=LIMITS).error == \
        "the program exited before its test ran"
    assert run_program_isolated("raise SystemExit(3)", limits=LIMITS).error == "exited with code 3"
    assert run_program_isolated("exit('bye')", limits=LIMITS).error == "exited with code 'bye'"
    assert run_program_isolated("exit(False)", limits=LIMITS).error is None
    assert run_program_isolated("import os\nos._exit(0)", test="assert True", limits=LIMITS).error == \
        "the program's process ended (exit code 0) without answering"
    # a demo that waits for input under the main guard does not run when the code is tested as a module
    guarded = "def add(a, b):\n    return a + b\nif __name__ == '__main__':\n    add(int(input()), 1)\n"
    assert score(reward, guarded, ADD_TESTS) == 1.0


def test_the_code_is_a_real_module():
    """As a script or an imported module would be: dataclasses, typing and pickle find it in sys.modules."""
    code = ("from __future__ import annotations\nimport pickle, typing\nfrom dataclasses import dataclass\n\n"
            "@dataclass\nclass Point:\n    x: int\n    scale: typing.ClassVar[int] = 2\n\n"
            "def add(a, b):\n    return pickle.loads(pickle.dumps(Point(a))).x + b\n")
    assert CodeExecReward(limits=LIMITS)([code, code + "print(add(2, 3))"], test_cases=[
        ADD_TESTS, [{"input": "", "output": "5"}]]) == [1.0, 1.0]


def test_which_code_is_taken_from_a_completion():
    assert extract_code("a\n```python\nx = 1\n```\nthen\n```py\nx = 2\n```\n```text\nnot code\n```") == "x = 2\n"
    assert extract_code("```\nx = 3\n```") == "x = 3\n"
    assert extract_code("```bash\nls\n```") == "ls\n"
    assert extract_code("cut short:\n```python\ndef f():\n    return") == "def f():\n    return"
    assert extract_code("x = 4") == "x = 4"


def test_identical_code_runs_once_and_calls_run_at_once(monkeypatch):
    running, most = 0, 0
    lock = threading.Lock()
    real = code_exec.run_program_isolated
    calls = []

    def counting(*args):
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            calls.append(args[:3])
        try:
            return real(*args)
        finally:
            with lock:
                running -= 1

    monkeypatch.setattr(code_exec, "run_program_isolated", counting)
    completions = [RIGHT.replace("a + b", f"a + b + {i} - {i}") for i in range(8)] * 2  # 8 programs, each twice
    assert CodeExecReward(limits=LIMITS, workers=4)(completions, test_cases=[ADD_TESTS] * 16) == [1.0] * 16
    assert len(calls) == 8 * len(ADD_TESTS) == len(set(calls))
    assert most > 1, "the cases ran one after another"


def test_the_row_layouts_and_their_errors():
    assert row_cases(["assert f()", {"input": "1", "output": "2"}]) == [
        CodeCase(statement="assert f()"), CodeCase(stdin="1", expected="2")]
    assert row_cases('["assert f()"]') == [CodeCase(statement="assert f()")]
    assert row_cases(verification_info={"test_cases": [{"output": "x"}]}) == [CodeCase(expected="x")]
    reward = CodeExecReward(limits=LIMITS)
    assert reward(["x = 1"], test_cases=[[]]) == [None]  # no cases: nothing to judge
    with pytest.raises(ValueError, match="needs a 'test_cases' or a 'verification_info' column.*only have: solution"):
        reward(["x = 1"], solution=["1"], completion_ids=[[1]])
    for bad, match in (("not json", "is text but not JSON"), ({"input": "1"}, "must be a list"),
                       ([{"input": "1"}], "a test case is a string of assert statements"),
                       ([{"input": "1", "output": "2", "type": "function_call"}], "'function_call' case")):
        with pytest.raises(ValueError, match=match):
            reward(["x = 1"], test_cases=[bad])
    with pytest.raises(ValueError, match="'verification_info' must be"):
        reward(["x = 1"], verification_info=[["assert True"]])
    with pytest.raises(TypeError, match="limits must be a ToolLimits"):
        CodeExecReward(limits={"cpu_s": 1})


def test_built_by_name_and_combined_with_the_trainers_columns():
    funcs = build_reward_funcs(["code_exec", "format"], cosine_max_len=64, max_completion_length=128)
    assert isinstance(funcs["code_exec"], CodeExecReward) and funcs["code_exec"].limits == CODE_LIMITS
    scored = combine_rewards(funcs, [1.0, 0.5], [RIGHT, "nothing"], test_cases=[ADD_TESTS, ADD_TESTS],
                             completion_ids=[[1, 2], [3]], completion_lengths=[2, 1], prompts=[[], []])
    total, per_func = scored.total, scored.per_func
    assert per_func["code_exec"].tolist() == [1.0, 0.0] and total.tolist() == [1.0, 0.0]


# --------------------------------------------------------------------------- attacks


def test_fork_bomb_fails_its_case_only_and_leaves_nothing_running(reward):
    bomb = ("```python\nimport os\ndef add(a, b):\n    if a == 0:\n        while True:\n            try:\n"
            "                os.fork()\n            except OSError:\n                pass\n    return a + b\n```")
    limits = ToolLimits(timeout_s=3.0, cpu_s=1, memory_mb=64)
    started = time.monotonic()
    assert CodeExecReward(limits=limits)([bomb], test_cases=[ADD_TESTS]) == [0.75]  # add(0, 5) forks forever
    assert time.monotonic() - started < limits.timeout_s + 5
    outcome = run_program_isolated(extract_code(bomb), test="add(0, 5)", limits=limits)
    assert outcome.error in ("the program timed out after 3 s", "the program timed out after 1 s of CPU time")
    assert_contained(reward)


def test_endless_loops_time_out(reward):
    spin = "def add(a, b):\n    while a == 0:\n        pass\n    return a + b\n"
    assert score(reward, spin, ADD_TESTS) == 0.75
    # a wall clock well past the CPU limit, so the CPU limit is what stops it on a busy machine
    assert run_program_isolated(spin, test="add(0, 1)", limits=LIMITS).error == \
        "the program timed out after 1 s of CPU time"
    sleeper = "import time\ndef add(a, b):\n    time.sleep(60)\n"
    started = time.monotonic()
    assert CodeExecReward(limits=ToolLimits(timeout_s=1.0))([sleeper], test_cases=[ADD_TESTS[:2]]) == [0.0]
    assert time.monotonic() - started < 10
    assert_contained(reward)


def test_huge_output_is_cut_and_fails_its_case(reward):
    assert reward(['print("x" * 10_000_000)', "print('x')"], test_cases=[[{"input": "", "output": "x" * 10_000_000}],
                                                                        [{"input": "", "output": "x"}]]) == [0.0, 1.0]
    cut = run_program_isolated('print("x" * 10_000_000)', limits=LIMITS)
    assert cut.error is None and cut.stdout_cut and cut.stdout == "x" * len(cut.stdout)
    assert len(cut.stdout) <= LIMITS.max_output_chars
    # printing forever stops at the file-size limit (16 MB), long before the CPU limit
    endless = run_program_isolated('while True:\n    print("y" * 4096)', limits=LIMITS)
    assert endless.error == "OSError: [Errno 27] File too large" and len(endless.stdout) <= LIMITS.max_output_chars
    memory = run_program_isolated("hoard = bytearray(10 ** 9)", limits=LIMITS)
    assert memory.error == "MemoryError"
    assert_contained(reward)


def test_writes_outside_the_throw_away_directory_do_not_reach_the_host(reward, tmp_path):
    host_tmp = Path("/tmp") / f"swiftlike-code-{uuid.uuid4().hex}"
    targets = [REPO / f"escaped-{uuid.uuid4().hex}.txt", tmp_path / "escaped.txt", Path("/dev/shm") / uuid.uuid4().hex,
               host_tmp, Path.home() / f"escaped-{uuid.uuid4().hex}"]
    program = ("import sys\nfor path in sys.stdin.read().split():\n    try:\n        open(path, 'w').write('x')\n"
               "        print('wrote', path)\n    except OSError as error:\n        print('refused', path, error)\n")
    outcome = run_program_isolated(program, "\n".join(map(str, targets)), limits=LIMITS)
    assert outcome.error is None, outcome
    said = {}  # path -> (wrote / refused, why)
    for line in outcome.stdout.splitlines():
        verb, path, *why = line.split(" ", 2)
        said[path] = (verb, *why)
    # the repo is read-only in the sandbox, or absent when it lives under /tmp (the sandbox's /tmp is its own)
    assert said[str(targets[0])][0] == "refused" and any(
        reason in said[str(targets[0])][1] for reason in ("Read-only", "Permission denied", "No such file")), said
    assert said[str(host_tmp)] == ("wrote",)  # its own /tmp, a tmpfs that goes with the call
    assert said[str(targets[2])] == ("wrote",)  # its /dev/shm is a link to that /tmp
    assert [verb for verb, *_ in said.values()].count("wrote") == 2, said
    for target in targets:
        assert not target.exists(), target
    assert score(reward, f"open({str(targets[0])!r}, 'w').write('x')\nprint('written')",
                 [{"input": "", "output": "written"}]) == 0.0
    assert not targets[0].exists()
    assert_contained(reward)


def test_no_network_not_even_to_a_server_of_ours_on_loopback(reward):
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(0.5)
        port = listener.getsockname()[1]
        connect = (f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
                   "s.sendall(b'hello')\nprint('connected')")
        assert score(reward, connect, [{"input": "", "output": "connected"}]) == 0.0
        outcome = run_program_isolated(connect, limits=LIMITS)
        assert outcome.error == "OSError: [Errno 101] Network is unreachable", outcome
        with pytest.raises(socket.timeout):
            listener.accept()
    assert_contained(reward)


def test_the_trainers_environment_and_processes_are_out_of_sight(reward):
    assert os.environ["SWIFTLIKE_CODE_SECRET"] == SECRET
    reader = ("import os\nprint(dict(os.environ))\nfor path in ('/proc/self/environ', '/proc/1/environ', "
              f"'/proc/{os.getpid()}/environ', '/proc/{os.getppid()}/environ'):\n    try:\n"
              "        print(open(path, 'rb').read())\n    except OSError as error:\n        print(error)\n"
              f"os.kill({os.getpid()}, 9)")
    outcome = run_program_isolated(reader, limits=LIMITS)
    assert SECRET not in outcome.stdout and "SWIFTLIKE_CODE_SECRET" not in outcome.stdout, outcome
    assert outcome.error == "ProcessLookupError: [Errno 3] No such process"  # our pid is not in its namespace
    assert score(reward, "import os\nprint(os.environ.get('SWIFTLIKE_CODE_SECRET'))",
                 [{"input": "", "output": SECRET}]) == 0.0
    assert_contained(reward)
