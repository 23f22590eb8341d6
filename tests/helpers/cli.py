"""One way to run a `swiftlike` command in a test: `run_cli`, in this process unless the process is under test.

A command run in this process costs what the command does; run as a subprocess it also pays for importing torch,
transformers, PEFT and vLLM and for the first engine start of a fresh interpreter, about 15 s before the command does
anything (a two-step GRPO run on the tiny model with colocated vLLM: 23 s as a subprocess, 7-8 s in a process that
has run one before). The in-process run goes through `swiftlike.cli.main.main`, the console script's own function,
so argument parsing, exit statuses and the one-line error messages are the ones a user gets. Its stdout and stderr
are captured at the file-descriptor level, so what C++ code and child processes (torchrun's workers) write is in
them too.

What a run may leave behind in this process is put back after it: the environment, the working directory, the
registries an `--external_plugins` file added to, torch's thread count and default dtype, signal handlers, a
default process group, and the one-time warnings (so each run warns as a fresh process would).

`in_process=False` runs `python -m swiftlike.cli.main` instead, for tests of the process itself: torchrun's
relaunch seen from outside, signals, a kill in the middle of a write, an interpreter's exit code.
"""
from __future__ import annotations

import contextlib
import gc
import io
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass

# the environment every command of the suite runs in (tests/conftest.py sets it for the pytest process too)
BASE_ENV = {"SWIFTLIKE_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
            "TOKENIZERS_PARALLELISM": "false"}
# the modules that make the registries a plugin file adds to: imported before the first snapshot, so that what a
# run's plugin registers is taken out again (a registry made after a snapshot is not in it)
REGISTRY_MODULES = ("swiftlike.model.registry", "swiftlike.dataset.registry", "swiftlike.template.registry",
                    "swiftlike.template.agent", "swiftlike.tools.builtin", "swiftlike.rl.rewards.functions",
                    "swiftlike.rl.rewards.prm", "swiftlike.rollout.multi_turn.registry",
                    "swiftlike.rollout.multi_turn.envs")
_ONE_AT_A_TIME = threading.Lock()  # an in-process run owns the process's descriptors 1 and 2 while it lasts


@dataclass
class CliResult:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str

    def check(self) -> CliResult:
        """This result, or an AssertionError showing the end of stderr when the command failed."""
        if self.returncode != 0:
            raise AssertionError(f"swiftlike {' '.join(self.argv[:3])} ... exited with {self.returncode}:\n"
                                 f"{self.stderr[-4000:]}")
        return self


def run_cli(*argv, env: dict[str, str | None] | None = None, check: bool = True, in_process: bool = True,
            stdin: str | None = None, timeout: float = 900) -> CliResult:
    """`swiftlike *argv` with `env` on top of the suite's environment (a None value unsets a variable). `check`
    raises when the exit status is not 0. `timeout` applies to a subprocess run only."""
    argv = [str(a) for a in argv]
    if not in_process:
        merged = {**os.environ, **BASE_ENV}
        for name, value in (env or {}).items():
            merged.pop(name, None) if value is None else merged.__setitem__(name, value)
        done = subprocess.run([sys.executable, "-m", "swiftlike.cli.main", *argv], env=merged, input=stdin,
                              capture_output=True, text=True, timeout=timeout)
        result = CliResult(argv, done.returncode, done.stdout, done.stderr)
    else:
        with _ONE_AT_A_TIME, _process_state_restored(env), _captured(stdin) as output:
            returncode = _main(argv)
        result = CliResult(argv, returncode, *output)
    return result.check() if check else result


def _main(argv: list[str]) -> int:
    from swiftlike.cli.main import main
    try:
        return main(argv)
    except SystemExit as exit_:  # argparse's usage errors and --help
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 1)


