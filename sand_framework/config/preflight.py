"""Checks of what a validated recipe points at on this machine: its data file, a local model folder and the
packages its components need.

``sand validate`` runs them so that a recipe that validates does not stop at
its first stage for a reason visible up front. They are not part of
:func:`~sand_framework.config.validate.validate`, which also re-checks the
stored recipe of a run being resumed: there a data file that was read into the
run's expert stage may since have moved, and the resume must not depend on it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from sand_framework.config.schema import Recipe
from sand_framework.errors import RecipeError, SandError, install_hint
from sand_framework.registry import Registries


def missing_packages(recipe: Recipe, registries: Registries) -> list[str]:
    """One problem per selected component whose :attr:`~sand_framework.components.Component.requires` lists a
    module that is not installed (looked up with ``find_spec``: nothing is imported)."""
    problems = []
    for kind, (name, _) in recipe.slots.items():
        for module, extra in registries[kind].get(name).requires.items():
            try:
                found = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):  # a parent package that fails to import, or a broken module spec
                found = False
            if not found:
                problems.append(f"{kind}: {name!r} needs the package {module!r}, which is not installed; "
                                f"{install_hint(extra)}")
    return problems


def require_packages(recipe: Recipe, registries: Registries) -> None:
    """Refuse (exit 2) to start or resume a run whose components need a package that is not installed: the
    check of ``sand validate``, made again where a run begins, before any stage (or the run directory) exists."""
    problems = missing_packages(recipe, registries)
    if problems:
        raise RecipeError(problems)


def preflight(recipe: Recipe, registries: Registries) -> list[str]:
    """Problems with the recipe's data file (exists, parses, holds trajectories), local model folder and the
    packages its components need."""
    from sand_framework.formats import read_messages, read_sharegpt
    from sand_framework.plugins import check_model_ref, looks_local

    problems = []
    data = recipe.data
    env = recipe.slots["environment"][0]
    if data.source != "env" and data.path:
        path = Path(data.path)
        if not path.is_file():  # also refuses devices and pipes, which could block or never end
            problems.append(f"data.path: expert file {data.path!r} not found (or not a regular file); make one "
                            f"with `sand data import-eto FILE --env {env} -o OUT` or `sand data expert --env {env} "
                            "--split train -o OUT`, or use data.source=env")
        else:
            reader = read_sharegpt if data.source == "sharegpt" else read_messages
            try:
                if not reader(path, env):
                    problems.append(f"data.path: {data.path!r} holds no trajectories")
            except SandError as exc:
                problems.append(f"data.path: {exc}; fix the file, or make one with `sand data import-eto` or "
                                "`sand data expert`")
    if looks_local(recipe.model.base):
        try:
            check_model_ref(recipe.model.base)
        except SandError as exc:
            problems.append(f"model.base: {exc}")
    return problems + missing_packages(recipe, registries)
