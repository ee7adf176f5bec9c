"""Recipes are data: the plugin code a recipe names loads only when the user allows it.

A recipe's ``plugins: {modules: [...], dirs: [...]}`` imports modules and
executes every ``*.py`` file of the folders. Recipes are shared like data
files, and ``sand validate`` on a downloaded recipe must not run its code. So
a recipe that names plugin code is refused, with the exact list of what would
load, unless the user opts in for this command with
``--allow-recipe-plugins`` (or ``SAND_ALLOW_RECIPE_PLUGINS=1`` in the
environment, which ``sand sweep`` passes on to its runs). Folders given on the
command line with ``--plugins-dir`` need no opt-in: the user named them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sand_framework.errors import RecipeError

ALLOW_VAR = "SAND_ALLOW_RECIPE_PLUGINS"
ALLOW_FLAG = "--allow-recipe-plugins"


def recipe_plugins_allowed() -> bool:
    return os.environ.get(ALLOW_VAR, "") not in ("", "0")


def allow_recipe_plugins() -> None:
    """Opt in for this process and the ``sand`` processes it starts (what ``--allow-recipe-plugins`` does)."""
    os.environ[ALLOW_VAR] = "1"


def _names(section: dict[str, Any], key: str, problems: list[str]) -> list[str]:
    value = section.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        problems.append(f"plugins.{key}: expected a list of {'module names' if key == 'modules' else 'folders'}, "
                        f"got {value!r}")
        return []
    return list(value)


def recipe_code(data: dict[str, Any]) -> tuple[list[str], list[str], list[str]]:
    """(modules, folders, problems): the plugin code a recipe names, and what is malformed about it."""
    section = data.get("plugins")
    problems: list[str] = []
    if section is None:
        return [], [], problems
    if not isinstance(section, dict):
        return [], [], [f"plugins: expected a mapping like {{modules: [...], dirs: [...]}}, got {section!r}"]
    return _names(section, "modules", problems), _names(section, "dirs", problems), problems


def describe(modules: list[str], dirs: list[str]) -> list[str]:
    """One line per module and folder, listing the files a folder would execute."""
    from sand_framework.plugins import plugin_paths

    lines = [f"module {m!r} (imported by name)" for m in modules]
    for d in dirs:
        root = Path(d)
        if not root.is_dir():
            lines.append(f"folder {d!r} (does not exist)")
            continue
        try:
            files = [p.name + ("/" if p.is_dir() else "") for p in plugin_paths(root)]
        except OSError as exc:
            files = [f"(cannot list: {exc.strerror or exc})"]
        shown = ", ".join(files[:10]) + (f", ... ({len(files)} in all)" if len(files) > 10 else "")
        lines.append(f"folder {str(root.resolve())!r}: executes {shown or 'nothing (no *.py files or packages)'}")
    return lines


def check_recipe_code(data: dict[str, Any], source: str | None = None) -> None:
    """Raise :class:`RecipeError` if the recipe names plugin code the user has not allowed, or names it badly."""
    modules, dirs, problems = recipe_code(data)
    if problems:
        raise RecipeError(problems, source)
    if (modules or dirs) and not recipe_plugins_allowed():
        what = "; ".join(describe(modules, dirs))
        raise RecipeError([
            f"plugins: this recipe would run code: {what}. A recipe is data and runs no code by itself. If you "
            f"trust this code, allow it with {ALLOW_FLAG} (or {ALLOW_VAR}=1); or delete the recipe's `plugins:` "
            "section and give plugin folders yourself with --plugins-dir DIR (modules: install them as packages "
            "with a `sand` entry point)"], source)
