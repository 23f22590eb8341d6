"""`--external_plugins file.py ...`: user Python files imported before any model loads, so they can register
rewards, generative judges (`register_judge`), tools (`register_tool`), multi-turn schedulers (`register_scheduler`)
and environments (`register_env`).

A plugin file is ordinary Python; at import time it calls

    from swiftlike.rl.rewards.functions import register_reward

    @register_reward("my_reward")
    def my_reward(completions, solution, **kwargs):
        return [1.0 if s in c else 0.0 for c, s in zip(completions, solution)]

and `--reward_funcs my_reward` then finds it. Each file is imported by path under its own module name
(so two plugins both called `plugin.py` do not collide), once per process. A file that fails to import leaves
no registration behind in any registry (utils/registry.py), so fixing it and loading it again works.
"""
from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from ...utils.errors import MissingInputError, UsageError
from ...utils.registry import restore_registries, snapshot_registries


class PluginImportError(UsageError, RuntimeError):
    """A plugin file raised while it was imported. A usage error (the user's file is at fault, and the message names
    it with the exception; its traceback is chained for SWIFTLIKE_LOG_LEVEL=DEBUG), still a RuntimeError for
    callers that catch one."""


# resolved path -> imported module; a file named twice (or loaded again in the same process) is imported once.
_LOADED: dict[Path, ModuleType] = {}


def _module_name(path: Path) -> str:
    stem = re.sub(r"\W", "_", path.stem)
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    return f"swiftlike_plugin_{stem}_{digest}"


def load_external_plugin(path: str | Path) -> ModuleType:
    """Import one plugin file. Errors name the file and what went wrong."""
    given = str(path)
    path = Path(path).expanduser()
    if not path.exists():
        raise MissingInputError(f"--external_plugins {given}: no such file")
    if not path.is_file() or path.suffix != ".py":
        raise UsageError(f"--external_plugins {given}: not a Python file (expected a path to a .py file)")
    path = path.resolve()
    if path in _LOADED:
        return _LOADED[path]

    name = _module_name(path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # pragma: no cover - a .py file always has a loader
        raise UsageError(f"--external_plugins {given}: Python cannot import this file")
    module = importlib.util.module_from_spec(spec)
    # Registered for the duration: dataclasses, pickling and inspect.getsourcefile look the module up here.
    sys.modules[name] = module
    # Plugins may import helper modules sitting next to them.
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    before = snapshot_registries()
    try:
        spec.loader.exec_module(module)
    except BaseException as e:
        sys.modules.pop(name, None)
        restore_registries(before)
        if not isinstance(e, Exception):
            raise
        raise PluginImportError(f"--external_plugins {given}: importing it failed: {type(e).__name__}: {e}") from e
    _LOADED[path] = module
    return module


def load_external_plugins(paths: Sequence[str | Path] | str | Path | None) -> list[ModuleType]:
    """Import every `--external_plugins` file, in order. None or [] loads nothing."""
    if paths is None:
        return []
    if isinstance(paths, (str, Path)):
        paths = [paths]
    return [load_external_plugin(p) for p in paths]
