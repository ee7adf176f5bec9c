"""Recipe loading: bounded safe YAML, ``extends:`` chains, ``key=value`` overrides and interpolation.

Merging is a plain deep merge (mappings merge key by key; anything else,
lists included, is replaced) with one extra rule for a component slot whose
``name`` changes (``executor=process_pool`` on the command line, ``critic:
{name: no_rollout_critic}`` in a recipe that extends another): the new
component keeps the slot's inherited settings that its own ``Params`` also
declares (a parameter of the same name means the same thing: ``temperature``,
``max_new_tokens``), and the others are dropped, because they mean nothing to
it. Which parameters a component declares is known only once the plugins are
loaded, so merging marks the carried keys (:data:`INHERITED`) and
:func:`settle_swaps` keeps or drops them against the registries, returning a
note for each swap so that it is never silent.

Everything read here is data: YAML is loaded with the safe loader within the
limits of :mod:`~sand_framework.store.yamlsafe`, interpolation is limited as
described in :mod:`~sand_framework.config.interpolate`, and a recipe that
names plugin code is refused unless the user allows it
(:mod:`~sand_framework.config.codegate`).
"""

from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sand_framework.store import yamlsafe
from sand_framework.config.codegate import check_recipe_code
from sand_framework.config.interpolate import resolve
from sand_framework.config.schema import SLOTS
from sand_framework.errors import RecipeError

RECIPE_DIRS_ENV = "SAND_RECIPE_PATH"
MAX_EXTENDS_DEPTH = 32
"""``extends:`` chains deeper than this are refused (real ones are 2-4 deep)."""
MAX_RECIPE_FILES = 256
"""Recipe files read for one recipe, counting repeats (bounds diamond-shaped ``extends:`` fan-outs)."""


def bundled_recipe_dirs() -> list[Path]:
    """Where named recipes (``quickstart``, ``paper/alfworld``) are looked up."""
    here = Path(__file__).resolve().parent.parent
    dirs = [Path(p) for p in os.environ.get(RECIPE_DIRS_ENV, "").split(os.pathsep) if p]
    dirs += [here / "recipes", here.parent / "recipes"]  # wheel install; source checkout
    return [d for d in dirs if d.is_dir()]


