"""Errors every layer may raise and the CLI maps to exit statuses (docs/commands.md, "Exit status").

The CLI prints a `UsageError` (and a `NotBuiltError`) as one line, because its message is the whole story: what
the user gave that is wrong and how to fix it. Any other exception is a failure the message alone does not
explain (a shape error, out of memory, a collective that timed out, a bug), so the CLI prints its traceback
before that line. `SWIFTLIKE_LOG_LEVEL=DEBUG` prints the traceback of every error.
"""
from __future__ import annotations


class UsageError(ValueError):
    """Something the user gave is wrong: a flag or a combination of flags, a `--config` file, a file, directory,
    model, dataset or plugin a flag names, a server address, or the machine for the options asked for (a GPU-only
    backend on a CPU machine). The message names the input (by its flag where there is one) and says how to fix
    it; the CLI prints only the message.

    Raise it where a bad input is detected: the arguments' checks, the loaders that open what a flag names, the
    clients that reach a server a flag points at. Raise something else for a failure that is not the input's
    fault, whose traceback someone will need. A ValueError so that callers (and tests) that catch ValueError
    keep working."""


class MissingInputError(UsageError, FileNotFoundError):
    """A file or directory the user named does not exist; still a FileNotFoundError for callers that catch one."""


class WorkersFailed(RuntimeError):
    """The worker processes we launched (torchrun's) failed and have printed their own tracebacks: ours would only
    bury theirs, so the CLI prints this one line and exits with 1."""


class NotBuiltError(NotImplementedError):
    """A documented option of ms-swift's that swiftlike does not have yet; the CLI exits with status 3.

    Not a ValueError on purpose: the argument parser turns ValueErrors into usage errors (status 2),
    and a user who asked for a real feature has not made a usage error.
    """
