"""One registry per component kind, filled from the registration hooks."""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field

from sand_framework.components import Component
from sand_framework.components.declared import BY_NAME
from sand_framework.errors import DuplicateComponentError, PluginLoadError, UnknownComponentError


@dataclass
class Entry:
    cls: type[Component]
    plugin: str
    """Name of the plugin that registered it, for error messages and ``sand components``."""


@dataclass
class Registry:
    """Components of one kind by name."""

    kind: str
    entries: dict[str, Entry] = field(default_factory=dict)

    def add(self, cls: type, plugin: str) -> None:
        """Record ``cls`` under its name; the class itself is left as the plugin wrote it."""
        base = BY_NAME[self.kind].base
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise PluginLoadError(
                f"plugin {plugin!r} registered {cls!r} as a {self.kind}, but it is not a subclass of "
                f"sand_framework.components.{base.__name__}"
            )
        if not cls.name:
            raise PluginLoadError(f"plugin {plugin!r}: {cls.__qualname__} has no `name`")
        if not dataclasses.is_dataclass(cls.Params):
            raise PluginLoadError(f"plugin {plugin!r}: {cls.__qualname__}.Params must be a dataclass")
        if cls.name in self.entries:
            other = self.entries[cls.name].plugin
            raise DuplicateComponentError(
                f"{self.kind} {cls.name!r} is registered twice: by plugin {other!r} and by plugin {plugin!r}. "
                f"Deny one of them with SAND_PLUGINS_DENY={plugin} (or {other})."
            )
        check = BY_NAME[self.kind].class_problems
        problems = check(cls) if check else []
        if problems:
            raise PluginLoadError(f"plugin {plugin!r}: {cls.__qualname__}: {problems[0]}")
        if cls.kind != self.kind:
            raise PluginLoadError(f"plugin {plugin!r}: {cls.__qualname__} sets kind = {cls.kind!r}, but it is "
                                  f"registered as a {self.kind}; remove the `kind` attribute (the base class sets it)")
        self.entries[cls.name] = Entry(cls, plugin)

    def names(self) -> list[str]:
        return sorted(self.entries)

    def suggest(self, name: str) -> str:
        close = difflib.get_close_matches(name, self.names(), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return f"unknown {self.kind} {name!r}: {hint}available: {', '.join(self.names()) or '(none)'}"

    def get(self, name: str) -> type[Component]:
        if name not in self.entries:
            raise UnknownComponentError(self.suggest(name))
        return self.entries[name].cls

    def __contains__(self, name: object) -> bool:
        return name in self.entries


@dataclass
class Registries:
    """All kinds together; built by :func:`sand_framework.plugins.load_registries`."""

    by_kind: dict[str, Registry] = field(default_factory=lambda: {k: Registry(k) for k in BY_NAME})

    def __getitem__(self, kind: str) -> Registry:
        return self.by_kind[kind]

    def build(self, kind: str, name: str, params: object = None) -> Component:
        """Instantiate a component from its kind, name and a Params instance or dict."""
        cls = self[kind].get(name)
        if isinstance(params, dict):
            params = cls.Params(**params)
        return cls(params)

    def build_spec(self, spec: dict) -> Component:
        """Rebuild a component from :meth:`Component.spec` (used by worker processes)."""
        return self.build(spec["kind"], spec["name"], spec["params"])
