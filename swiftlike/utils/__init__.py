"""Small helpers shared by every layer: logging, atomic writes, cache location; net (free ports), launch_env (the
launch variables, read once), contact_points (the third-party private members we rely on)."""
from .io import atomic_write_json, atomic_write_text, atomic_write_jsonl, cache_dir
from .logging import get_logger, warn_once

__all__ = ["atomic_write_json", "atomic_write_text", "atomic_write_jsonl", "cache_dir", "get_logger", "warn_once"]
