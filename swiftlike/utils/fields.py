"""`arg`: a dataclass field that carries its help text, so one declaration serves the CLI, the docs tables and
`--help`. It lives at the bottom layer because engines and the RL option groups (rl/core/options.py) declare
their settings with it, and the command-line flags for those settings are built from that one declaration
(`arguments/option_flags.py`)."""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import field
from typing import Literal, get_args


def arg(default=None, help: str = "", aliases: tuple[str, ...] = (), only: tuple[str, ...] = (), **kwargs):
    """A dataclass field whose help text and CLI aliases live next to its default.

    `only`: the kinds of run that read the setting (for rlhf, the --rlhf_type values); given to another kind it
    is refused (`rl.core.options.flags_not_read_by`). Empty: every kind reads it, or ignores it harmlessly."""
    if isinstance(default, (list, dict)):
        kwargs["default_factory"] = (lambda d=default: type(d)(d))
    else:
        kwargs["default"] = default
    return field(metadata={"help": help, "aliases": aliases, "only": only}, **kwargs)


def check_choices(options) -> None:
    """Refuse a Literal field of the dataclass `options` holding a value outside its choices (the Python API; the
    CLI's parser already refuses them), naming the flag."""
    hints = typing.get_type_hints(type(options))
    for f in dataclasses.fields(options):
        hint = hints[f.name]
        parts = get_args(hint) if typing.get_origin(hint) is not Literal else [hint]
        choices = [c for part in parts for c in (get_args(part) if typing.get_origin(part) is Literal else ())]
        value = getattr(options, f.name)
        if choices and value is not None and value not in choices:
            raise ValueError(f"invalid choice for --{f.name}: {value!r} (choose from {', '.join(map(str, choices))})")


def field_default(f: dataclasses.Field):
    """A dataclass field's default value, a fresh one for a `default_factory` field."""
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