@contextlib.contextmanager
def _process_state_restored(env: dict[str, str | None] | None):
    import importlib

    import torch

    from swiftlike.rl.rewards import plugins
    from swiftlike.utils import logging as swiftlike_logging
    from swiftlike.utils.registry import restore_registries, snapshot_registries
    for module in REGISTRY_MODULES:
        importlib.import_module(module)
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    # the plugin files imported so far: a file the run imports is forgotten afterwards (its registrations go with
    # the registries), so the next run that names it imports it again, as a fresh process does
    saved_plugins = dict(plugins._LOADED)
    # a default process group made before the run (an open vLLM engine's, e.g. the session's) is not the run's
    group_before = torch.distributed.is_available() and torch.distributed.is_initialized()
    saved = (snapshot_registries(), torch.get_num_threads(), torch.get_default_dtype(),
             {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)})
    logger = swiftlike_logging.get_logger()
    level = logger.level
    for name, value in {**BASE_ENV, **(env or {})}.items():
        os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)
    logger.setLevel(os.environ.get("SWIFTLIKE_LOG_LEVEL", "INFO").upper())
    swiftlike_logging._WARNED.clear()  # warn_once warns once per run, as in a fresh process
    try:
        yield
    finally:
        registries, threads, dtype, handlers = saved
        if torch.distributed.is_available() and torch.distributed.is_initialized() and not group_before:
            torch.distributed.destroy_process_group()
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        restore_registries(registries)
        for path in set(plugins._LOADED) - set(saved_plugins):
            sys.modules.pop(plugins._LOADED[path].__name__, None)
        plugins._LOADED.clear()
        plugins._LOADED.update(saved_plugins)
        torch.set_num_threads(threads)
        torch.set_default_dtype(dtype)
        for number, handler in handlers.items():
            signal.signal(number, handler)
        logger.setLevel(level)
        gc.collect()


@contextlib.contextmanager
def _captured(stdin: str | None):
    """Descriptors 1 and 2 (and sys.stdout / sys.stderr, and every logging handler writing to them) into files for
    the run; yields a list that holds (stdout, stderr) once the block ends."""
    output: list[str] = []
    files = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved_fds = [os.dup(1), os.dup(2)]
    saved_streams = sys.stdin, sys.stdout, sys.stderr
    handlers = _stream_handlers()
    saved_handler_streams = [h.stream for h in handlers]
    os.dup2(files[0].fileno(), 1)
    os.dup2(files[1].fileno(), 2)
    sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False, buffering=1)
    sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False, buffering=1)
    if stdin is not None:
        sys.stdin = io.StringIO(stdin)
    for handler, stream in zip(handlers, saved_handler_streams):
        _point(handler, sys.stdout if stream in (saved_streams[1], sys.__stdout__) else sys.stderr)
    try:
        yield output
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for handler, stream in zip(handlers, saved_handler_streams):
            _point(handler, stream)
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        for fd, saved in zip((1, 2), saved_fds):
            os.dup2(saved, fd)
            os.close(saved)
        for file in files:
            file.seek(0)
            output.append(file.read().decode("utf-8", errors="replace"))
            file.close()


def _point(handler: logging.StreamHandler, stream) -> None:
    """`handler.setStream(stream)` without its flush of the old stream: a handler made while pytest captured an
    earlier test still holds that capture's file, closed since, and flushing it raised "I/O operation on closed
    file"."""
    handler.acquire()
    try:
        handler.stream = stream
    finally:
        handler.release()


def _stream_handlers() -> list[logging.StreamHandler]:
    """Every plain console handler (ours, transformers', vLLM's), wherever it was made: one made during an earlier
    test holds that test's capture, not the current sys.stderr. Only plain StreamHandlers: other kinds (torch's)
    close their stream when vLLM's logging set-up shuts the existing handlers down."""
    loggers = [logging.getLogger()] + [logger for logger in logging.Logger.manager.loggerDict.values()
                                       if isinstance(logger, logging.Logger)]
    return [handler for logger in loggers for handler in logger.handlers if type(handler) is logging.StreamHandler]

