"""Tools run on model-written arguments in the sandbox: each attack a tool can make (through a real plugin
file, loaded as --external_plugins loads it) is contained, leaves nothing running, and the next call works.
test_isolation.py attacks the isolation itself wherever the sandbox runs (as nobody, without CAP_SYS_ADMIN, where
namespaces are refused).

Every wait is bounded: a call by its ToolLimits (the sandbox's own deadline), leftovers by `settled`.
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
from sandbox_checks import sandbox_processes, settled

from swiftlike.rl.rewards.plugins import load_external_plugin
from swiftlike.tools import TOOL_REGISTRY, call_tool, register_tool
from swiftlike.tools.isolation import MAX_PROCESSES, SINGLE_THREADED, UID_RANGES
from swiftlike.tools.plugins import schema_from_signature
from swiftlike.tools.sandbox import ToolLimits, ToolOutcome, run_tool_isolated, sandbox_isolation

SECRET = "swiftlike-test-secret-" + uuid.uuid4().hex
ENVIRONMENT = {"PATH", "HOME", "TMPDIR", "LANG", *SINGLE_THREADED}  # all a tool's environment holds
# a generous wall clock: on a busy machine a tool may wait long for a core (timeout tests set their own)
FAST = ToolLimits(timeout_s=20.0, cpu_s=1, memory_mb=64, max_output_chars=200)

PLUGIN = '''
import json, os, socket, time
from swiftlike.tools import ToolRefusal, register_tool

def fork_and_wait() -> dict:
    """Fork children that sleep until the limit stops it; report how many it got."""
    forked = 0
    while forked < 10_000:
        try:
            if os.fork() == 0:
                time.sleep(60)
                os._exit(0)
        except OSError as error:
            return {"forked": forked, "stopped_by": error.strerror}
        forked += 1
    return {"forked": forked}

def fork_bomb() -> dict:
    """Every process forks forever."""
    while True:
        try:
            os.fork()
        except OSError:
            pass

def spin() -> dict:
    while True:
        pass

def sleep(seconds: float) -> dict:
    time.sleep(seconds)
    return {"slept": seconds}

def eat_memory() -> dict:
    hoard = []
    while True:
        hoard.append(bytearray(1 << 20))

def shout(chars: int) -> str:
    return "x" * chars

def write(path: str) -> dict:
    with open(path, "w") as f:
        f.write("written by a tool")
    return {"wrote": os.path.abspath(path)}

def connect(host: str, port: int) -> dict:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.settimeout(2)
        s.connect((host, port))
        s.sendall(b"hello")
    return {"connected": True}

def kill(pid: int) -> dict:
    os.kill(pid, 9)
    return {"killed": pid}

def environment() -> dict:
    return dict(os.environ)

def read(path: str) -> str:
    with open(path) as f:
        return f.read()

def import_module(name: str) -> dict:
    __import__(name)
    return {"imported": name}

def listing(path: str) -> list:
    return sorted(os.listdir(path))

def who() -> dict:
    return {"uid": os.getuid(), "cwd": os.getcwd(), "pid": os.getpid(), "listing": sorted(os.listdir("."))}

def fail(message: str) -> dict:
    raise ValueError(message)

def refuse(message: str) -> dict:
    raise ToolRefusal(message)

def give_bytes() -> bytes:
    return b"raw"

def give_object() -> object:
    return object()

def give(kind: str):
    return {"dict": {"a": [1, 2.5, None]}, "list": [1, "two"], "number": 42, "text": "plain text"}[kind]

for function in (fork_and_wait, fork_bomb, spin, sleep, eat_memory, shout, write, connect, kill, environment, read,
                 import_module, listing, who, fail, refuse, give_bytes, give_object, give):
    register_tool("attack_" + function.__name__, function)
'''


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    os.environ["SWIFTLIKE_TEST_SECRET"] = SECRET  # before the first call starts the sandbox server
    path = tmp_path_factory.mktemp("plugins") / "attack_tools.py"
    path.write_text(PLUGIN)
    before = set(TOOL_REGISTRY)
    load_external_plugin(path)
    yield path
    for name in set(TOOL_REGISTRY) - before:
        del TOOL_REGISTRY[name]
    os.environ.pop("SWIFTLIKE_TEST_SECRET")


def call(name, arguments=None, limits=FAST) -> ToolOutcome:
    return run_tool_isolated("attack_" + name, arguments or {}, limits)


def answer(outcome: ToolOutcome):
    assert outcome.error is None, outcome
    return json.loads(outcome.text)


def assert_contained():
    """Nothing the tool started is left, and the sandbox still answers."""
    if os.geteuid() == 0:
        assert settled(lambda: not sandbox_processes()), sandbox_processes()
    assert answer(run_tool_isolated("calculator", {"expression": "6 * 7"})) == {"result": 42}


def test_every_protection_holds_on_this_machine(plugin):
    report = sandbox_isolation()
    assert not [words for words in report.values() if "NOT ISOLATED" in words], report
    # a module of the standard library nothing imported before, and one of the plugin file's directory, which the
    # call does not see (the server imported the plugin before it forked)
    assert answer(call("import_module", {"name": "colorsys"})) == {"imported": "colorsys"}
    assert "ModuleNotFoundError" in call("import_module", {"name": "numpy"}).error
    seen = answer(call("who"))
    first, count = UID_RANGES[0]
    assert (first <= seen.pop("uid") < first + count) if os.geteuid() == 0 else seen.pop("uid") == os.getuid()
    assert seen == {"cwd": "/tmp", "pid": 1, "listing": []}


def test_builtin_calculator_answers_as_call_tool_does(plugin):
    for arguments in ({"expression": "347 * 5821"}, {"expression": "1 / 0"}, {"expression": "__import__('os')"},
                      {}, {"expression": 3}):
        outcome = run_tool_isolated("calculator", arguments)
        assert outcome.text == call_tool("calculator", arguments)
        assert outcome.error == json.loads(outcome.text).get("error")
    assert run_tool_isolated("nope", {}).error.startswith("unknown tool 'nope'")


def test_outcomes_of_what_a_tool_returns_or_raises(plugin):
    assert answer(call("give", {"kind": "dict"})) == {"a": [1, 2.5, None]}
    assert answer(call("give", {"kind": "list"})) == [1, "two"]
    assert answer(call("give", {"kind": "number"})) == 42
    assert call("give", {"kind": "text"}) == ToolOutcome("plain text", None)
    raised = call("fail", {"message": "no such thing"})
    assert raised.error == "attack_fail raised ValueError: no such thing"
    assert json.loads(raised.text) == {"error": raised.error}
    assert call("refuse", {"message": "ask nicely"}) == ToolOutcome('{"error": "ask nicely"}', "ask nicely")
    assert "returned bytes, not text" in call("give_bytes").error
    assert "returned 'object', which is not JSON" in call("give_object").error
    assert call("give", {"kind": 1}).error == "argument 'kind' must be a string"
    assert call("give", {"kind": "other"}).error == "attack_give raised KeyError: 'other'"
    assert call("give", [1]).error == "the arguments must be a JSON object"


def test_fork_bomb_is_stopped_and_its_processes_die_with_the_call(plugin):
    forked = answer(call("fork_and_wait"))
    assert 0 < forked["forked"] < MAX_PROCESSES and forked["stopped_by"] == "Resource temporarily unavailable"
    assert_contained()
    started = time.monotonic()
    outcome = call("fork_bomb", limits=ToolLimits(timeout_s=1.5, cpu_s=1))
    assert outcome.error in ("attack_fork_bomb timed out after 1.5 s", "attack_fork_bomb timed out after 1 s of CPU time")
    assert time.monotonic() - started < 5
    assert_contained()


def test_infinite_loops_time_out(plugin):
    # a wall-clock timeout well past the CPU limit, so that the CPU limit is what stops it on a busy machine
    assert call("spin", limits=ToolLimits(timeout_s=20, cpu_s=1)).error == "attack_spin timed out after 1 s of CPU time"
    assert call("sleep", {"seconds": 30}, ToolLimits(timeout_s=0.5)).error == "attack_sleep timed out after 0.5 s"
    assert answer(call("sleep", {"seconds": 0.1})) == {"slept": 0.1}
    assert_contained()


def test_memory_bomb_runs_out_of_memory(plugin):
    outcome = call("eat_memory")
    assert outcome.error == "attack_eat_memory ran out of memory (the limit is 64 MB)"
    assert json.loads(outcome.text) == {"error": outcome.error}
    assert_contained()


def test_huge_output_is_cut_with_a_note(plugin):
    outcome = call("shout", {"chars": 5_000_000})
    assert outcome.error is None and outcome.text.startswith("x" * 200 + "\n[cut: the result has 5000000 characters")
    assert len(outcome.text) < 300
    assert_contained()


def test_writes_outside_its_own_directory_fail(plugin, tmp_path):
    for target in (tmp_path / "escaped.txt", REPO / f"escaped-{uuid.uuid4().hex}.txt"):
        outcome = call("write", {"path": str(target)})
        # neither the test's tmp_path (under the caller's /tmp) nor the repository is in the tool's root
        assert outcome.error and "raised" in outcome.error and any(
            reason in outcome.error for reason in ("Read-only", "Permission denied", "No such file")), outcome
        assert not target.exists()
    # the tool's /dev/shm (writable by all on the host) is a link to its own /tmp: the host's is untouched
    writable_by_all = Path("/dev/shm") / f"swiftlike-sandbox-{uuid.uuid4().hex}"
    assert answer(call("write", {"path": str(writable_by_all)})) == {"wrote": str(writable_by_all)}
    assert not writable_by_all.exists()
    # its own directory (and the private /tmp it is in) is writable, and gone after the call
    private = f"/tmp/swiftlike-sandbox-{uuid.uuid4().hex}"
    assert answer(call("write", {"path": "notes.txt"})) == {"wrote": "/tmp/notes.txt"}
    assert answer(call("write", {"path": private})) == {"wrote": private}
    assert not Path(private).exists()
    assert answer(call("who"))["listing"] == []
    assert_contained()


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_no_network_not_even_to_the_parents_loopback_server(plugin, host):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.create_server((host, 0), family=family) as listener:
        listener.settimeout(0.3)
        outcome = call("connect", {"host": host, "port": listener.getsockname()[1]})
        unreachable = {"127.0.0.1": "[Errno 101] Network is unreachable", "::1": "[Errno 99] Cannot assign requested address"}
        assert outcome.error == f"attack_connect raised OSError: {unreachable[host]}", outcome
        with pytest.raises(socket.timeout):
            listener.accept()
    assert_contained()


def test_the_parent_cannot_be_killed_or_read(plugin):
    # the parent's pid unless the suite was orphaned (nohup): pid 1 in the sandbox is its own namespace's init
    for pid in {os.getpid(), os.getppid(), -1} - {1}:
        outcome = call("kill", {"pid": pid})
        assert pid == -1 or outcome.error == "attack_kill raised ProcessLookupError: [Errno 3] No such process"
    environment = answer(call("environment", limits=ToolLimits(timeout_s=20)))
    assert set(environment) == ENVIRONMENT and SECRET not in json.dumps(environment)
    assert os.environ["SWIFTLIKE_TEST_SECRET"] == SECRET
    for path in (f"/proc/{os.getpid()}/environ", "/proc/1/environ"):
        assert SECRET not in call("read", {"path": path}).text
    assert_contained()


def test_calls_run_at_once_and_a_slow_one_does_not_hold_up_the_rest(plugin):
    results = {}

    def run(key, name, arguments, limits):
        results[key] = (call(name, arguments, limits), time.monotonic())

    threads = [threading.Thread(target=run, args=("slow", "sleep", {"seconds": 3.0}, ToolLimits(timeout_s=20)))]
    threads += [threading.Thread(target=run, args=(i, "give", {"kind": "number"}, FAST)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert answer(results["slow"][0]) == {"slept": 3.0}
    # finished before the slow call, not after it: they ran beside it (an order, not a timing threshold)
    assert all(answer(results[i][0]) == 42 and results[i][1] < results["slow"][1] for i in range(6)), results


def test_misuse_raises_and_tools_must_come_from_files(plugin):
    with pytest.raises(ValueError, match="ToolLimits.timeout_s must be a positive number"):
        ToolLimits(timeout_s=0)
    with pytest.raises(TypeError, match="limits must be a ToolLimits"):
        run_tool_isolated("calculator", {"expression": "1"}, {"timeout_s": 1})
    with pytest.raises(ValueError, match="already registered"):
        register_tool("calculator", answer)
    def typed(word: str, times: int = 1, scale: float = 1.0, loud: bool = False, extra=None) -> dict:
        return {}
    assert schema_from_signature(typed) == {"type": "object", "required": ["word"], "properties": {
        "word": {"type": "string"}, "times": {"type": "integer"}, "scale": {"type": "number"},
        "loud": {"type": "boolean"}, "extra": {}}}
    with pytest.raises(ValueError, match="takes \\*rest or a positional-only parameter"):
        schema_from_signature(lambda *rest: rest)
    assert TOOL_REGISTRY["attack_sleep"].description == "" and TOOL_REGISTRY["attack_fork_bomb"].description == \
        "Every process forks forever."
    namespace = {"register_tool": register_tool, "__name__": "__main__"}
    with pytest.raises(ValueError, match="defined in __main__, which a sandbox process cannot import"):
        exec("def interactive(x: int) -> int:\n    return x\nregister_tool('interactive', interactive)", namespace)
