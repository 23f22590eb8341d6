"""The test runner's side of a `code_exec` case: the verdict, decided in a process the program cannot reach.

An assert case used to run its test statements in the program's own interpreter, and code written against the
harness passed without being right: it replaced the harness's function that ran the test, wrote a forged answer
to the result pipe it had inherited and exited, or returned an object whose `__eq__` is always true. So the test
runs here, in the runner (the sandboxed call's first process, `program.py` starts it), and the program runs in
another process (`candidate.py`, a fresh interpreter exec'd by the runner), which executes its module and serves
the runner's calls into it. What keeps the program out of the verdict:

- values: a call into the program returns only plain values, `None`, `bool`, `int`, `float`, `complex`, `str`,
  `bytes` and `list` / `tuple` / `set` / `frozenset` / `dict` of them, rebuilt here by `candidate.decode` from
  a checked wire format with the builtin types themselves, so `==`, `<`, `in`, `hash` are Python's, never the
  program's. Anything else the program returns stays in its process as a `Proxy` whose equality is identity
  (no comparison is ever asked of the program: an `__eq__` or `__lt__` that always says yes would pass every
  assertion, and the value it was compared with would leak). A proxy forwards the operations that ask the
  program about its own object: calls, attributes, items, `len`, `bool`, `str`, `repr`, iteration (so `x in
  proxy` iterates and compares here);
- process: the runner is pid 1 of the call's pid namespace, so the program cannot signal it (the kernel drops
  signals to a namespace's init that it has no handler for, and the runner keeps none); it is not dumpable, so
  the program can neither ptrace it (seccomp also refuses ptrace) nor open its `/proc/1/mem` or `/proc/1/fd`;
  the program's process holds only fds 0-4 (stdin and stdout memory files, /dev/null, the two pipes of this
  wire): the pipe of the sandbox's answer stays here;
- knowledge: the program's interpreter is exec'd, not forked, so its memory holds nothing of the sandbox server's,
  which held the test being judged and the tests of the calls running beside it; it sees a call's arguments,
  never what the result is compared with;
- imports: the test's own `import` statements cannot load a module the program wrote: the runner drops every
  `sys.path` entry the program could write to before the test runs;
- exceptions: an exception the program raises is raised here as the builtin exception of its nearest builtin
  class (a `ValueError` subclass as `ValueError`, with the program's message), so `try: ... except ValueError`
  tests work and nothing of the program's is raised here; an exit or the end of the program's process during
  the test fails the case even when the test catches it (`ProgramEnded`, checked after the test).

What a test can do across the boundary: call the program's functions and classes with plain values, the
program's own objects (proxies) and the standard library's modules, functions and classes (`key=len`); a test's
own function or object cannot be passed (TypeError, saying so). Lists, dicts and sets a call changes in place
are written back into the test's objects after the call (`nums.sort()` in the program changes the test's `nums`);
the nested lists of a list written back are new objects. A module the program imported under its own name is the
runner's (`import math` in the program, `math.isclose(...)` in the test); any other name of the program's is the
program's, a helper it imported (`from math import isclose`) included, so a test that compares with a helper from
the program's namespace trusts the program: such a test should import the helper itself. A name of the program's
that is a builtin's (`all`, `abs`, `sorted`) does not hide the builtin from the test (`from solution import all`
reaches it), and a StopIteration out of a call is a RuntimeError: either would let a wrong program end a test's
`all(map(...))` early or true.
"""
from __future__ import annotations

import builtins
import importlib
import json
import marshal
import os
import select
import signal
import sys
import types

from .candidate import (EXITED, as_plain, decode, encode, execute, find_object, frame_length, trusted_module,
                        write_frame)

_READ_CHUNK = 1 << 20


class ProgramEnded(BaseException):
    """The program exited or its process ended during the test: the case fails, whatever the test catches."""


class Proxy:
    """An object of the program's, in its process (module docstring): identity equality, operations forwarded."""

    __slots__ = ("_link", "_number", "__weakref__")

    def __init__(self, link: Link, number: int):
        object.__setattr__(self, "_link", link)
        object.__setattr__(self, "_number", number)

    def __getattr__(self, name):
        return self._link.ask("getattr", self, name)

    def __setattr__(self, name, value):
        self._link.ask("setattr", self, name, value)

    def __delattr__(self, name):
        self._link.ask("delattr", self, name)

    def __call__(self, *args, **kwargs):
        return self._link.call(self, args, kwargs)

    def __getitem__(self, key):
        return self._link.ask("getitem", self, key)

    def __setitem__(self, key, value):
        self._link.ask("setitem", self, key, value)

    def __delitem__(self, key):
        self._link.ask("delitem", self, key)

    def __len__(self):
        return self._link.ask("len", self)

    def __bool__(self):
        return self._link.ask("bool", self)

    def __str__(self):
        return self._link.ask("str", self)

    def __repr__(self):
        return self._link.ask("repr", self)

    def __iter__(self):
        return self._link.ask("iter", self)

    def __next__(self):
        return self._link.ask("next", self)

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other

    __hash__ = object.__hash__


