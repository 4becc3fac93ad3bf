"""Name -> class registries for pluggable building blocks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from nas.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps block names to implementations; unknown names list the valid ones."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            if name in self._items:
                raise RuntimeError(f"{self.kind} {name!r} is registered twice")
            self._items[name] = obj
            if isinstance(obj, type):
                obj.name = name  # type: ignore[attr-defined]
            return obj

        return decorator

    def get(self, name: object, path: str = "") -> T:
        if not isinstance(name, str) or name not in self._items:
            raise ConfigError(f"unknown {self.kind} {name!r}; valid: {', '.join(self.names())}", path)
        return self._items[name]

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._items))

    def items(self) -> list[tuple[str, T]]:
        """(name, implementation) pairs in the order they were registered."""
        return list(self._items.items())

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)
