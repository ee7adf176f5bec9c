"""Plugin loading: built-ins, then the ``sand`` entry-point group, then named modules.

Allow/deny by environment variable (comma-separated plugin names):

* ``SAND_PLUGINS_DENY`` — never load these (built-ins included).
* ``SAND_PLUGINS_ALLOW`` — if set, load only entry-point plugins in this list
  (built-ins always load unless denied).
* ``SAND_LOAD_ENTRYPOINTS=0`` — skip the entry-point group entirely.

Modules only ever come from installed entry points or paths the user names,
never from data files or model output (a recipe's ``plugins:`` section loads
only with ``--allow-recipe-plugins``, see :mod:`sand_framework.config.codegate`).

A plugin's failures are its own: an exception (or ``sys.exit()``) while it is
imported or inside any of its hooks becomes :class:`PluginLoadError` naming the
plugin and the hook (exit 2); lifecycle hooks are only reported, the run goes
on. Functions that look like hooks but are not (a misspelt name, a missing
``@hookimpl``) are never called, so they are reported as warnings.

The contract (:data:`sand_framework.CONTRACT_VERSION`): a plugin module may
declare the contracts it supports (``sand_contract = ">=0.3,<0.4"``); outside
that range it is refused (exit 2). A lifecycle observer that asks for a renamed
argument (``context``) loads with a ``DeprecationWarning`` naming the new one;
one whose arguments the spec does not have is disabled with a warning, and the
plugin's components still load.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.metadata as md
import importlib.util
import json
import logging
import os
import re
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pluggy

from sand_framework import CONTRACT_VERSION, __version__, hookspecs
from sand_framework.components.declared import KINDS
from sand_framework.errors import PluginLoadError, SandError
from sand_framework.lifecycle import observer
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
    "sand_builtins.grounded",
    "sand_builtins.methods.sand",
    "sand_builtins.methods.rft",
    "sand_builtins.methods.eto",
    "sand_builtins.methods.ipr",
    "sand_builtins.methods.pairs_file",
    "sand_builtins.trainers.trl_sft",
    "sand_builtins.trainers.trl_dpo",
    "sand_builtins.evaluators",
    "sand_builtins.best_of_n",
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
    contract: str | None = None
    """The plugin contracts it declares it supports (its module's ``sand_contract``), None if it declares none."""


HOOK_NAMES: tuple[str, ...] = tuple(n for n in dir(hookspecs) if n.startswith("sand_") and
                                    callable(getattr(hookspecs, n)))
"""Every hook SAND calls."""


log = logging.getLogger(__name__)
"""Plugin problems that do not stop SAND are warnings here (stderr, and the run's run.log)."""


def _failure(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, SystemExit):
        text = f"it called sys.exit({exc.code!r})"
    if isinstance(exc, ImportError) and ("relative import" in str(exc) or "sand_local_plugins" in str(exc)):
        text += (". A file in a plugin folder is imported on its own: use absolute imports, or make the "
                 "folder a package (a folder with __init__.py) and pass its parent folder")
    return text


def _env_list(var: str) -> set[str]:
    return {s.strip() for s in os.environ.get(var, "").split(",") if s.strip()}


def _import(name: str, what: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - any import failure is the plugin's
        raise PluginLoadError(f"plugin {what!r} failed to import: {_failure(exc)}. Fix it, or deny it with "
                              f"SAND_PLUGINS_DENY={what}") from exc


def plugin_paths(root: Path) -> list[Path]:
    """The ``*.py`` files and packages of a plugin folder, in load order (names starting ``_``/``.`` skipped)."""
    return [p for p in sorted(root.iterdir()) if not p.name.startswith(("_", "."))
            and (p.suffix == ".py" and p.is_file() or p.is_dir() and (p / "__init__.py").is_file())]


def _import_path(path: Path) -> ModuleType:
    """Import a ``.py`` file or a package directory by path under a private module name.

    The ``sand_local_plugins.`` prefix keeps a plugin file named ``json.py`` from
    shadowing the standard library for everything imported after it.
    """
    name = "sand_local_plugins." + (path.stem if path.is_file() else path.name)
    target = path if path.is_file() else path / "__init__.py"
    # A package gets its own search path, so its relative imports (`from . import x`) work.
    locations = None if path.is_file() else [str(path)]
    spec = importlib.util.spec_from_file_location(name, target, submodule_search_locations=locations)
    if spec is None or spec.loader is None:
        raise PluginLoadError(f"plugin {str(path)!r} is not an importable module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # noqa: BLE001
        sys.modules.pop(name, None)
        raise PluginLoadError(f"plugin {str(path)!r} failed to import: {_failure(exc)}. Fix it, or leave it out "
                              f"of the folder (or SAND_PLUGINS_DENY={path.stem})") from exc
    return module


def _guard(function: Any, plugin: str, hook: str) -> Any:
    """``function`` with its failures (``SystemExit`` included) turned into a :class:`PluginLoadError` naming
    the plugin and hook. SAND's own errors pass unchanged: they already say what is wrong."""

    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except SandError:
            raise
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - a plugin's failure is the plugin's
            raise PluginLoadError(f"plugin {plugin!r} failed in its {hook} hook: {_failure(exc)}. Fix the "
                                  f"plugin, or deny it with SAND_PLUGINS_DENY={plugin}") from exc

    guarded.sand_guarded = True  # type: ignore[attr-defined]
    return guarded


class _Manager(pluggy.PluginManager):
    """pluggy's manager, leaving out the implementations :meth:`PluginSet.register` disabled."""

    def __init__(self) -> None:
        super().__init__("sand")
        self.disabled: dict[int, set[str]] = {}
        """``id(plugin)`` -> attribute names not registered (observers that no longer match their spec)."""

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
        if name in self.disabled.get(id(plugin), ()):
            return None
        return super().parse_hookimpl_opts(plugin, name)


def _next_minor(version: str) -> str:
    """``"0.3"`` -> ``"0.4"``: the first contract a plugin made for ``version`` cannot assume it supports."""
    major, minor = version.split(".")[:2]
    return f"{major}.{int(minor) + 1}"


def check_contract(module: Any, name: str) -> str | None:
    """The contract range ``module`` declares (``sand_contract``), refused when it excludes this SAND's."""
    declared = getattr(module, "sand_contract", None)
    if declared is None:
        return None
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        ok = CONTRACT_VERSION in SpecifierSet(str(declared))
    except InvalidSpecifier:
        raise PluginLoadError(f"plugin {name!r} declares sand_contract = {declared!r}, which is not a version "
                              f"range (write e.g. '>={CONTRACT_VERSION},<{_next_minor(CONTRACT_VERSION)}')") from None
    if not ok:
        raise PluginLoadError(f"plugin {name!r} supports the SAND plugin contract {declared}, and this SAND "
                              f"(sand-framework {__version__}) implements contract {CONTRACT_VERSION}: install a "
                              f"version of the plugin made for {CONTRACT_VERSION} (CHANGELOG.md says what changed), "
                              f"or deny it with SAND_PLUGINS_DENY={name}")
    return str(declared)


class PluginSet:
    """A pluggy manager plus what was loaded, from where, and at which version."""

    def __init__(self) -> None:
        self.pm = _Manager()
        self.pm.add_hookspecs(hookspecs)
        self.info: dict[str, PluginInfo] = {}
        self.origins: dict[str, str] = {}
        """Plugin name -> the file its code comes from (``sand validate`` shows what would run)."""

    def register(self, module: Any, name: str, version: str, source: str) -> None:
        if name in _env_list("SAND_PLUGINS_DENY"):
            return
        contract = check_contract(module, name)
        self._check_observers(module, name)
        try:
            with warnings.catch_warnings():  # said once, by _check_observers, naming the plugin
                warnings.filterwarnings("ignore", message=re.escape(hookspecs.CONTEXT_RENAMED),
                                        category=DeprecationWarning)
                self.pm.register(module, name=name)
        except ValueError as exc:  # pluggy: already registered
            raise PluginLoadError(f"plugin {name!r} is registered twice: {exc}") from exc
        except pluggy.PluginValidationError as exc:
            raise PluginLoadError(f"plugin {name!r} does not match the hook specs: {exc}") from exc
        callers = self.pm.get_hookcallers(module) or []
        for caller in callers:
            for impl in caller.get_hookimpls():
                if impl.plugin is module and not (impl.hookwrapper or impl.wrapper) and \
                        not getattr(impl.function, "sand_guarded", False):
                    guard = observer if caller.name in hookspecs.LIFECYCLE_HOOKS else _guard
                    impl.function = guard(impl.function, name, caller.name)  # type: ignore[misc]
        hooks = sorted(h.name for h in callers)
        self.info[name] = PluginInfo(name, version, source, hooks, contract)
        self.origins[name] = str(getattr(module, "__file__", "") or "")
        self._check_hook_names(module, name, hooks)

    def _check_observers(self, module: Any, name: str) -> None:
        """Lifecycle implementations of ``module``: one asking for a renamed argument is warned about (it still
        works), one asking for an argument its spec does not have is disabled with a warning (never called),
        so that an observer written for another contract does not cost the plugin its components."""
        for attr in dir(module):
            opts = pluggy.PluginManager.parse_hookimpl_opts(self.pm, module, attr)
            hook = opts and (opts.get("specname") or attr)
            if hook not in hookspecs.LIFECYCLE_HOOKS:
                continue
            function = getattr(module, attr)
            impl = pluggy.HookImpl(module, name, function, opts)
            spec = getattr(self.pm.hook, hook).spec
            asked = [*impl.argnames, *impl.kwargnames]
            unknown = [a for a in asked if a not in (*spec.argnames, *spec.kwargnames)]
            where = f"{getattr(function, '__module__', '?')}.{hook}({', '.join(impl.argnames)})"
            allowed = [a for a in spec.argnames if a not in hookspecs.DEPRECATED_ARGS]
            if unknown:
                self.pm.disabled.setdefault(id(module), set()).add(attr)
                log.warning(f"plugin {name!r}: its observer {where} asks for {', '.join(map(repr, unknown))}, "
                            f"which {hook} does not pass (it takes {', '.join(allowed)}), so this observer is "
                            "disabled; the plugin's other hooks and components load. Update the plugin "
                            "(CHANGELOG.md, 'Migrating')")
                continue
            for old in (a for a in asked if a in hookspecs.DEPRECATED_ARGS):
                message = f"plugin {name!r}: {where}: {hookspecs.CONTEXT_RENAMED}"
                log.warning(message)
                code = getattr(function, "__code__", None)
                warnings.warn_explicit(message, DeprecationWarning,
                                       filename=code.co_filename if code else "<plugin>",
                                       lineno=code.co_firstlineno if code else 0)

    @staticmethod
    def _check_hook_names(module: Any, name: str, hooks: list[str]) -> None:
        """Warn about functions that look like hooks but will never be called."""
        for hook in hooks:
            if hook not in HOOK_NAMES:
                close = difflib.get_close_matches(hook, HOOK_NAMES, n=1)
                log.warning(f"plugin {name!r} implements {hook!r}, which is not a SAND hook, so it is never called"
                            + (f" (did you mean {close[0]!r}?)" if close else "; see docs/hooks.md"))
        for attr in dir(module):
            fn = getattr(module, attr, None)
            if attr in HOOK_NAMES and callable(fn) and attr not in hooks and not hasattr(fn, "sand_impl") and \
                    getattr(fn, "__module__", None) == getattr(module, "__name__", None):
                log.warning(f"plugin {name!r} defines {attr}() without @hookimpl, so it is never called; decorate it "
                            "with `@sand_framework.hookimpl`")

    def load_builtins(self) -> None:
        version = __version__  # the checkout's, even where an editable install's metadata is older
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
            except (Exception, SystemExit) as exc:  # noqa: BLE001
                raise PluginLoadError(
                    f"plugin {ep.name!r} (entry point {ep.value!r}) failed to import: {_failure(exc)}. Fix or "
                    f"uninstall it, or deny it with SAND_PLUGINS_DENY={ep.name}") from exc
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
            try:
                paths = plugin_paths(root)
            except OSError as exc:
                raise PluginLoadError(f"plugins directory {d!r} cannot be read: {exc.strerror or exc}") from None
            for path in paths:
                if path.stem not in deny:
                    self.register(_import_path(path), path.stem, "local", "module")

    def registries(self) -> Registries:
        """Call every registration hook, recording which plugin registered what."""
        regs = Registries()
        for kind in KINDS:
            caller = getattr(self.pm.hook, kind.hook)
            for impl in caller.get_hookimpls():
                plugin = impl.plugin_name
                impl.function(register=lambda cls, _p=plugin, _k=kind.name: regs[_k].add(cls, _p))
        return regs

    def resolve_model(self, ref: str, cache_dir: str) -> str:
        """A loadable path or hub id for ``model.base``: a plugin's alias, else the reference itself, checked."""
        resolved = self.resolve_alias(ref, cache_dir)
        if resolved:
            return resolved
        check_model_ref(ref)
        return ref

    def resolve_alias(self, ref: str, cache_dir: str) -> str | None:
        """The model folder a plugin's alias names (built on first use), or None when ``ref`` is not an alias."""
        return self.pm.hook.sand_resolve_model(ref=ref, cache_dir=cache_dir) or None


def looks_local(ref: str) -> bool:
    """Is a model reference meant as a local folder (not an alias or a hub id)?"""
    try:
        exists = Path(ref).expanduser().exists()
    except (OSError, ValueError):
        exists = False
    return ref.startswith(("/", ".", "~")) or exists or ref.count("/") > 1


def check_model_ref(ref: str) -> None:
    """Fail before any work on a model that cannot load: a missing folder, or a hub id offline and uncached."""
    from sand_framework.errors import ModelUnavailable

    path = Path(ref).expanduser()
    if looks_local(ref):
        if not (path / "config.json").is_file():
            raise ModelUnavailable(f"model {ref!r}: no such model folder (expected a folder with config.json); "
                                   "set model.base to a local Hugging Face model folder, a hub id, or an alias "
                                   "(built-in: smollm2-135m, tiny-random)")
        problem = model_config_problem(path / "config.json")
        if problem:
            raise ModelUnavailable(f"model {ref!r}: {problem}; re-download or re-save the model "
                                   "(`save_pretrained`), or point model.base at another folder")
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


def model_config_problem(config: Path) -> str:
    """What is wrong with a model folder's ``config.json`` ('' when it looks like a transformers config)."""
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"{config} is not readable JSON ({str(exc)[:120]})"
    if not isinstance(data, dict) or not (data.get("model_type") or data.get("architectures")):
        return f"{config} is not a transformers model config (no model_type or architectures)"
    return ""


def load_plugins(modules: list[str] = (), dirs: list[str] = ()) -> PluginSet:
    """Built-ins, then entry points, then named modules and plugin directories."""
    ps = PluginSet()
    ps.load_builtins()
    ps.load_entrypoints()
    ps.load_modules(list(modules), list(dirs))
    return ps
