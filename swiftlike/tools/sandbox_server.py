"""The sandbox server: one long-lived process per caller that forks an isolated child for each call (a tool, a program).

Started by `sandbox.py` with `python -I` and an environment of PATH and LANG only, it imports no more than
`swiftlike.tools` (plus the plugin files that define the tools it is asked for), so forking it costs a few
milliseconds where starting an interpreter would cost a hundred, and a forked tool inherits nothing of the
trainer: not its memory, its environment, its open files or its threads. On start it probes which isolation
this machine allows (`isolation.probe_order`, each setting checked from inside a child by `isolation.verify`) and
writes that as its first line, with why each stronger setting was refused; the caller decides whether what it got
is enough (`sandbox.py` refuses to go on unisolated unless told to).

Protocol, one JSON object per line: requests on stdin `{"id", "tool", "arguments", "limits", "source"}`, or
`{"id", "tool", "program", "limits"}` for a Python program (`program.py`; "tool" then only names it in errors),
answers on stdout `{"id", "text", "error"}`, in the order calls finish. Calls run at once; the event loop
(selectors over each call's pipes and a pidfd for its outer process) never blocks on a tool. What a child
writes is read as untrusted: bounded in size, parsed, checked, cut again. As root each running call holds one uid
of the server's block (`isolation.UID_BLOCK`, locked against other servers), given back when it ends; a request that finds all of them taken waits for one. The server
ends when its stdin closes (the caller is gone), killing what still runs.
"""
from __future__ import annotations

import importlib.util
import json
import os
import select
import selectors
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import rootfs
from .builtin import TOOL_REGISTRY
from .errors import ToolResultNotText
from .isolation import (Isolation, call_uids, enter_inner, enter_outer, private_workdir, probe_order,
                        shared_user_namespace, verify)
from .program import run_program
from .starvation import at_deadline

PROBE_TIMEOUT_S = 10.0
_READ_CHUNK = 1 << 16
_CUT_NOTE = "\n[cut: the result has {} characters; the limit is {}]"


def cut(text: str, max_chars: int) -> str:
    """`text` cut to `max_chars` characters, with a note saying so for the model."""
    if len(text) <= max_chars:
        return text
    return text[:max_chars] + _CUT_NOTE.format(len(text), max_chars)


def _longest_answer(max_chars: int) -> int:
    """The most characters a cut answer can have: the kept text and the note with two long numbers."""
    return max_chars + len(_CUT_NOTE.format(10 ** 18, 10 ** 18))


def _error_text(error: str) -> str:
    return json.dumps({"error": error}, ensure_ascii=False)


def _answer_error(text: str) -> str | None:
    """The message of an `{"error": ...}` answer (a refusal, a bad call), None for any other answer."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value["error"] if isinstance(value, dict) and set(value) == {"error"} else None


def _run_tool(request: dict) -> dict:
    """In the isolated child: the tool's answer, or why there is none, as `{"text", "error"}`."""
    name, limits = request["tool"], request["limits"]
    if "program" in request:
        return run_program(request["program"], limits["max_output_chars"])
    try:
        text = TOOL_REGISTRY[name](request["arguments"])
        return {"text": cut(text, limits["max_output_chars"]), "error": _answer_error(text)}
    except ToolResultNotText as not_text:
        error = str(not_text)
    except MemoryError:
        error = f"{name} ran out of memory (the limit is {limits['memory_mb']} MB)"
    except BaseException as raised:  # noqa: BLE001 - whatever a tool does becomes an answer, SystemExit included
        error = f"{name} raised {type(raised).__name__}: {raised}"
    return {"text": cut(_error_text(error), limits["max_output_chars"]), "error": error}


def _import_source(source: list[str] | None, imported: set[str]) -> None:
    """Import the plugin file that registered a tool (once), under the module name it had in the caller."""
    if source is None or source[1] in imported:
        return
    module_name, path = source
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    if str(Path(path).parent) not in sys.path:
        sys.path.append(str(Path(path).parent))
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    imported.add(path)


@dataclass
class _Call:
    request: dict
    pid: int  # the outer process, leader of the call's process group
    pidfd: int
    result_fd: int
    status_fd: int
    deadline: float
    workdir: str | None
    uid: int  # the call's own uid as root (given back when it ends), the caller's otherwise
    result: bytearray = field(default_factory=bytearray)
    status: bytearray = field(default_factory=bytearray)
    timed_out: bool = False
    starved: str | None = None  # why a call past its wall clock was the machine's fault (starvation.py)
    started: float = field(default_factory=time.monotonic)
    too_long: bool = False

    @property
    def max_result_bytes(self) -> int:
        return 8 * self.request["limits"]["max_output_chars"] + 1024  # JSON escapes, UTF-8, the envelope


