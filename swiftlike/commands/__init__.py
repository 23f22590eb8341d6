"""The top layer: one `<command>_main` per CLI command, each the Python twin of `swiftlike <command>`.

A `*_main` takes the command's arguments object, or a CLI-style list (None reads sys.argv), and returns what
the command produced (a run's result, a result path, a report). Everything below it is reachable without
the CLI; nothing below imports from here.
"""
from __future__ import annotations

import sys
from typing import TypeVar

A = TypeVar("A")


def arguments_of(cls: type[A], args: A | list[str] | None) -> A:
    """The typed arguments object for a command, from an object of that class or a CLI-style list."""
    from ..arguments import parse_args
    if isinstance(args, cls):
        return args
    if args is None or isinstance(args, (list, tuple)):
        return parse_args(cls, list(sys.argv[1:] if args is None else args))
    raise TypeError(f"expected a {cls.__name__} or a list of command-line strings, got {type(args).__name__}")