def _builtin_exception(names: list, args: tuple) -> BaseException | None:
    """The builtin exception nearest the program's class (its MRO's names, in order) with the program's arguments,
    or None when there is none (a BaseException that is not an Exception, such as KeyboardInterrupt)."""
    for name in names:
        klass = getattr(builtins, name, None) if type(name) is str else None
        if isinstance(klass, type) and issubclass(klass, Exception):
            try:
                return klass(*args)
            except Exception:  # noqa: BLE001 - arguments its constructor refuses (UnicodeDecodeError's): its base
                continue
    return None


def ended_message(wait_status: int, cpu_s: float, cpu_limit: int) -> str:
    """Why the program's process ended, from its wait status (as the sandbox server words a call's end)."""
    code = os.waitstatus_to_exitcode(wait_status)
    if code == -signal.SIGXCPU or (code == -signal.SIGKILL and cpu_s >= cpu_limit):
        return f"the program timed out after {cpu_limit} s of CPU time"
    if code < 0:
        return f"the program's process was killed by {signal.Signals(-code).name} without answering"
    return f"the program's process ended (exit code {code}) without answering"


class Link:
    """The runner's end of the wire to the program's process: one request, one reply (candidate.py's frames)."""

    def __init__(self, pid: int, requests: int, replies: int, cpu_limit: int):
        self.pid, self.requests, self.replies, self.cpu_limit = pid, requests, replies, cpu_limit
        self.pidfd = os.pidfd_open(pid)
        self.pending = b""
        self.proxies: dict[int, Proxy] = {}
        self.failure: str | None = None  # set once the program exited or ended: the case fails
        self.exit_code: int | None = None  # the process's, once it ended

    # ------------------------------------------------------------------ frames
    def receive(self) -> dict:
        """The program's next message; ProgramEnded when its process ends first or it writes anything else."""
        while True:
            if len(self.pending) >= 8:
                try:
                    length = frame_length(self.pending[:8])
                except ValueError as error:
                    self.fail(f"the program's process answered with {error}")
                if len(self.pending) >= 8 + length:
                    body, self.pending = self.pending[8:8 + length], self.pending[8 + length:]
                    try:
                        message = json.loads(body)
                    except ValueError:
                        message = None
                    if type(message) is not dict:
                        self.fail("the program's process answered with something that is not a message")
                    return message
            ready = select.select([self.replies, self.pidfd], [], [])[0]
            chunk = os.read(self.replies, _READ_CHUNK) if self.replies in ready else b""
            if not chunk:  # the pipe's end, or the process ended with nothing left to read
                self.fail(self.ended())
            self.pending += chunk

    def send(self, message: dict) -> None:
        try:
            write_frame(self.requests, marshal.dumps(message))
        except OSError:  # a broken pipe: the process ended
            self.fail(self.ended())

    def ended(self) -> str:
        """Why the program's process ended, waiting for its end (its pipe closed: it is ending, or it closed the
        pipe itself and the sandbox's limits end it)."""
        _, wait_status, usage = os.wait4(self.pid, 0)
        self.exit_code = os.waitstatus_to_exitcode(wait_status)
        return ended_message(wait_status, usage.ru_utime + usage.ru_stime, self.cpu_limit)

    def fail(self, why: str):
        if self.failure is None:
            self.failure = why
        raise ProgramEnded(self.failure)

    def stop(self) -> None:
        if self.exit_code is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        os.close(self.pidfd)

    # ------------------------------------------------------------------ values
    def proxy(self, number: int) -> Proxy:
        if number not in self.proxies:
            self.proxies[number] = Proxy(self, number)
        return self.proxies[number]

    def value(self, data):
        """A value the program sent, rebuilt here (plain values and proxies only; see the module docstring)."""
        try:
            return decode(data, self.proxy, lambda tag, name, qualname, number: self.proxy(number))
        except (ValueError, TypeError, RecursionError, MemoryError) as error:
            self.fail(f"the program answered with something that is not a value ({type(error).__name__})")

    def _opaque(self, value):
        """What the test passes that is not exactly a plain type: the program's own objects, plain subclasses,
        the standard library's modules, functions and classes; nothing else (module docstring)."""
        if type(value) is Proxy:
            if value._link is not self:
                raise TypeError("the test passed an object of another program's process")
            return ["h", value._number]
        plain = as_plain(value)  # the test's own object: its methods are trusted
        if plain is not None:
            return encode(plain, self._opaque)
        if type(value) is types.ModuleType and trusted_module(value.__name__):
            return ["m", value.__name__, -1]
        module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
        if trusted_module(module) and type(qualname) is str:
            try:
                if find_object(module, qualname) is value:
                    return ["r", module, qualname, -1]
            except Exception:  # noqa: BLE001 - not found by its name: refused below
                pass
        raise TypeError(f"the test passed a {type(value).__name__} to the program; only plain values (None, bool, "
                        "int, float, complex, str, bytes and lists, tuples, sets, frozensets and dicts of them), the "
                        "program's own objects and the standard library's modules, functions and classes cross "
                        "into the program's process")

    # ------------------------------------------------------------------ operations
    def ask(self, op: str, target: Proxy, *args):
        if self.failure is not None:
            raise ProgramEnded(self.failure)
        self.send({"op": op, "target": target._number, "args": [encode(arg, self._opaque) for arg in args]})
        return self.outcome(self.receive(), ends_iteration=op == "next")

    def call(self, target: Proxy, args: tuple, kwargs: dict):
        if self.failure is not None:
            raise ProgramEnded(self.failure)
        request = {"op": "call", "target": target._number, "args": [encode(arg, self._opaque) for arg in args],
                   "kwargs": {name: encode(arg, self._opaque) for name, arg in kwargs.items()}}
        self.send(request)
        reply = self.receive()
        value = self.outcome(reply)
        changed = reply.get("changed")
        if type(changed) is dict:
            passed = {**kwargs, **{str(i): arg for i, arg in enumerate(args)}}
            for key, data in changed.items():
                self.write_back(passed.get(key), self.value(data))
        return value

    @staticmethod
    def write_back(original, now) -> None:
        """The test's list, dict or set as the program left it (its own object, changed in place)."""
        if type(original) is list and type(now) is list:
            original[:] = now
        elif type(original) in (dict, set) and type(now) is type(original):
            original.clear()
            original.update(now)

    def outcome(self, reply: dict, ends_iteration: bool = False):
        """The value of the program's reply, or its exception raised here. StopIteration ends an iteration only
        from `next`: raised by a call, it would end the test's `map`, `filter` or `iter(f, sentinel)` around that
        call as if there were nothing left to check, so there it is a RuntimeError (as PEP 479 makes it in a
        generator)."""
        if "value" in reply:
            return self.value(reply["value"])
        if "raised" in reply and type(reply["raised"]) is list and type(reply.get("message")) is str:
            args = self.value(reply.get("args"))
            raised = _builtin_exception(reply["raised"], args if type(args) is tuple else (reply["message"],))
            if isinstance(raised, (StopIteration, StopAsyncIteration)) and not ends_iteration:
                raise RuntimeError(f"the program raised {reply['message']} outside an iteration")
            if raised is not None:
                raise raised
            self.fail(f"the program raised {reply['message']} during its test")
        if type(reply.get("exit")) is str:
            self.fail("the test ended in sys.exit(0)" if reply["exit"] == EXITED else reply["exit"])
        self.fail("the program's process answered with something that is not a message")


