"""One logger format for every command, so logs from CLI, API and servers read alike."""
from __future__ import annotations

import logging
import os

_CONFIGURED = False


def get_logger(name: str = "swiftlike") -> logging.Logger:
    global _CONFIGURED
    if not _CONFIGURED:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[%(levelname)s:%(name)s] %(message)s"))
        root = logging.getLogger("swiftlike")
        root.addHandler(handler)
        root.setLevel(os.environ.get("SWIFTLIKE_LOG_LEVEL", "INFO").upper())
        root.propagate = False
        _CONFIGURED = True
    return logging.getLogger(name if name.startswith("swiftlike") else f"swiftlike.{name}")


_WARNED: set[tuple[str, str]] = set()


def warn_once(logger: logging.Logger, message: str) -> None:
    """A setting that cannot apply on this machine is worth one line, not one per model load or per step."""
    if (logger.name, message) not in _WARNED:
        _WARNED.add((logger.name, message))
        logger.warning(message)
