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
