"""A model-written Python program, run inside the sandbox's isolated child (`sandbox.run_program_isolated`).

The child is isolated before this runs (`isolation.py`: no network, its own pid namespace, a root of its own with
a private tmpfs at /tmp, a uid of its own, rlimits, a seccomp filter). It becomes the test runner, and the program
runs in a second process it starts: a fresh interpreter (`python -I -S -c <candidate.py>`, the base interpreter
the sandbox shows), which holds nothing of the sandbox server's memory. `verdict.py` says why two processes and
what crosses between them; what this module adds is making the code behave as it would as
`python3 program.py < input > output`, and saying how it ended:

- stdin and stdout are files in memory (memfd) on the descriptors 0 and 1 of both processes, so `input()`,
  `sys.stdin.buffer.read()`, `open(0).read()`, `os.write(1, ...)` and the program's own subprocesses all read the
  case's input and write to the one captured output. RLIMIT_FSIZE (`isolation.MAX_FILE_MB`) bounds that output:
  past it a write fails (`OSError: File too large`, as Python ignores SIGXFSZ), which stops a program that prints
  forever well before its CPU time runs out. Only the first characters that fit the answer (`max_output_chars`)
  travel back, with a flag when there was more, so a huge print costs the caller nothing.
- Without a test (a stdin/stdout case) the code runs as `__main__`, as a script does, and the runner only waits
  for it. With one (assert statements) it runs as a module named `solution`, and the runner runs the test against
  the module's names, as a test file importing the solution would: a demo under `if __name__ == "__main__":`
  that waits for input is not run.
- `sys.exit(0)` (or `exit()`) ends a program normally, as exit code 0 does (so does a script's `os._exit(0)`);
  another code, an exception, or an exit before or during the test is the error the case fails on.

A stdin/stdout case is judged by the caller, against an expected output that never enters the sandbox; an assert
case by the runner, which the program cannot reach (`verdict.py`). The sandbox's answer goes out through a pipe
only the runner holds. Whatever fails before the program's code is sent to its process (the interpreter cannot be
exec'd or does not start, a pipe or memory file cannot be made) is the sandbox's failure, not the program's: it is
answered as `{"setup_error"}`, which the sandbox reports as an infrastructure error (the reward is then missing).
"""
from __future__ import annotations

import ctypes
import fcntl
import json
import marshal
import os
import resource
import signal
import sys
from pathlib import Path

from . import candidate
from .verdict import Link, judge

# resolved in the sandbox server, before any call: the base interpreter (a virtual environment is not shown inside
# the sandbox) and the program side's code, compiled once, which the interpreter's -c (candidate.BOOT) reads first
_PYTHON = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
_CODE = marshal.dumps(compile(Path(candidate.__file__).read_text(encoding="utf-8"), candidate.__file__, "exec"))
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE = 1, 4
_MAX_FD = 2 ** 31 - 1  # every descriptor there can be; close_range(2) makes that cost only the open ones
_libc = ctypes.CDLL(None, use_errno=True)


class _SetupFailed(Exception):
    """The program's process could not be started: the sandbox's failure, reported as a setup error."""


