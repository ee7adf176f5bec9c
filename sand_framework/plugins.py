"""Plugin loading: built-ins, then the ``sand`` entry-point group, then named modules.

Allow/deny by environment variable (comma-separated plugin names):

* ``SAND_PLUGINS_DENY`` — never load these (built-ins included).
* ``SAND_PLUGINS_ALLOW`` — if set, load only entry-point plugins in this list
  (built-ins always load unless denied).
* ``SAND_LOAD_ENTRYPOINTS=0`` — skip the entry-point group entirely.

Modules only ever come from installed entry points or paths the user names,
never from data files or model output.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pluggy

from sand_framework import hookspecs
from sand_framework.errors import PluginLoadError
from sand_framework.registry import Registries

ENTRY_POINT_GROUP = "sand"

DEFAULT_PLUGINS: tuple[str, ...] = (
    "sand_builtins.environments.textworld_express",
    "sand_builtins.environments.alfworld",
    "sand_builtins.environments.scienceworld",
    "sand_builtins.environments.webshop",
    "sand_builtins.policies.transformers_backend",
    "sand_builtins.policies.vllm_backend",
    "sand_builtins.policies.openai_client",
    "sand_builtins.detectors",
    "sand_builtins.samplers",
    "sand_builtins.executors",
    "sand_builtins.critics",
    "sand_builtins.synthesizers",
    "sand_builtins.trainers.trl_sft",
    "sand_builtins.evaluators",
    "sand_builtins.models",
)
"""Built-in plugin modules, registered through the same hooks as any third party."""


@dataclass
class PluginInfo:
    name: str
    version: str
    source: str
    """``builtin``, ``entrypoint`` or ``module``."""
    hooks: list[str] = field(default_factory=list)


def _env_list(var: str) -> set[str]:
    return {s.strip() for s in os.environ.get(var, "").split(",") if s.strip()}


def _import(name: str, what: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the plugin's
        raise PluginLoadError(f"plugin {what!r} failed to import: {type(exc).__name__}: {exc}") from exc


def _import_path(path: Path) -> ModuleType:
    """Import a ``.py`` file or a package directory by path under a private module name.

    The ``sand_local_plugins.`` prefix keeps a plugin file named ``json.py`` from
    shadowing the standard library for everything imported after it.
    """
    name = "sand_local_plugins." + (path.stem if path.is_file() else path.name)
    target = path if path.is_file() else path / "__init__.py"
    spec = importlib.util.spec_from_file_location(name, target)
    if spec is None or spec.loader is None:
        raise PluginLoadError(f"plugin {str(path)!r} is not an importable module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001
        sys.modules.pop(name, None)
        raise PluginLoadError(f"plugin {str(path)!r} failed to import: {type(exc).__name__}: {exc}") from exc
    return module


class PluginSet:
    """A pluggy manager plus what was loaded, from where, and at which version."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager("sand")
        self.pm.add_hookspecs(hookspecs)
        self.info: dict[str, PluginInfo] = {}

    def register(self, module: Any, name: str, version: str, source: str) -> None:
        if name in _env_list("SAND_PLUGINS_DENY"):
            return
        try:
            self.pm.register(module, name=name)
        except ValueError as exc:  # pluggy: already registered
            raise PluginLoadError(f"plugin {name!r} is registered twice: {exc}") from exc
        except pluggy.PluginValidationError as exc:
            raise PluginLoadError(f"plugin {name!r} does not match the hook specs: {exc}") from exc
        hooks = sorted(h.name for h in (self.pm.get_hookcallers(module) or []))
        self.info[name] = PluginInfo(name, version, source, hooks)

    def load_builtins(self) -> None:
        version = _version("sand-framework")
        for modname in DEFAULT_PLUGINS:
            if modname in _env_list("SAND_PLUGINS_DENY"):
                continue
            self.register(_import(modname, modname), modname, version, "builtin")

    def load_entrypoints(self) -> None:
        if os.environ.get("SAND_LOAD_ENTRYPOINTS", "1") == "0":
            return
        allow = _env_list("SAND_PLUGINS_ALLOW")
        for ep in md.entry_points(group=ENTRY_POINT_GROUP):
            if allow and ep.name not in allow:
                continue
            if ep.name in _env_list("SAND_PLUGINS_DENY"):
                continue
            try:
                module = ep.load()
            except Exception as exc:  # noqa: BLE001
                raise PluginLoadError(
                    f"plugin {ep.name!r} (entry point {ep.value!r}) failed to import: {type(exc).__name__}: {exc}"
                ) from exc
            version = ep.dist.version if ep.dist is not None else "unknown"
            self.register(module, ep.name, version, "entrypoint")

    def load_modules(self, modules: list[str] = (), dirs: list[str] = ()) -> None:
        deny = _env_list("SAND_PLUGINS_DENY")
        for modname in modules:
            if modname not in deny:
                self.register(_import(modname, modname), modname, "local", "module")
        for d in dirs:
            root = Path(d)
            if not root.is_dir():
                raise PluginLoadError(f"plugins directory {d!r} does not exist")
            for path in sorted(root.iterdir()):
                if path.name.startswith(("_", ".")):
                    continue
                if path.stem in deny:
                    continue
                if path.suffix == ".py" or (path.is_dir() and (path / "__init__.py").exists()):
                    self.register(_import_path(path), path.stem, "local", "module")

    def registries(self) -> Registries:
        """Call every registration hook, recording which plugin registered what."""
        regs = Registries()
        for kind, hook_name in hookspecs.KINDS.items():
            caller = getattr(self.pm.hook, hook_name)
            for impl in caller.get_hookimpls():
                plugin = impl.plugin_name
                impl.function(register=lambda cls, _p=plugin, _k=kind: regs[_k].add(cls, _p))
        return regs

    def resolve_model(self, ref: str, cache_dir: str) -> str:
        """A loadable path or hub id for ``model.base``: a plugin's alias, else the reference itself, checked."""
        resolved = self.pm.hook.sand_resolve_model(ref=ref, cache_dir=cache_dir)
        if resolved:
            return resolved
        check_model_ref(ref)
        return ref


def check_model_ref(ref: str) -> None:
    """Fail before any work on a model that cannot load: a missing folder, or a hub id offline and uncached."""
    from sand_framework.errors import ModelUnavailable

    path = Path(ref).expanduser()
    looks_local = ref.startswith(("/", ".", "~")) or path.exists() or ref.count("/") > 1
    if looks_local:
        if not (path / "config.json").is_file():
            raise ModelUnavailable(f"model {ref!r}: no such model folder (expected a folder with config.json); "
                                   "set model.base to a local Hugging Face model folder, a hub id, or an alias "
                                   "(built-in: smollm2-135m, tiny-random)")
        return
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(ref, "config.json")
        except Exception:  # noqa: BLE001 - a malformed id is reported below
            cached = None
        if not isinstance(cached, str):
            raise ModelUnavailable(f"model {ref!r}: not in the local Hugging Face cache and HF_HUB_OFFLINE=1; "
                                   "download it first (`huggingface-cli download " + ref + "`) or unset HF_HUB_OFFLINE")


def _version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "unknown"


def load_plugins(modules: list[str] = (), dirs: list[str] = ()) -> PluginSet:
    """Built-ins, then entry points, then named modules and plugin directories."""
    ps = PluginSet()
    ps.load_builtins()
    ps.load_entrypoints()
    ps.load_modules(list(modules), list(dirs))
    return ps
