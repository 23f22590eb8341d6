"""Name -> declared metadata, with one wording for duplicate and unknown names in every registry."""
from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(dict, Generic[T]):
    def __init__(self, kind: str, flag: str):
        super().__init__()
        self.kind = kind
        self.flag = flag

    def register(self, name: str, item: T) -> T:
        if name in self:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self[name] = item
        return item

    def lookup(self, name: str) -> T:
        try:
            return self[name]
        except KeyError:
            raise ValueError(f"unknown {self.flag} {name!r}; valid values: {', '.join(sorted(self))}") from None
