"""`run_tool_isolated`: run a tool on model-written arguments in a separate process it cannot get out of;
`run_program_isolated`: the same for model-written Python code (the `code_exec` reward's test cases).

A tool call's name and arguments come from the model, so they are untrusted input, and a tool (a plugin tool
above all) is code that input can steer; a program is such code outright. Each call runs in a child process
forked by a small sandbox server (`sandbox_server.py`, started once per process on the first call, `python -I`
importing only `swiftlike.tools` and the tools' plugin files). The child (`isolation.py` says how and why) has
no network (a new network namespace), its own pid namespace (every process it starts dies with the call), a root
of its own holding the interpreter, its standard library and the system's libraries read-only and a private
tmpfs working directory at /tmp (`rootfs.py`: not the project, its data or anyone's home), a uid of its own per
running call when we are root (so RLIMIT_NPROC gives each call its own process budget), a user namespace and no
capabilities when we are not, a seccomp filter against kernel attack surface (`seccomp.py`), CPU-time, memory,
file-size, process and open-file limits, a minimal environment (no secret of ours: the server was started with
PATH, LANG and thread counts only), and a wall-clock timeout after which the server kills its process group.

Fail closed: the server checks that isolation holds before it runs anything. Where the machine allows no
namespaces, every call raises `SandboxUnavailable` (why, and how to get isolation) unless the caller opted out
(`allow_unisolated_execution()`, `SWIFTLIKE_ALLOW_UNISOLATED=1`, a command's `--allow_unisolated_execution`),
and then runs with what still holds and a loud warning. Commands that will run model output call
`require_isolation` at their start, so that such a machine stops them before their first episode or reward.
`sandbox_isolation()` says what holds.

Outcomes: the tool's text, cut at `max_output_chars` with a note; an error answer `{"error": "..."}` (with
`ToolOutcome.error` set) when the call is bad, the tool refuses it, raises, times out, runs out of memory,
answers with bytes or an object JSON cannot write, or dies. Nothing the model or the tool does raises here;
only our own misuse does (limits that are not `ToolLimits`, arguments that are not JSON), and a machine that
cannot isolate (`SandboxUnavailable`).

Speed (this machine: 2 CPU cores shared with four other jobs, load average 5 to 6.5, root, every protection on):
median 25 to 32 ms per call over 200 calculator calls one after another (p95 39 to 47 ms), 120 to 130 calls/s
from 8 threads, 12 ms of CPU per call (server and children); starting the server and probing costs 0.1 to 0.25 s
once. The sandbox before its own root, per-call uids and seccomp filter took 23 to 24 ms (11 ms of CPU) beside it;
a fresh interpreter importing the tools cost 100 ms per call. Where the time goes (per call): two forks (~3 ms
each), the namespaces (~1 ms), the new root, limits and filter (~2.5 ms: the skeleton and bind mounts ~1.5 ms,
pivot_root and detaching the old tree ~0.5 ms), the processes' exit and the namespaces' teardown (~3 ms), the
tool itself (<1 ms).
"""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
from concurrent.futures import Future
from dataclasses import asdict, dataclass

from ..utils.errors import UsageError
from ..utils.logging import get_logger
from .builtin import TOOL_REGISTRY
from .isolation import SINGLE_THREADED
from .starvation import MAX_WALL_FACTOR

logger = get_logger(__name__)

# beyond the call's own timeout, how long to wait for the server's answer before giving up on the server
ANSWER_GRACE_S = 10.0
STARTUP_TIMEOUT_S = 30.0
_SERVER_MAIN = "import json, sys; sys.path[:0] = json.loads(sys.argv[1]); " \
               "from swiftlike.tools.sandbox_server import serve; serve()"
ALLOW_UNISOLATED_ENV = "SWIFTLIKE_ALLOW_UNISOLATED"
HOW_TO_ISOLATE = (
    "To isolate it: run as root with CAP_SYS_ADMIN (in Docker: --cap-add SYS_ADMIN --security-opt seccomp=unconfined "
    "--security-opt apparmor=unconfined), or allow user namespaces (Docker's default seccomp profile refuses them: "
    "--security-opt seccomp=unconfined; a kernel that refuses them to users: sysctl kernel.unprivileged_userns_clone=1 "
    "or user.max_user_namespaces=10000; Ubuntu 23.10+: sysctl kernel.apparmor_restrict_unprivileged_userns=0). To run "
    "it unisolated anyway, accepting that model-written code can read what this process can read, write where it "
    "can write and reach the network: --allow_unisolated_execution true on the command line, "
    f"{ALLOW_UNISOLATED_ENV}=1 in the environment, or swiftlike.tools.sandbox.allow_unisolated_execution() in Python.")