def _start(request: dict, isolation: Isolation, uid: int, user_namespace: int | None, probe: bool = False) -> _Call:
    """Fork the outer process, which enters the namespaces and forks the inner one that runs the tool."""
    result_read, result_write = os.pipe()
    status_read, status_write = os.pipe()
    workdir = private_workdir(isolation, uid)
    if isolation.isolated:
        rootfs.view()  # resolved here, once, with the server's rights, rather than in every child
    pid = os.fork()
    if pid == 0:
        _outer(request, (isolation, uid, user_namespace), probe, result_write, status_write, workdir)
    os.close(result_write)
    os.close(status_write)
    for fd in (result_read, status_read):
        os.set_blocking(fd, False)
    return _Call(request, pid, os.pidfd_open(pid), result_read, status_read,
                 time.monotonic() + request["limits"]["timeout_s"], workdir, uid)


def _outer(request, setting, probe, result_write, status_write, workdir) -> None:
    """The outer process: our code only. Reports how the inner one ended (the tool cannot forge this)."""
    isolation, uid, user_namespace = setting
    status = {}
    try:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # the server's protocol pipes are not the tool's to read or write
            os.dup2(null, fd)
        kept = sorted(fd for fd in (result_write, status_write, user_namespace) if fd is not None)
        for low, high in zip((2, *kept), (*kept, os.sysconf("SC_OPEN_MAX"))):  # nor are other calls' pipes
            os.closerange(low + 1, high)
        enter_outer(isolation, user_namespace)
        if user_namespace is not None and isolation.entry != "shared_user_namespace":
            os.close(user_namespace)
        inner = os.fork()
        if inner == 0:
            os.close(status_write)
            _inner(request, isolation, uid, probe, result_write, workdir)
        os.close(result_write)
        _, wait_status, usage = os.wait4(inner, 0)
        status = {"exit_code": os.waitstatus_to_exitcode(wait_status), "cpu_s": usage.ru_utime + usage.ru_stime}
    except BaseException as failed:  # noqa: BLE001 - reported to the server, which answers the caller
        status = {"setup_error": f"{type(failed).__name__}: {failed}"}
    finally:
        os.write(status_write, json.dumps(status).encode())
        os._exit(0)


def _inner(request, isolation, uid, probe, result_write, workdir) -> None:
    try:
        limits = request["limits"]
        enter_inner(isolation, uid=uid, cpu_s=limits["cpu_s"], memory_mb=limits["memory_mb"], workdir=workdir)
        if probe and isolation.isolated:
            verify(isolation, uid, hidden=str(Path(__file__).parent))
        answer = {"probe": "ok"} if probe else _run_tool(request)
    except BaseException as failed:  # noqa: BLE001 - e.g. a namespace this machine refuses, found by the probe
        answer = {"setup_error": f"{type(failed).__name__}: {failed}"}
    data = json.dumps(answer, ensure_ascii=False).encode()
    while data:
        data = data[os.write(result_write, data):]
    os._exit(0)