def _memory_file(name: str, data: bytes = b"") -> int:
    fd = os.memfd_create(name)
    while data:
        data = data[os.write(fd, data):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _answer(stdout: str, cut: bool, error: str | None, max_chars: int) -> dict:
    """`{"text", "error"}` for the sandbox server, the text at most `max_chars` long (the server would cut a longer
    one, and cut JSON does not parse): the output is shortened first, then the error."""
    body = {"stdout": stdout, "stdout_cut": cut, "error": error}
    excess = len(json.dumps(body, ensure_ascii=False)) - max_chars
    if excess > 0:  # every character left out shortens the JSON by at least one
        body.update(stdout=stdout[:max(0, len(stdout) - excess)], stdout_cut=True)
    text = json.dumps(body, ensure_ascii=False)
    while len(text) > max_chars and body["error"]:
        body["error"] = body["error"][:len(body["error"]) // 2]
        text = json.dumps(body, ensure_ascii=False)
    return {"text": text, "error": error}


def _harden() -> None:
    """The runner out of the program's reach: not dumpable (no ptrace, no /proc/1/mem or /proc/1/fd for a process
    of the same uid), and no handler for SIGINT, so that as the pid namespace's init it gets no signal from inside
    (Python's KeyboardInterrupt handler would let the program interrupt the runner)."""
    if _libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise _SetupFailed(f"prctl(PR_SET_DUMPABLE): {os.strerror(ctypes.get_errno())}")
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _high(fd: int) -> int:
    """`fd` moved to 6 or above (close-on-exec), out of the way of the program's 0-5."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 6)
    os.close(fd)
    return moved


def _exec_program(requests: int, replies: int, failed: int) -> None:
    """In the forked child: the wire on fds 3 and 4, nothing else of the runner's but 0-2, then the interpreter.
    An exec that fails writes its error to `failed` (close-on-exec: a successful exec closes it unwritten)."""
    try:
        os.dup2(requests, candidate.REQUESTS)
        os.dup2(replies, candidate.REPLIES)
        os.dup2(failed, 5, inheritable=False)
        os.closerange(6, _MAX_FD)  # not the RLIMIT_NOFILE of now: the result pipe was opened under the server's
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        os.execve(_PYTHON, [_PYTHON, "-I", "-S", "-c", candidate.BOOT], dict(os.environ))
    except BaseException as error:  # noqa: BLE001 - reported to the runner, which reports a setup error
        os.write(5, f"{type(error).__name__}: {error}".encode(errors="replace")[:1000])
    finally:
        os._exit(127)


def _start() -> Link:
    """Fork and exec the program's interpreter and wait for its first word: anything that fails until then is a
    `_SetupFailed`."""
    try:
        requests_read, requests_write = map(_high, os.pipe())
        replies_read, replies_write = map(_high, os.pipe())
        failed_read, failed_write = map(_high, os.pipe())
        pid = os.fork()
    except OSError as error:
        raise _SetupFailed(f"the program's process could not be started: {error}") from None
    if pid == 0:
        _exec_program(requests_read, replies_write, failed_write)
    for fd in (requests_read, replies_write, failed_write):
        os.close(fd)
    candidate.write_frame(requests_write, _CODE)  # read first, by candidate.BOOT
    with os.fdopen(failed_read, "rb") as pipe:
        exec_error = pipe.read()
    link = Link(pid, requests_write, replies_read, resource.getrlimit(resource.RLIMIT_CPU)[0])
    if exec_error:
        link.stop()
        raise _SetupFailed(f"{_PYTHON} could not be run: {exec_error.decode(errors='replace')}")
    try:
        hello = link.receive()
    except BaseException:  # noqa: BLE001 - ended before any code of the program's ran: the interpreter's failure
        link.stop()
        raise _SetupFailed(f"the program's interpreter did not start: {link.failure}") from None
    if hello != {"ready": True}:
        link.stop()
        raise _SetupFailed(f"the program's interpreter started wrongly: {str(hello)[:200]}")
    return link


def run_program(program: dict, max_output_chars: int) -> dict:
    """In the isolated child: run `program` (`{"code", "stdin", "test"}`) and answer the sandbox server with
    `{"text": JSON of {"stdout", "stdout_cut", "error"}, "error"}` (`error` None when it ran to the end), or with
    `{"setup_error"}` when the program's process could not be started."""
    try:
        _harden()
        given = _memory_file("stdin", program["stdin"].encode("utf-8", errors="replace"))
        os.dup2(given, 0)
        os.close(given)
        output = _memory_file("stdout")
        os.dup2(output, 1)
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # the test's own prints go to the output too
        sys.stdin = open(0, encoding="utf-8", closefd=False)
        link = _start()
    except (_SetupFailed, OSError) as failed:
        return {"setup_error": str(failed)}
    try:
        error = judge(link, program["code"], program["test"])
    except BaseException as raised:  # noqa: BLE001 - not expected (judge never raises); the case fails, loudly
        error = f"the test runner failed: {type(raised).__name__}: {raised}"
    link.stop()
    try:
        sys.stdout.flush()
    except BaseException:  # noqa: BLE001 - the test closed or replaced it; its output is what it is
        pass
    size = os.fstat(output).st_size
    data = os.pread(output, max_output_chars, 0)
    return _answer(data.decode("utf-8", errors="replace"), size > len(data), error, max_output_chars)