_UNISOLATED_WARNING = (
    "\n" + "!" * 100 + "\nTOOL SANDBOX NOT ISOLATED (--allow_unisolated_execution / " + ALLOW_UNISOLATED_ENV +
    "): model-written code and tools run with only these protections: %s\n" + "!" * 100)


class SandboxUnavailable(UsageError):
    """The machine allows no isolation of model output and the caller did not opt out: the run stops. A usage
    error (the machine for the options asked for): the message says why and how to get isolation, and the CLI
    prints only that."""

    def __init__(self, refused: dict[str, str]):
        self.refused = dict(refused)
        reasons = "; ".join(f"{setting}: {why}" for setting, why in refused.items()) or "no reason given"
        super().__init__(f"the tool sandbox cannot isolate model-written code on this machine ({reasons}). "
                         + HOW_TO_ISOLATE)


@dataclass(frozen=True)
class ToolLimits:
    timeout_s: float = 5.0  # wall clock, from fork to answer
    cpu_s: int = 2  # RLIMIT_CPU
    memory_mb: int = 256  # RLIMIT_AS beyond the process's size when forked
    max_output_chars: int = 4096  # the answer is cut here, with a note

    def __post_init__(self):
        for name, value in asdict(self).items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"ToolLimits.{name} must be a positive number, got {value!r}")
        if not isinstance(self.cpu_s, int) or not isinstance(self.memory_mb, int) \
                or not isinstance(self.max_output_chars, int):
            raise ValueError("ToolLimits.cpu_s, memory_mb and max_output_chars must be integers")


@dataclass
class ToolOutcome:
    text: str  # what the model sees as the tool result (JSON text; errors as {"error": "..."})
    error: str | None  # None = the tool ran and answered; else why not (timeout, memory, raised, non-text ...)


def _error(message: str) -> ToolOutcome:
    return ToolOutcome(json.dumps({"error": message}, ensure_ascii=False), message)