def namespace(link: Link, names) -> dict:
    """The test's globals: the program module's names, its standard-library modules the runner's own, and none
    that would hide a builtin (a program's `all = lambda _: True` would pass `assert all(...)`): those stay on the
    `solution` module, for a test that asks for them (`from solution import max`)."""
    if type(names) is not list or not all(type(pair) is list and len(pair) == 2 and type(pair[0]) is str
                                          for pair in names):
        link.fail("the program's process answered with something that is not a message")
    found = {}
    for name, data in names:
        if (type(data) is list and len(data) == 3 and data[0] == "m" and data[1] == name and trusted_module(name)
                and type(data[2]) is int):
            try:
                found[name] = importlib.import_module(name)
                continue
            except Exception:  # noqa: BLE001 - not importable here: the program's module, by its handle
                pass
        found[name] = link.value(data)
    module = types.ModuleType("solution")  # for a test that imports the program: `from solution import add`
    module.__dict__.update(found)
    sys.modules["solution"] = module
    shown = {name: value for name, value in found.items() if name not in vars(builtins)}
    return {**shown, "__builtins__": builtins, "__name__": "solution"}


def judge(link: Link, code: str, test: str | None) -> str | None:
    """Run the program (as `__main__` without a test, as module `solution` with one) and its test: None when
    both ran to the end, else why not. Never raises."""
    try:
        link.send({"code": code, "module": "__main__" if test is None else "solution", "path": list(sys.path),
                   "int_max_str_digits": sys.get_int_max_str_digits()})
        loaded = link.receive()
    except ProgramEnded:
        return None if test is None and link.exit_code == 0 else link.failure  # a script's os._exit(0): its end
    stopped = loaded.get("done", 0)
    if stopped is not None and type(stopped) is not str:
        return "the program's process answered with something that is not a message"
    if test is None:
        return stopped
    if stopped is not None:
        return "the program exited before its test ran" if stopped == EXITED else stopped
    _close_writable_imports()
    try:
        globals_ = namespace(link, loaded.get("names"))
    except ProgramEnded:
        return link.failure
    stopped = execute(test, "<test>", globals_)
    if link.failure is not None:
        return link.failure
    return "the test ended in sys.exit(0)" if stopped == EXITED else stopped


def _close_writable_imports() -> None:
    """Drop from `sys.path` each entry the program could write a module into (its nearest existing directory is
    writable: the call's /tmp, a relative entry resolved against it), so the test imports only installed code."""
    def writable(entry: str) -> bool:
        path = os.path.abspath(entry) if entry else os.getcwd()
        while not os.path.exists(path) and path != os.path.dirname(path):
            path = os.path.dirname(path)
        return not os.path.isabs(entry) or os.access(path, os.W_OK)
    sys.path[:] = [entry for entry in sys.path if not writable(entry)]
    sys.path_importer_cache.clear()
