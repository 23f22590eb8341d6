"""When the sandbox fails rather than the code, `code_exec` has no verdict (issue 50, item 6): the sandbox server
killed mid-call, a setup error the kernel forces for real (the server out of file descriptors), and a call starved
of CPU by other work on its CPU (a niced sandbox beside spinning processes) each make a right program's reward
MISSING, counted in the trainer's `rewards/code_exec/missing` and logged as a warning with the reason, never 0;
while the program's own failures, a loop, a sleep, a fork bomb, still score 0.
"""
import logging
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from swiftlike.rl.rewards.code_exec import CODE_LIMITS, CodeExecReward
from swiftlike.rl.rewards.functions import MISSING, combine_rewards
from swiftlike.tools import sandbox
from swiftlike.tools.sandbox import ToolLimits, run_program_isolated

LIMITS = ToolLimits(timeout_s=20.0, cpu_s=2, memory_mb=64, max_output_chars=2000)
ADD_TESTS = ["assert add(1, 2) == 3", "assert add(0, 5) == 5"]
RIGHT = "def add(a, b):\n    return a + b\n"


def sandbox_server() -> int:
    """The pid of this process's running sandbox server (started if need be)."""
    sandbox.sandbox_isolation()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == \
                    os.getpid() and b"sandbox_server" in (entry / "cmdline").read_bytes():
                return int(entry.name)
        except (OSError, ValueError):
            continue
    raise AssertionError("no sandbox server runs")


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return found


def missing_count(reward, completions, tests) -> int:
    """What the trainer logs as rewards/code_exec/missing for this batch (grpo_trainer._log_rollout_metrics)."""
    scored = combine_rewards({"code_exec": reward}, None, completions, test_cases=[tests] * len(completions))
    assert scored.total.isnan().tolist() == scored.missing["code_exec"].tolist()  # no valid total, no advantage
    return int(scored.missing["code_exec"].sum())


def test_a_sandbox_server_killed_mid_call_makes_the_reward_missing(caplog):
    reward = CodeExecReward(limits=LIMITS)
    slow = "import time\ndef add(a, b):\n    time.sleep(3)\n    return a + b\n"  # right, slowly
    server = sandbox_server()
    counted = {}
    batch = threading.Thread(target=lambda: counted.update(n=missing_count(reward, [slow], ADD_TESTS[:1])))
    with caplog.at_level(logging.WARNING, logger="swiftlike.rl"):
        batch.start()
        deadline = time.monotonic() + 30
        while not children(server) and time.monotonic() < deadline:  # the call's outer process: it is running
            time.sleep(0.01)
        assert children(server), "the call never started"
        os.kill(server, signal.SIGKILL)
        batch.join(60)
    assert counted == {"n": 1}
    assert any("sandbox server stopped" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    assert reward([RIGHT], test_cases=[ADD_TESTS]) == [1.0]  # the next call starts another server


def test_a_setup_error_makes_the_reward_missing(caplog):
    """The server's soft RLIMIT_NOFILE lowered to the descriptors it holds, then one more at a time: each call
    fails to be set up (the server's pipes, the outer process's /dev/null, ...) until one fits; none scores 0."""
    reward = CodeExecReward(limits=LIMITS)
    results = []
    try:
        with caplog.at_level(logging.WARNING, logger="swiftlike.rl"):
            for extra in range(16):
                server = sandbox_server()
                held = len(os.listdir(f"/proc/{server}/fd"))
                hard = resource.prlimit(server, resource.RLIMIT_NOFILE)[1]
                resource.prlimit(server, resource.RLIMIT_NOFILE, (held + extra, hard))
                results.append(reward([RIGHT], test_cases=[ADD_TESTS])[0])
                if results[-1] == 1.0:
                    break
    finally:
        if sandbox._server is not None:
            sandbox._server.stop()
    assert results[-1] == 1.0 and set(results[:-1]) == {MISSING}, results
    reasons = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("the sandbox could not isolate the program" in reason for reason in reasons), reasons


def session(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3])


