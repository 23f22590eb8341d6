"""Name -> declared metadata, with one wording for duplicate and unknown names in every registry.

Every registry is also known to `snapshot_registries`, so that an `--external_plugins` file that fails halfway
can be undone whatever it registered (rewards, tools, schedulers, environments) without the plugin loader
importing the packages that own those registries.
"""
from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

from .errors import UsageError

T = TypeVar("T")

# id -> registry, for snapshot_registries; weak, so a registry built by a test does not live for ever.
_EVERY_REGISTRY: weakref.WeakValueDictionary[int, Registry] = weakref.WeakValueDictionary()


class Registry(dict, Generic[T]):
    def __init__(self, kind: str, flag: str):
        super().__init__()
        self.kind = kind
        self.flag = flag
        _EVERY_REGISTRY[id(self)] = self

    def register(self, name: str, item: T, override: bool = False,
                 origin: Callable[[T], str] | None = None) -> T:
        """Add `item` as `name`. A name taken by another item is refused unless `override`; the same item again
        is a no-op. `origin` says where the registered item came from, for the refusal."""
        if name in self and self[name] is not item and not override:
            where = f" ({origin(self[name])})" if origin is not None else ""
            raise UsageError(f"{self.kind} {name!r} is already registered{where}; register yours under another "
                             "name, or pass override=True to replace it")
        self[name] = item
        return item

    def lookup(self, name: str) -> T:
        try:
            return self[name]
        except KeyError:
            raise UsageError(f"unknown {self.flag} {name!r}; valid values: {', '.join(sorted(self))}") from None


def source_of(item: object) -> str:
    """Where a registered class or function was defined (its file, else its module), for a duplicate's refusal."""
    target = item if inspect.isclass(item) or inspect.isfunction(item) else type(item)
    try:
        return inspect.getsourcefile(target) or target.__module__
    except TypeError:
        return str(getattr(target, "__module__", "unknown origin"))


RegistrySnapshot = list[tuple[Registry, dict]]


def snapshot_registries() -> RegistrySnapshot:
    """The contents of every registry now, for `restore_registries`."""
    return [(registry, dict(registry)) for registry in list(_EVERY_REGISTRY.values())]


def restore_registries(snapshot: RegistrySnapshot) -> None:
    """Put every registry of `snapshot` back as it was: names added since are gone, replaced ones come back.
    A registry created after the snapshot is left alone (the import that created it filled it)."""
    for registry, contents in snapshot:
        registry.clear()
        registry.update(contents)
