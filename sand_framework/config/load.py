"""Recipe loading: YAML (safe loader), ``extends:`` chains and ``key=value`` overrides.

Merging follows one rule beyond OmegaConf's deep merge: when a component slot
changes its ``name``, the new node *replaces* the old one, because the old
component's params mean nothing to the new component. So an ablation recipe
that writes ``critic: {name: no_rollout_critic}`` does not inherit the paper
critic's keys.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from sand_framework.config.schema import SLOTS
from sand_framework.errors import RecipeError

RECIPE_DIRS_ENV = "SAND_RECIPE_PATH"


def bundled_recipe_dirs() -> list[Path]:
    """Where named recipes (``quickstart``, ``paper/alfworld``) are looked up."""
    here = Path(__file__).resolve().parent.parent
    dirs = [Path(p) for p in os.environ.get(RECIPE_DIRS_ENV, "").split(os.pathsep) if p]
    dirs += [here / "recipes", here.parent / "recipes"]  # wheel install; source checkout
    return [d for d in dirs if d.is_dir()]


def find_recipe(ref: str, relative_to: Path | None = None) -> Path:
    """A recipe path, or a bundled recipe name with or without ``.yaml``."""
    candidates = [Path(ref)]
    if relative_to is not None:
        candidates.insert(0, relative_to / ref)
    names = [ref] if ref.endswith((".yaml", ".yml")) else [ref + ".yaml", ref]
    for d in bundled_recipe_dirs():
        candidates += [d / n for n in names]
        candidates += [d / Path(n).name for n in names if n.startswith("recipes/")]
    for c in candidates:
        if c.is_file():
            return c.resolve()
    known = sorted(str(p.relative_to(d)).removesuffix(".yaml") for d in bundled_recipe_dirs() for p in d.rglob("*.yaml"))
    raise RecipeError([f"recipe {ref!r} not found; bundled recipes: {', '.join(known) or '(none)'}"])


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))  # safe: no object construction
    except yaml.YAMLError as exc:
        raise RecipeError([f"{path}: invalid YAML: {exc}"]) from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise RecipeError([f"{path}: a recipe must be a mapping at the top level, got {type(data).__name__}"])
    return data


def merge(base: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge ``child`` over ``base``; a slot whose ``name`` changes is replaced whole."""
    base = dict(base)
    for slot in SLOTS:
        new, old = child.get(slot), base.get(slot)
        if isinstance(new, str):  # shorthand: `sampler: imagined`
            child = {**child, slot: {"name": new}}
            new = child[slot]
        if isinstance(new, dict) and isinstance(old, dict) and "name" in new and new["name"] != old.get("name"):
            base[slot] = {}
    merged = OmegaConf.merge(OmegaConf.create(base), OmegaConf.create(child))
    return OmegaConf.to_container(merged, resolve=False)  # type: ignore[return-value]


def load_file(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    if path in seen:
        chain = " -> ".join(str(p) for p in (*seen, path))
        raise RecipeError([f"extends: cycle {chain}"])
    data = _read_yaml(path)
    parents = data.pop("extends", None)
    if parents is None:
        return data
    parents = [parents] if isinstance(parents, str) else parents
    if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
        raise RecipeError([f"{path}: extends must be a recipe path or a list of them, got {parents!r}"])
    result: dict[str, Any] = {}
    for parent in parents:
        result = merge(result, load_file(find_recipe(parent, path.parent), (*seen, path)))
    return merge(result, data)


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """``a.b=1`` pairs to a nested mapping (values parsed as YAML scalars/lists)."""
    problems, out = [], OmegaConf.create({})
    for item in overrides:
        if "=" not in item:
            problems.append(f"override {item!r}: expected key=value, e.g. sampler.n=3")
            continue
        key, value = item.split("=", 1)
        try:
            parsed = yaml.safe_load(value) if value != "" else ""
        except yaml.YAMLError:
            parsed = value
        key = key.strip()
        if key in SLOTS and isinstance(parsed, str):  # `detector=entropy` swaps the component
            key, parsed = f"{key}.name", parsed
        OmegaConf.update(out, key, parsed, merge=True, force_add=True)
    if problems:
        raise RecipeError(problems)
    return OmegaConf.to_container(out)  # type: ignore[return-value]


def load_recipe(ref: str, overrides: list[str] = ()) -> tuple[dict[str, Any], Path]:
    """Resolved plain mapping of a recipe plus its overrides, and the recipe file path."""
    path = find_recipe(ref)
    data = merge(load_file(path), parse_overrides(list(overrides)))
    try:
        resolved = OmegaConf.to_container(OmegaConf.create(data), resolve=True)
    except Exception as exc:  # noqa: BLE001 - bad interpolation
        raise RecipeError([f"interpolation: {exc}"], str(path)) from exc
    return resolved, path  # type: ignore[return-value]
