"""`arg`: a dataclass field that carries its help text, so one declaration serves the CLI, the docs tables and
`--help`. It lives at the bottom layer because engines declare their construction options with it too, and the
command-line flags for those options are built from that one declaration (`arguments/engine_flags.py`)."""
from __future__ import annotations

from dataclasses import field


def arg(default=None, help: str = "", aliases: tuple[str, ...] = (), **kwargs):
    """A dataclass field whose help text and CLI aliases live next to its default."""
    if isinstance(default, (list, dict)):
        kwargs["default_factory"] = (lambda d=default: type(d)(d))
    else:
        kwargs["default"] = default
    return field(metadata={"help": help, "aliases": aliases}, **kwargs)