def find_recipe(ref: str, relative_to: Path | None = None) -> Path:
    """A recipe path, or a bundled recipe name with or without ``.yaml``."""
    if not ref or "\x00" in ref:
        raise RecipeError([f"recipe {ref!r} is not a file name or a bundled recipe name"])
    candidates = [Path(ref)]
    if relative_to is not None:
        candidates.insert(0, relative_to / ref)
    names = [ref] if ref.endswith((".yaml", ".yml")) else [ref + ".yaml", ref]
    for d in bundled_recipe_dirs():
        candidates += [d / n for n in names]
        candidates += [d / Path(n).name for n in names if n.startswith("recipes/")]
    for c in candidates:
        try:
            if c.is_file():
                return c.resolve()
        except OSError:  # a name too long for the file system, a loop of links
            continue
    known = sorted(str(p.relative_to(d)).removesuffix(".yaml") for d in bundled_recipe_dirs() for p in d.rglob("*.yaml")
                   if not p.name.startswith("_"))  # _name.yaml: a part other recipes extend, not run alone
    raise RecipeError([f"recipe {ref!r} not found; bundled recipes: {', '.join(known) or '(none)'}"])


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yamlsafe.load(yamlsafe.read_text(path))  # safe loader, bounded: no objects, no alias bombs
    except yaml.YAMLError as exc:
        raise RecipeError([f"{path}: invalid YAML: {exc}"]) from None
    except yamlsafe.YAMLLimitError as exc:
        raise RecipeError([f"{path}: refused: {exc}"]) from None
    except OSError as exc:
        raise RecipeError([f"{path}: cannot be read ({exc.strerror or exc})"]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise RecipeError([f"{path}: a recipe must be a mapping at the top level (`run: {{...}}`, ...), "
                           f"got {type(data).__name__}"])
    problems = yamlsafe.non_string_keys(data)
    if problems:
        raise RecipeError(problems, str(path))
    return data


INHERITED = "__inherited__"
"""Marker in a swapped slot node between merging and :func:`settle_swaps`: ``{"from": OLD_NAME, "keys": [...]}``,
the keys the node carries over from the component it replaced (never stored: settling removes it)."""


def _slot_node(key: str, value: Any) -> Any:
    return {"name": value} if key in SLOTS and isinstance(value, str) else value


def _deep(old: Any, new: Any) -> Any:
    if isinstance(old, dict) and isinstance(new, dict):
        out = dict(old)
        for k, v in new.items():
            out[k] = _deep(out.get(k), v)
        return out
    return copy.deepcopy(new)


def _swap(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A slot node changing component: ``new`` over the old node's settings, the carried keys marked."""
    before = old.get(INHERITED) if isinstance(old.get(INHERITED), dict) else {}
    settings = {k: v for k, v in old.items() if k not in ("name", INHERITED)}
    carried = [k for k in settings if k not in new]
    out = _deep(settings, {k: v for k, v in new.items() if k != INHERITED})
    out = {"name": new["name"], **{k: v for k, v in out.items() if k != "name"}}
    if carried:
        out[INHERITED] = {"from": before.get("from", old.get("name")), "keys": carried}
    return out


def merge(base: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge ``child`` over ``base``; a slot whose ``name`` changes keeps the old settings, marked.

    The marked settings are kept or dropped by :func:`settle_swaps` once the
    new component's ``Params`` are known. A value of another type (a list
    where a mapping was, a number where a list was) replaces the old one;
    validation then says what the key expects.
    """
    out = {k: _slot_node(k, v) for k, v in base.items()}
    for key, new in child.items():
        new, old = _slot_node(key, new), out.get(key)
        if key in SLOTS and isinstance(new, dict) and isinstance(old, dict):
            if "name" in new and new["name"] != old.get("name"):
                out[key] = _swap(old, new)
                continue
            mark = old.get(INHERITED)
            if isinstance(mark, dict):  # set again here: no longer inherited
                keys = [k for k in mark.get("keys", []) if k not in new]
                old = {k: v for k, v in old.items() if k != INHERITED}
                if keys:
                    old[INHERITED] = {**mark, "keys": keys}
        out[key] = _deep(old, new)
    return out


def settle_swaps(data: dict[str, Any], registries: Any) -> tuple[dict[str, Any], list[str]]:
    """Keep the settings a swapped component inherited that its ``Params`` declare, drop the rest.

    Returns the recipe without :data:`INHERITED` markers and one note per swap
    that carried settings (what was kept, what was dropped). A slot naming a
    component that is not registered drops them all (validation reports the
    name). Recipes without swaps come back unchanged.
    """
    notes: list[str] = []
    out = dict(data)
    for kind in SLOTS:
        node = out.get(kind)
        if not isinstance(node, dict) or INHERITED not in node:
            continue
        mark = node[INHERITED]
        node = {k: v for k, v in node.items() if k != INHERITED}
        keys = [k for k in (mark.get("keys") or []) if k in node] if isinstance(mark, dict) else []
        old = mark.get("from") if isinstance(mark, dict) else None
        name = node.get("name")
        declared = _declared(registries, kind, name)
        kept = [k for k in keys if declared is not None and k in declared]
        dropped = [k for k in keys if k not in kept]
        for k in dropped:
            del node[k]
        out[kind] = node
        if keys and declared is not None:
            parts = [f"keeps the slot's {', '.join(f'{k}={_short(node[k])}' for k in kept)}"] if kept else []
            if dropped:
                parts.append(f"drops the slot's {', '.join(dropped)} (not parameters of {name})")
            notes.append(f"{kind}: {old} -> {name} " + "; ".join(parts))
    return out, notes


def _declared(registries: Any, kind: str, name: Any) -> set[str] | None:
    import dataclasses

    try:
        if not isinstance(name, str) or name not in registries[kind]:
            return None
        params = registries[kind].get(name).Params
        return {f.name for f in dataclasses.fields(params)}
    except Exception:  # noqa: BLE001 - a malformed component is reported by validation, not here
        return None


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


@dataclass
class _Budget:
    """Recipe files read so far for one recipe (shared by every branch of its ``extends:`` tree)."""

    files: int = 0


def load_file(path: Path, seen: tuple[Path, ...] = (), budget: _Budget | None = None) -> dict[str, Any]:
    budget = budget or _Budget()
    if path in seen:
        chain = " -> ".join(str(p) for p in (*seen, path))
        raise RecipeError([f"extends: cycle {chain}"])
    if len(seen) >= MAX_EXTENDS_DEPTH:
        raise RecipeError([f"{seen[0]}: extends: chain deeper than {MAX_EXTENDS_DEPTH} recipes "
                           f"(... -> {seen[-1]} -> {path}); flatten the chain"])
    budget.files += 1
    if budget.files > MAX_RECIPE_FILES:
        raise RecipeError([f"{seen[0] if seen else path}: extends: more than {MAX_RECIPE_FILES} recipe files read "
                           "(recipes extending the same parents many times); extend each parent once"])
    data = _read_yaml(path)
    parents = data.pop("extends", None)
    if parents is None:
        return data
    parents = [parents] if isinstance(parents, str) else parents
    if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
        raise RecipeError([f"{path}: extends must be a recipe path or a list of them, got {parents!r}"])
    result: dict[str, Any] = {}
    for parent in parents:
        result = merge(result, load_file(find_recipe(parent, path.parent), (*seen, path), budget))
    return merge(result, data)


_KEY_PART = re.compile(r"[A-Za-z_][\w-]*")


def parse_value(text: str) -> Any:
    """An override's value: YAML (``3``, ``[a, b]``, ``{n: 2}``, ``null``), else the text itself."""
    if text == "":
        return ""
    try:
        return yamlsafe.load(text)
    except yaml.YAMLError:
        return text


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """``a.b=1`` pairs to a nested mapping (values parsed as YAML scalars/lists)."""
    problems: list[str] = []
    out: dict[str, Any] = {}
    for item in overrides:
        if "=" not in item:
            problems.append(f"override {item!r}: expected key=value, e.g. sampler.n=3")
            continue
        key, value = item.split("=", 1)
        key = key.strip()
        parts = key.split(".")
        if not all(_KEY_PART.fullmatch(p) for p in parts):
            problems.append(f"override {item[:200]!r}: {key[:100]!r} is not a key path like sampler.n or run.name")
            continue
        try:
            parsed = parse_value(value)
        except yamlsafe.YAMLLimitError as exc:
            problems.append(f"override {key}: value refused: {exc}")
            continue
        bad_keys = yamlsafe.non_string_keys(parsed)
        if bad_keys:
            problems += [f"override {key}: {p}" for p in bad_keys]
            continue
        if len(parts) == 1 and key in SLOTS and isinstance(parsed, str):  # `detector=entropy` swaps the component
            parts, parsed = [key, "name"], parsed
        nested: Any = parsed
        for part in reversed(parts):
            nested = {part: nested}
        out = _deep(out, nested)
    if problems:
        raise RecipeError(problems)
    return out


def load_recipe(ref: str, overrides: list[str] = (), registries: Any = None, settle: bool = True
                ) -> tuple[dict[str, Any], Path]:
    """Resolved plain mapping of a recipe plus its overrides, and the recipe file path.

    A swapped component's inherited settings are settled (:func:`settle_swaps`)
    against ``registries``, by default those of the built-ins, the installed
    plugins and the plugins the recipe names; ``settle=False`` leaves the
    markers for a caller that loads the plugins itself (and reports the notes).

    Raises :class:`RecipeError` when the recipe cannot be read, its
    interpolations cannot be resolved, or it names plugin code the user has
    not allowed.
    """
    path = find_recipe(ref)
    data = merge(load_file(path), parse_overrides(list(overrides)))
    resolved, problems = resolve(data)
    if problems:
        raise RecipeError(problems, str(path))
    check_recipe_code(resolved, str(path))
    if settle and any(isinstance(resolved.get(k), dict) and INHERITED in resolved[k] for k in SLOTS):
        if registries is None:
            from sand_framework.plugins import load_plugins

            section = resolved.get("plugins") if isinstance(resolved.get("plugins"), dict) else {}
            registries = load_plugins(list(section.get("modules") or []), list(section.get("dirs") or [])).registries()
        resolved, _ = settle_swaps(resolved, registries)
    return resolved, path