def _kill(call: _Call) -> None:
    for kill, target in ((os.killpg, call.pid), (os.kill, call.pid)):
        try:
            kill(target, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _drain(call: _Call) -> bool:
    """Read what the call's pipes hold now; True once the result pipe is closed or over its bound."""
    done = False
    for fd, buffer in ((call.result_fd, call.result), (call.status_fd, call.status)):
        while not (fd == call.result_fd and call.too_long):
            try:
                chunk = os.read(fd, _READ_CHUNK)
            except BlockingIOError:
                break
            if not chunk:
                done = done or fd == call.result_fd
                break
            buffer += chunk
            if fd == call.result_fd and len(buffer) > call.max_result_bytes:
                call.too_long = True
                _kill(call)
    return done or call.too_long


def _kill_uid(uid: int) -> None:
    """Without a pid namespace, as root: end every process of the call's uid, a `setsid()` child's included
    (kill(-1) signals all the processes its caller may signal, which for a plain uid are that uid's)."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def _finish(call: _Call, isolation: Isolation | None = None) -> dict:
    """Reap the call's processes and turn what they wrote into the answer for the caller."""
    _kill(call)  # whatever is left in the group (without a pid namespace, the tool's children)
    os.waitpid(call.pid, 0)
    if isolation is not None and not isolation.isolated and isolation.as_root:
        _kill_uid(call.uid)
    _drain(call)
    for fd in (call.pidfd, call.result_fd, call.status_fd):
        os.close(fd)
    if call.workdir is not None:
        shutil.rmtree(call.workdir, ignore_errors=True)
    name, limits = call.request["tool"], call.request["limits"]
    answer = _parse(call.result, limits["max_output_chars"])
    status = _parse_status(call.status)
    if call.timed_out and call.starved:  # no verdict on the code: an infrastructure error, as a setup error is
        error = f"the machine was too busy to give {name} its {limits['timeout_s']:g} s ({call.starved})"
        return {"text": _error_text(error), "error": error, "infra": True}
    if call.timed_out:
        error = f"{name} timed out after {limits['timeout_s']:g} s"
    elif call.too_long:
        error = f"{name} wrote more than {call.max_result_bytes} bytes as its answer"
    elif answer is not None and "setup_error" not in answer:
        return answer
    elif "setup_error" in (answer or status):
        error = f"the sandbox could not isolate {name}: {(answer or status)['setup_error']}"
        return {"text": _error_text(error), "error": error, "infra": True}
    elif status.get("exit_code") == -signal.SIGXCPU or (  # RLIMIT_CPU: SIGXCPU, then SIGKILL a second later
            status.get("exit_code") == -signal.SIGKILL and status["cpu_s"] >= limits["cpu_s"]):
        error = f"{name} timed out after {limits['cpu_s']} s of CPU time"
    elif call.result:
        error = f"{name}'s process wrote an answer the sandbox cannot read"
    elif status.get("exit_code", 0) < 0:
        error = f"{name}'s process was killed by {signal.Signals(-status['exit_code']).name} without answering"
    else:
        error = f"{name}'s process ended (exit code {status.get('exit_code')}) without answering"
    return {"text": _error_text(error), "error": error}


def _parse(data: bytes, max_chars: int) -> dict | None:
    """The child's `{"text", "error"}` (or `{"probe"}` / `{"setup_error"}`), None when it is anything else."""
    try:
        answer = json.loads(data)
    except ValueError:
        return None
    if not isinstance(answer, dict):
        return None
    if set(answer) in ({"probe"}, {"setup_error"}):
        return answer
    if set(answer) != {"text", "error"} or not isinstance(answer["text"], str) or not (
            answer["error"] is None or isinstance(answer["error"], str)):
        return None
    text = answer["text"]  # cut by the child already, unless the tool tampered with the child's code
    return {"text": text if len(text) <= _longest_answer(max_chars) else cut(text, max_chars),
            "error": answer["error"]}


def _parse_status(data: bytes) -> dict:
    try:
        status = json.loads(data)
    except ValueError:
        return {}
    return status if isinstance(status, dict) else {}


def _try(isolation: Isolation, user_namespace: int | None) -> str | None:
    """Why `isolation` does not work here (its setup failed or `verify` found a protection missing), or None."""
    limits = {"timeout_s": PROBE_TIMEOUT_S, "cpu_s": 2, "memory_mb": 64, "max_output_chars": 1024}
    uid = isolation.uids[0] if isolation.as_root else os.getuid()
    call = _start({"tool": "probe", "limits": limits}, isolation, uid, user_namespace, probe=True)
    call.timed_out = not select.select([call.pidfd], [], [], PROBE_TIMEOUT_S)[0]
    answer = _finish(call, isolation)
    if answer == {"probe": "ok"}:
        return None
    return answer["error"].replace("the sandbox could not isolate probe: ", "")


def probe() -> tuple[Isolation | None, dict[str, str], int | None]:
    """The strongest isolation a child can enter on this machine (tried for real, strongest first), why each
    stronger one was refused, and the user namespace calls enter (`shared_user_namespace` only)."""
    refused: dict[str, str] = {}
    as_root = os.geteuid() == 0
    held = call_uids() if as_root else None  # the lock stays open, held, while this process lives
    candidates = probe_order(as_root, held[0] if held else None)
    if not candidates:
        refused["uids"] = "no block of uids for the calls: this user namespace maps none of isolation.UID_RANGES, " \
                          "or other sandbox servers hold every block"
    for isolation in candidates:
        user_namespace = None
        try:
            if isolation.entry == "shared_user_namespace":
                user_namespace = shared_user_namespace(isolation.uids)
        except OSError as failed:
            refused[isolation.entry] = str(failed)
            continue
        why = _try(isolation, user_namespace)
        if why is None:
            return isolation, refused, user_namespace
        refused[isolation.entry] = why
        if user_namespace is not None:
            os.close(user_namespace)
    return None, refused, None


class _Server:
    def __init__(self, isolation: Isolation, user_namespace: int | None):
        self.isolation, self.user_namespace = isolation, user_namespace
        self.selector = selectors.DefaultSelector()
        self.calls: dict[int, _Call] = {}  # pidfd -> call
        self.imported: set[str] = set()
        self.pending = b""
        first, count = isolation.uids if isolation.as_root else (os.getuid(), 0)
        self.free_uids = list(range(first + count - 1, first - 1, -1))  # popped from the end: the lowest first
        self.waiting: list[dict] = []  # requests that found every uid taken

    def serve(self) -> None:
        self.selector.register(0, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            timeout = min((call.deadline - now for call in self.calls.values() if not call.timed_out), default=None)
            for key, _ in self.selector.select(None if timeout is None else max(timeout, 0)):
                if key.fd == 0 and not self._read_requests():
                    for call in self.calls.values():
                        _finish(call, self.isolation)
                    return
                if key.data is not None:
                    self._progress(key.data, exited=key.fd == key.data.pidfd)
            for call in list(self.calls.values()):
                if not call.timed_out and time.monotonic() >= call.deadline:
                    late = at_deadline(call.pid, call.started, call.request["limits"]["timeout_s"], time.monotonic())
                    if late.extend_to is not None:  # it spent its time waiting for a CPU: starvation.py
                        call.deadline = late.extend_to
                        continue
                    call.timed_out, call.starved = True, late.starved
                    _kill(call)

    def _read_requests(self) -> bool:
        chunk = os.read(0, _READ_CHUNK)
        if not chunk:
            return False
        *lines, self.pending = (self.pending + chunk).split(b"\n")
        for line in lines:
            self._begin(json.loads(line))
        return True

    def _begin(self, request: dict) -> None:
        error = None if "program" in request else self._tool_missing(request)
        if error is not None:
            return self._answer(request, {"text": _error_text(error), "error": error})
        if self.isolation.as_root and not self.free_uids:
            self.waiting.append(request)
            return None
        uid = self.free_uids.pop() if self.isolation.as_root else os.getuid()
        call = _start(request, self.isolation, uid, self.user_namespace)
        self.calls[call.pidfd] = call
        for fd in (call.pidfd, call.result_fd, call.status_fd):
            self.selector.register(fd, selectors.EVENT_READ, call)

    def _tool_missing(self, request: dict) -> str | None:
        """Why the tool a request names cannot run here (its plugin file does not import, or does not register
        it), None when it can."""
        try:
            _import_source(request["source"], self.imported)
        except BaseException as failed:  # noqa: BLE001 - a plugin that imported in the caller but not here
            return f"the sandbox could not import {request['source'][1]} for {request['tool']}: {failed}"
        if request["tool"] not in TOOL_REGISTRY:
            where = f"{request['source'][1]} did not register it" if request["source"] else "it is not a built-in"
            return f"the sandbox has no tool {request['tool']!r}: {where}"
        return None

    def _progress(self, call: _Call, exited: bool) -> None:
        if self.calls.get(call.pidfd) is not call:  # finished earlier in this round of events
            return
        registered = self.selector.get_map()
        if _drain(call) and call.result_fd in registered:
            self.selector.unregister(call.result_fd)
        if exited:
            for fd in (call.pidfd, call.result_fd, call.status_fd):
                if fd in registered:
                    self.selector.unregister(fd)
            del self.calls[call.pidfd]
            self._answer(call.request, _finish(call, self.isolation))
            if self.isolation.as_root:
                # taken last: a fork bomb's processes may still be dying when its call has answered, and they
                # count against the uid's RLIMIT_NPROC (the next call on it could not fork: EAGAIN)
                self.free_uids.insert(0, call.uid)
                if self.waiting:
                    self._begin(self.waiting.pop(0))

    @staticmethod
    def _answer(request: dict, answer: dict) -> None:
        data = (json.dumps({"id": request["id"], **answer}, ensure_ascii=False) + "\n").encode()
        while data:
            data = data[os.write(1, data):]


def serve() -> None:
    """The server's main: probe, say what holds (or that nothing isolates), then answer calls until stdin closes."""
    isolation, refused, user_namespace = probe()
    line = {"isolated": isolation is not None and isolation.isolated, "refused": refused,
            "entry": None if isolation is None else isolation.entry, "uids": None if isolation is None else isolation.uids,
            "isolation": None if isolation is None else isolation.report()}
    os.write(1, (json.dumps(line) + "\n").encode())
    if isolation is not None:
        _Server(isolation, user_namespace).serve()
