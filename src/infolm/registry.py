"""Name -> plug-in registries. Unknown and duplicate names fail loudly, listing the known ones."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from infolm.config import build_dataclass
from infolm.errors import InfolmError

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Entry(Generic[T]):
    name: str
    factory: Callable[..., T]
    config_cls: type | None
    doc: str


class Registry(Generic[T]):
    """A registry of plug-ins of one kind (models, objectives, datasets, ...).

    ``register(name, config=Cls)`` decorates a class (or factory) whose first argument is an
    instance of ``Cls`` built from the user's settings; ``build(name, settings, **kw)`` validates
    the settings against ``Cls`` (unknown keys, wrong types and ranges fail with one clear line).
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}

    def register(self, name: str, config: type | None = None) -> Callable[[Callable[..., T]], Callable[..., T]]:
        def decorator(factory: Callable[..., T]) -> Callable[..., T]:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            doc = (factory.__doc__ or "").strip().splitlines()
            self._entries[name] = Entry(name, factory, config, doc[0] if doc else "")
            return factory

        return decorator

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def get(self, name: str) -> Entry[T]:
        if name not in self._entries:
            known = ", ".join(self.names()) or "(none)"
            raise InfolmError(f"unknown {self.kind} {name!r}; known: {known}")
        return self._entries[name]

    def make_config(self, name: str, settings: Mapping[str, Any] | None, where: str = "") -> Any:
        entry = self.get(name)
        if entry.config_cls is None:
            if settings:
                raise InfolmError(f"{where or self.kind + ' ' + name} takes no settings, got {sorted(settings)}")
            return None
        return build_dataclass(entry.config_cls, dict(settings or {}), where or f"{self.kind}.{name}")

    def build(
        self, name: str, settings: Mapping[str, Any] | None = None, *args: Any, where: str = "", **kwargs: Any
    ) -> T:
        entry = self.get(name)
        config = self.make_config(name, settings, where)
        if entry.config_cls is None:
            return entry.factory(*args, **kwargs)
        return entry.factory(config, *args, **kwargs)