@pytest.fixture
def one_cpu_beside_spinners():
    """The sandbox server pinned to one CPU beside `spinners(n)` processes spinning there, each in its session;
    the server is killed afterwards (the next call starts one on every CPU)."""
    server = sandbox_server()
    cpu = min(os.sched_getaffinity(server))
    os.sched_setaffinity(server, {cpu})
    started = []

    def spinners(n: int) -> int:
        for _ in range(n):
            started.append(subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True))
            os.sched_setaffinity(started[-1].pid, {cpu})
        return server
    yield spinners
    for spinner in started:
        spinner.kill()
        spinner.wait()
    if sandbox._server is not None and sandbox._server.process.pid == server:
        sandbox._server.stop()


def test_a_call_starved_of_cpu_is_missing(one_cpu_beside_spinners):
    """Two spinners on the call's CPU, the call at nice 19 (its autogroup's, where the kernel groups sessions, and
    its processes'): a right program that needs half a second of CPU gets a fraction of a percent of the CPU, and
    no verdict (missing) once its wall clock, extended by its waiting, reaches 4 times 1 s."""
    limits = ToolLimits(timeout_s=1.0, cpu_s=2, memory_mb=64)
    reward = CodeExecReward(limits=limits)
    busy = "def add(a, b):\n    sum(range(2 * 10 ** 7))\n    return a + b\n"  # ~0.4 s of CPU
    assert reward([busy], test_cases=[ADD_TESTS[:1]]) == [1.0]
    server = one_cpu_beside_spinners(2)
    os.setpriority(os.PRIO_PROCESS, server, 19)
    counted = {}
    batch = threading.Thread(target=lambda: counted.update(n=missing_count(reward, [busy], ADD_TESTS[:1])))
    started = time.monotonic()
    batch.start()
    niced = None
    while niced is None and batch.is_alive():
        for outer in children(server):  # the call's outer process, once it leads its own session
            try:
                if session(outer) != outer:
                    continue
                if Path(f"/proc/{outer}/autogroup").exists():  # else its processes' nice is the server's, 19
                    Path(f"/proc/{outer}/autogroup").write_text("19")
                niced = outer
            except OSError:  # ended
                continue
    batch.join(60)
    assert niced is not None and counted == {"n": 1}
    assert time.monotonic() - started < 4 * limits.timeout_s + sandbox.ANSWER_GRACE_S


def test_a_loop_on_a_busy_cpu_still_runs_into_its_cpu_limit(one_cpu_beside_spinners):
    """One spinner beside the call: a loop gets about half the CPU, so its wall clock (2 s), extended by the time it
    waited, lets it reach its 1 s CPU limit: the program's failure, as on an idle machine."""
    one_cpu_beside_spinners(1)
    loop = "def add(a, b):\n    while True:\n        pass\n"
    assert run_program_isolated(loop, test=ADD_TESTS[0], limits=ToolLimits(timeout_s=2.0, cpu_s=1)).error == \
        "the program timed out after 1 s of CPU time"


@pytest.mark.parametrize("program, limits", [
    ("def add(a, b):\n    while True:\n        pass\n", CODE_LIMITS),  # CPU limit
    ("import time\ndef add(a, b):\n    time.sleep(60)\n", ToolLimits(timeout_s=1.0)),  # wall clock, asleep
    ("import os\ndef add(a, b):\n    while True:\n        try:\n            os.fork()\n        except OSError:\n"
     "            pass\n", ToolLimits(timeout_s=2.0, cpu_s=10)),  # wall clock, its own processes keep it waiting
])
def test_the_programs_own_failures_still_score_zero(program, limits):
    assert CodeExecReward(limits=limits)([program], test_cases=[ADD_TESTS[:1]]) == [0.0]