class _SandboxServer:
    """The caller's side of one sandbox server process: requests out, answers matched back by id."""

    def __init__(self):
        env = {"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8", **SINGLE_THREADED}
        self.process = subprocess.Popen([sys.executable, "-I", "-c", _SERVER_MAIN, json.dumps(sys.path)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd="/",
                                        start_new_session=True)
        self.owner_pid = os.getpid()
        self.lock = threading.Lock()
        self.waiting: dict[int, Future] = {}
        self.ids = itertools.count()
        self.ready: Future = Future()
        threading.Thread(target=self._read_answers, name="tool-sandbox-answers", daemon=True).start()
        self.started: dict = self.ready.result(timeout=STARTUP_TIMEOUT_S)
        if not self.started["isolated"]:
            if not unisolated_execution_allowed() or self.started["isolation"] is None:
                self.stop()
                raise SandboxUnavailable(self.started["refused"])
            logger.warning(_UNISOLATED_WARNING, "; ".join(f"{concern}: {words}" for concern, words in
                                                          self.started["isolation"].items()))

    @property
    def alive(self) -> bool:
        return self.process.poll() is None and self.owner_pid == os.getpid()

    def _read_answers(self) -> None:
        for line in self.process.stdout:
            answer = json.loads(line)
            if not self.ready.done():
                self.ready.set_result(answer)
                continue
            with self.lock:
                future = self.waiting.pop(answer.pop("id"), None)
            if future is not None:
                future.set_result(answer)
        code = self.process.wait()
        if not self.ready.done():
            self.ready.set_exception(RuntimeError(f"the tool sandbox server exited with code {code} on start"))
        with self.lock:
            waiting, self.waiting = self.waiting, {}
        for future in waiting.values():
            future.set_result({"text": None, "error": f"the tool sandbox server stopped (exit code {code})",
                               "infra": True})

    def call(self, request: dict, wait_s: float) -> dict:
        future: Future = Future()
        with self.lock:
            request["id"] = next(self.ids)
            self.waiting[request["id"]] = future
            try:
                self.process.stdin.write((json.dumps(request, ensure_ascii=False) + "\n").encode())
                self.process.stdin.flush()
            except OSError as error:  # the server died since the liveness check; the next call starts another
                self.waiting.pop(request["id"])
                return {"text": None, "error": f"the tool sandbox server stopped ({error})", "infra": True}
        return future.result(timeout=wait_s)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


_server: _SandboxServer | None = None
_server_lock = threading.Lock()
_allowed = False


def _running_server() -> _SandboxServer:
    global _server
    with _server_lock:
        if _server is None or not _server.alive:
            _server = _SandboxServer()
        return _server


def sandbox_isolation() -> dict[str, str]:
    """What isolates a tool on this machine, by concern (network, processes, files, identity, system calls,
    limits, imports). Raises SandboxUnavailable where nothing isolates and the caller has not opted out."""
    return dict(_running_server().started["isolation"])


def require_isolation(allow_unisolated: bool = False) -> dict[str, str]:
    """Start the sandbox now and check it isolates: a command calls this before its first episode or reward when
    it will run model output (a tool scheduler, a code reward), so that a machine without isolation stops the run
    at its start, not at its first call. `allow_unisolated` (the command's --allow_unisolated_execution) opts this
    process out for good: the sandbox then runs code unisolated, with a warning. Returns what holds
    (`sandbox_isolation`); raises SandboxUnavailable, naming why and how to get isolation, otherwise."""
    if allow_unisolated:
        allow_unisolated_execution()
    return sandbox_isolation()


def allow_unisolated_execution(allowed: bool = True) -> None:
    """The Python switch behind --allow_unisolated_execution (the environment's SWIFTLIKE_ALLOW_UNISOLATED=1 is
    the other): where the machine allows no isolation, run model output anyway, with what still holds (limits,
    minimal environment, seccomp, a uid of its own as root). For users who accept that the code can read what this
    process can, write where it can and reach the network. A sandbox already refused is tried again."""
    global _allowed
    _allowed = allowed


def unisolated_execution_allowed() -> bool:
    return _allowed or os.environ.get(ALLOW_UNISOLATED_ENV, "") in ("1", "true", "True", "yes")


def _check_limits(limits: ToolLimits) -> None:
    if not isinstance(limits, ToolLimits):
        raise TypeError(f"limits must be a ToolLimits, got {type(limits).__name__}")


def _ask(request: dict, limits: ToolLimits) -> dict:
    """The sandbox server's `{"text", "error"}` for one call; text None when there is no answer at all."""
    request["limits"] = asdict(limits)
    server = _running_server()
    wait_s = limits.timeout_s * MAX_WALL_FACTOR + ANSWER_GRACE_S  # a call starved of CPU gets more (starvation.py)
    try:
        return server.call(request, wait_s)
    except TimeoutError:
        server.stop()  # a server that misses its own deadline is replaced on the next call
        return {"text": None, "error": f"the tool sandbox did not answer {request['tool']} within {wait_s:g} s",
                "infra": True}


def run_tool_isolated(name: str, arguments: dict, limits: ToolLimits = ToolLimits()) -> ToolOutcome:
    """Run tool `name` (a built-in or one registered by a plugin file) on `arguments` in an isolated child.

    Never raises for what the model or the tool did; see the module docstring for the outcomes."""
    _check_limits(limits)
    if name not in TOOL_REGISTRY:
        return _error(f"unknown tool {name!r}; available: {', '.join(TOOL_REGISTRY)}")
    json.dumps(arguments)  # arguments parsed from model output are JSON; anything else is the caller's mistake
    answer = _ask({"tool": name, "arguments": arguments, "source": TOOL_REGISTRY[name].source}, limits)
    if answer["text"] is None:
        return _error(answer["error"])
    return ToolOutcome(answer["text"], answer["error"])


@dataclass
class ProgramOutcome:
    stdout: str  # what the program wrote to stdout, cut to fit `max_output_chars`
    stdout_cut: bool  # it wrote more than `stdout` holds
    error: str | None  # None = it (and its test) ran to the end; else why not (raised, exit code, timeout, ...)
    # the sandbox failed, not the program (its server died or did not answer, a setup error, a wall clock spent
    # waiting for a CPU): `error` says how, and there is no verdict on the code
    infra_error: bool = False


def run_program_isolated(code: str, stdin: str = "", test: str | None = None,
                         limits: ToolLimits = ToolLimits()) -> ProgramOutcome:
    """Run model-written Python `code` in an isolated child, as a script reading `stdin`, or, given `test`
    (assert statements), as a module the test then runs against (`program.py` says how, and what a program can
    and cannot fake). The same child, limits and outcomes as a tool call; never raises for what the code does."""
    _check_limits(limits)
    if not all(isinstance(text, str) for text in (code, stdin, "" if test is None else test)):
        raise TypeError("code, stdin and test must be text")
    answer = _ask({"tool": "the program", "program": {"code": code, "stdin": stdin, "test": test}}, limits)
    if answer.get("infra"):
        return ProgramOutcome("", False, answer["error"], infra_error=True)
    try:
        body = json.loads(answer["text"])
        stdout, cut = body["stdout"], body["stdout_cut"]  # absent from the sandbox's own error answers
    except (TypeError, ValueError, KeyError):
        return ProgramOutcome("", False, answer["error"] or "the program's answer cannot be read")
    if not isinstance(stdout, str) or not isinstance(cut, bool):  # not the runner's (program.py) answer
        return ProgramOutcome("", False, answer["error"] or "the program's answer cannot be read")
    return ProgramOutcome(stdout, cut, answer["error"])
