"""`arg`: a dataclass field that carries its help text, so one declaration serves the CLI, the docs tables and
`--help`. It lives at the bottom layer because engines and the RL option groups (rl/core/options.py) declare
their settings with it, and the command-line flags for those settings are built from that one declaration
(`arguments/option_flags.py`)."""
from __future__ import annotations

from dataclasses import field


def arg(default=None, help: str = "", aliases: tuple[str, ...] = (), only: tuple[str, ...] = (), **kwargs):
    """A dataclass field whose help text and CLI aliases live next to its default.

    `only`: the kinds of run that read the setting (for rlhf, the --rlhf_type values); given to another kind it
    is refused (`rl.core.options.flags_not_read_by`). Empty: every kind reads it, or ignores it harmlessly."""
    if isinstance(default, (list, dict)):
        kwargs["default_factory"] = (lambda d=default: type(d)(d))
    else:
        kwargs["default"] = default
    return field(metadata={"help": help, "aliases": aliases, "only": only}, **kwargs)
