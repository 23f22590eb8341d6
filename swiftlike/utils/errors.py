"""Errors every layer may raise and the CLI maps to exit statuses."""
from __future__ import annotations


class NotBuiltError(NotImplementedError):
    """A documented option of ms-swift's that swiftlike does not have yet; the CLI exits with status 3.

    Not a ValueError on purpose: the argument parser turns ValueErrors into usage errors (status 2),
    and a user who asked for a real feature has not made a usage error.
    """
