"""The one plugin registry: the sources (collectors/registry.py), the receivers
(service/notify/receivers) and the remediation hooks (service/remediation/hooks) each fill one.
Explicit, no entry points or import-time discovery: the module that owns a table registers every
entry in it, so what can read a node or act on a cluster is visible in one place.

`Registry` is the table: a name is registered once (a duplicate is refused) and an unknown name
is answered with the known ones. `PluginRegistry` gives each type the pydantic model its config
must pass and the factory that builds it: `check` says what is wrong with a config, building
nothing (settings validate at load), and `build` validates before it builds, so a typo fails at
start-up, naming the plugin and the bad fields. `field_errors` is the one wording of those fields.

Here, at the bottom of the tree, because collectors never import the service; free of pydantic
at import, because the node agent's install has none (its sources take plain mappings).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from collectors.compat import dataclass

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError


class Named(Protocol):
    @property
    def name(self) -> str: ...


E = TypeVar("E", bound=Named)
C = TypeVar("C", bound="BaseModel")
T = TypeVar("T")


class Registry(Mapping[str, E]):
    """Entries by name, read as a mapping. `kind` names an entry in messages ("source")."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, E] = {}

    def register(self, entry: E) -> E:
        if entry.name in self._entries:
            raise ValueError(f"{self.kind} {entry.name!r} is already registered")
        self._entries[entry.name] = entry
        return entry

    def unregister(self, name: str) -> None:
        """Take an entry out (a test's own plugin, once the test is done with it)."""
        del self._entries[name]

    def names(self) -> list[str]:
        return sorted(self._entries)

    def unknown(self, name: str) -> str:
        """What a lookup of a name nobody registered says."""
        return f"unknown {self.kind} {name!r} (known: {', '.join(self.names()) or 'none'})"

    def __getitem__(self, name: str) -> E:
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(self.unknown(name)) from None

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


@dataclass(frozen=True, slots=True)
class Plugin(Generic[C, T]):
    """A plugin type: its name, its config model, and the factory that builds an instance from
    the instance's name and its validated config."""

    name: str
    config: type[C]
    factory: Callable[[str, C], T]


class PluginRegistry(Registry[Plugin[Any, T]]):
    """Plugin types whose configs are validated before anything is built.

    An instance the settings name (a receiver) is called by that name in messages; one that has
    none (the remediation hook) by its type, which is also the name its factory is given."""

    def validated(self, type_: str, config: Mapping[str, Any],
                  name: str | None = None) -> tuple[Plugin[Any, T], BaseModel]:
        """The type and its validated config; ValueError naming the plugin and, for a bad
        config, every bad field (never its value: it may be a password)."""
        from pydantic import ValidationError

        plugin = self._entries.get(type_)
        if plugin is None:
            if name is None:
                raise ValueError(self.unknown(type_))
            raise ValueError(f"{self.kind} {name!r}: unknown type {type_!r} "
                             f"(known: {', '.join(self.names())})")
        try:
            return plugin, plugin.config.model_validate(dict(config))
        except ValidationError as exc:
            who = f"{self.kind} {type_!r}" if name is None else f"{self.kind} {name!r} ({type_})"
            raise ValueError(f"{who}: {'; '.join(field_errors(exc, '(config)'))}") from None

    def check(self, type_: str, config: Mapping[str, Any], name: str | None = None) -> str | None:
        """What is wrong with a config, or None; builds nothing."""
        try:
            self.validated(type_, config, name)
        except ValueError as exc:
            return str(exc)
        return None

    def build(self, type_: str, config: Mapping[str, Any], name: str | None = None) -> T:
        plugin, cfg = self.validated(type_, config, name)
        return plugin.factory(type_ if name is None else name, cfg)


def field_errors(exc: ValidationError, whole: str) -> list[str]:
    """Each problem as `field.path: reason`; `whole` stands for the path of a problem with the
    object itself. Field and reason only: pydantic's own text echoes the input, which may be a
    secret (a password, a routing key, a DSN)."""
    return [f"{'.'.join(str(p) for p in e['loc']) or whole}: {e['msg']}"
            for e in exc.errors(include_url=False, include_input=False)]
