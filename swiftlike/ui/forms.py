"""Forms generated from a command's argument dataclass, and their values turned back into that command's argv.

The dataclass is the one schema (arguments/parser.py reads the same fields for argparse), so a flag added to a
command shows up here with its type, default, choices and help text, and nothing in the UI is written per flag.
A page only names which fields go up front; every other field lands in the "advanced" section.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import shlex
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..arguments.parser import field_kind, parse_args
from ..utils.errors import NotBuiltError


class FormError(ValueError):
    """A widget's text that cannot become the command's argv; the message names the field."""


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class FieldSpec:
    """One argument as a form shows it."""

    name: str
    kind: str  # bool | list | choice | json | scalar, as parser.field_kind says
    default: Any
    choices: tuple[str, ...] = ()
    help: str = ""
    group: str = ""  # the argument class that declares it (the help section of `--help`)

    @property
    def unset_bool(self) -> bool:
        """A bool whose default None means "decided from other flags" (--use_gym_env: true when --gym_env is
        given). A checkbox has no third state, so such a field is a choice of '' (leave it to that rule), true
        and false: unticking a checkbox could not pass the explicit false the rule would otherwise override."""
        return self.kind == "bool" and self.default is None

    def widget_value(self, value: Any) -> Any:
        """What the form's widget shows for an argument value (a default, or a value from args.json)."""
        if self.unset_bool:
            return "" if value in (None, "") else ("true" if value in (True, "true") else "false")
        if self.kind == "bool":
            return bool(value)
        if value is None:
            return ""
        if self.kind == "list":
            return shlex.join(str(v) for v in value) if isinstance(value, (list, tuple)) else str(value)
        if self.kind == "json":
            return value if isinstance(value, str) else json.dumps(value)
        return str(value)

    def flags(self, shown: Any) -> list[str]:
        """The argv words for a widget's value; none when it equals the default (the CLI fills it the same way)."""
        if self.unset_bool:
            return [] if shown in (None, "") else [f"--{self.name}", self.widget_value(shown)]
        if self.kind == "bool":
            return [] if bool(shown) == bool(self.default) else [f"--{self.name}", "true" if shown else "false"]
        text = "" if shown is None else str(shown).strip()
        if text == self.widget_value(self.default).strip() or text == "":
            return []
        if self.kind == "list":
            return [f"--{self.name}", *self.list_items(text)]
        return [f"--{self.name}", text]

    def list_items(self, text: str) -> list[str]:
        """A list field's words. An item that begins with '-' (a number aside) is refused: argparse reads such a
        word as a flag wherever it stands and no quoting changes that, so `data.jsonl --rlhf_type dpo` typed in
        one field would set another flag. A scalar field's text is one word, which argparse takes as the value
        or refuses, so it cannot set a flag."""
        try:
            items = shlex.split(text)
        except ValueError as e:  # an unclosed quote
            raise FormError(f"{self.name}: {e} in {text!r}") from None
        for item in items:
            if item.startswith("-") and not _is_number(item):
                raise FormError(f"{self.name}: the item {item!r} begins with '-', so the command line would read it "
                                f"as a flag, not as a value of --{self.name}; a list's items cannot begin with '-' "
                                f"(a file of that name: ./{item})")
        return items


def field_specs(cls: type) -> list[FieldSpec]:
    """Every init field of `cls`, in `--help` order (shared parts first, the command's own last)."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    specs = []
    for part in [*cls.__mro__[1:], cls]:
        for name in part.__dict__.get("__annotations__", {}):
            if name not in fields:
                continue
            f = fields.pop(name)
            kind, extra = field_kind(hints[name])
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            choices = tuple(str(c) for c in extra) if kind == "choice" else ()
            specs.append(FieldSpec(name, kind, default, choices, f.metadata.get("help", ""), part.__name__))
    return specs


def argv_of(specs: list[FieldSpec], shown: list[Any], fixed: dict[str, str] | None = None) -> list[str]:
    """The command's argv from the widgets' values (in `specs` order); `fixed` flags a page sets itself first.
    Raises FormError for a value that cannot be passed as given."""
    argv = [word for name, value in (fixed or {}).items() for word in (f"--{name}", value)]
    for spec, value in zip(specs, shown):
        if fixed and spec.name in fixed:
            continue
        argv += spec.flags(value)
    return argv


def flag_value(argv: list[str], flag: str) -> str | None:
    """The value given to `flag` in a job's argv (its last occurrence wins, as in argparse)."""
    found = [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == flag]
    return found[-1] if found else None


def command_line(command: str, argv: list[str]) -> str:
    """The line a user would type: what the page shows, copies and saves as a script."""
    return shlex.join(["swiftlike", *command.split(), *argv])


def script_text(command: str, argv: list[str]) -> str:
    return f"#!/bin/sh\n# written by swiftlike web-ui\nexec {command_line(command, argv)} \"$@\"\n"


def check_arguments(cls: type, command: str, argv: list[str]) -> tuple[Any, str | None]:
    """(the parsed arguments, None), or (None, the CLI's own error message for `argv`).

    The same parser and dataclass checks that `swiftlike <command>` runs before loading anything run here, so a
    bad choice or a missing --model is reported in the page without starting a process.
    """
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            return parse_args(cls, argv, prog=f"swiftlike {command}"), None
    except SystemExit:
        return None, err.getvalue().strip() or f"swiftlike {command}: invalid arguments"
    except NotBuiltError as e:
        return None, f"swiftlike {command}: not built: {e}"
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        return None, f"swiftlike {command}: error: {e}"


def load_args_json(path: str) -> dict:
    """A checkpoint's (or run directory's) args.json: the file itself, inside the directory, or one level up."""
    given = Path(path.strip())
    for candidate in (given, given / "args.json", given.parent / "args.json"):
        if candidate.is_file() and candidate.name == "args.json":
            return json.loads(candidate.read_text(encoding="utf-8"))
    raise FileNotFoundError(f"no args.json at {path} (nor in it or its parent directory)")
