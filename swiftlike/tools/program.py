"""A model-written Python program, run inside the sandbox's isolated child (`sandbox.run_program_isolated`).

The child is isolated before this runs (`isolation.py`: no network, its own pid namespace, a read-only tree with a
private tmpfs at /tmp, uid nobody, rlimits). What this module adds is making the code behave as it would as
`python3 program.py < input > output` in there, and saying how it ended:

- stdin and stdout are files in memory (memfd) on the descriptors 0 and 1, so `input()`, `sys.stdin.buffer.read()`,
  `open(0).read()`, `os.write(1, ...)` and the program's own subprocesses all read the case's input and write to
  the one captured output. RLIMIT_FSIZE (`isolation.MAX_FILE_MB`) bounds that output: past it a write fails
  (`OSError: File too large`, as Python ignores SIGXFSZ), which stops a program that prints forever well before
  its CPU time runs out. Only the first characters that fit the answer
  (`max_output_chars`) travel back, with a flag when there was more, so a huge print costs the caller nothing.
- Without a test (a stdin/stdout case) the code runs as `__main__`, as a script does. With one (assert
  statements) it runs as a module named `solution` and the test runs after it in the same namespace, as a test
  file importing the solution would: a demo under `if __name__ == "__main__":` that waits for input is not run.
- `sys.exit(0)` (or `exit()`) ends a program normally, as exit code 0 does; another code, an exception, or an exit
  before or during the test is the error the case fails on.

The program runs in this interpreter, so code written to attack the harness can tamper with it and forge its own
answer. An assert case's verdict is as trustworthy as any test run in the program's own process (every harness
that runs asserts beside the code shares this); a stdin/stdout case is judged by the caller, against an expected
output that never enters the sandbox.
"""
from __future__ import annotations

import json
import os
import sys
import types

ERROR_CHARS = 1000  # an exception's message is cut here: the model's code chooses its length
_EXITED = "exited with code 0"


def _describe(raised: BaseException) -> str:
    try:
        message = str(raised)  # the program's own __str__, which may raise in turn
    except BaseException:  # noqa: BLE001 - the type alone then
        message = ""
    return f"{type(raised).__name__}: {message}"[:ERROR_CHARS] if message else type(raised).__name__


def _execute(source: str, filename: str, namespace: dict) -> str | None:
    """None when `source` ran to its end; else what stopped it (`_EXITED` for sys.exit(0))."""
    try:
        exec(compile(source, filename, "exec"), namespace)
    except SystemExit as stop:
        code = stop.code  # an object of the program's: only plain values are compared or shown
        if code is None or (type(code) in (int, bool) and code == 0):
            return _EXITED
        return f"exited with code {repr(code) if type(code) in (int, bool, str) else type(code).__name__}"[:ERROR_CHARS]
    except BaseException as raised:  # noqa: BLE001 - whatever the program does is its outcome
        return _describe(raised)
    return None


def _run(code: str, test: str | None) -> str | None:
    """None when the code (and its test) ran to the end, else why not. The code runs in a real module in
    `sys.modules`, as a script or an imported module would: dataclasses, pickle and typing look their module up."""
    module = types.ModuleType("__main__" if test is None else "solution")
    sys.modules[module.__name__] = module
    namespace = module.__dict__
    stopped = _execute(code, "<program>", namespace)
    if test is None:
        return None if stopped == _EXITED else stopped
    if stopped is not None:
        return "the program exited before its test ran" if stopped == _EXITED else stopped
    stopped = _execute(test, "<test>", namespace)
    return "the test ended in sys.exit(0)" if stopped == _EXITED else stopped


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


def run_program(program: dict, max_output_chars: int) -> dict:
    """In the isolated child: run `program` (`{"code", "stdin", "test"}`) and answer the sandbox server with
    `{"text": JSON of {"stdout", "stdout_cut", "error"}, "error"}`; `error` is None when it ran to the end."""
    given = _memory_file("stdin", program["stdin"].encode("utf-8", errors="replace"))
    os.dup2(given, 0)
    os.close(given)
    output = _memory_file("stdout")
    os.dup2(output, 1)
    stdout = sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
    sys.stdin = open(0, encoding="utf-8", closefd=False)
    error = _run(program["code"], program["test"])
    for stream in {id(s): s for s in (stdout, sys.stdout)}.values():
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - a stream the program replaced or closed; its output is what it is
            pass
    try:
        size = os.fstat(output).st_size
        data = os.pread(output, max_output_chars, 0)
    except OSError as closed:  # the program closed or replaced the descriptor we read back from
        return _answer("", True, error or f"the program's output cannot be read back: {closed}", max_output_chars)
    return _answer(data.decode("utf-8", errors="replace"), size > len(data), error, max_output_chars)
