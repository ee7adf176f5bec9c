"""Validate a resolved recipe against the sections and the registered components.

Every problem is collected first and raised once as :class:`RecipeError`, so a
user fixes a recipe in one pass rather than one error per run.
"""

from __future__ import annotations

import difflib
from typing import Any

from sand_framework.config.schema import META_KEYS, SECTIONS, SLOTS, Recipe
from sand_framework.config.typecheck import build, check_fields
from sand_framework.registry import Registries


def _unknown_top(key: str) -> str:
    valid = [*SECTIONS, *SLOTS, *META_KEYS]
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{key}: unknown top-level key{hint}; valid: {', '.join(valid)}"


def validate(data: dict[str, Any], registries: Registries, source: str | None = None) -> Recipe:
    from sand_framework.errors import RecipeError

    problems: list[str] = []
    sections: dict[str, Any] = {}
    for key in data:
        if key not in SECTIONS and key not in SLOTS and key not in META_KEYS:
            problems.append(_unknown_top(key))
    for key, cls in SECTIONS.items():
        values = data.get(key) or {}
        if not isinstance(values, dict):
            problems.append(f"{key}: expected a mapping, got {values!r}")
            continue
        found = check_fields(values, cls, key)
        problems += found
        if not found:
            try:
                sections[key] = build(cls, values)
            except (TypeError, ValueError) as exc:
                problems.append(f"{key}: {exc}")
    slots: dict[str, tuple[str, Any]] = {}
    for kind in SLOTS:
        node = data.get(kind)
        if node is None:
            problems.append(f"{kind}: missing component slot; add e.g. `{kind}: {{name: ...}}` "
                            f"(available: {', '.join(registries[kind].names()) or 'none'})")
            continue
        if not isinstance(node, dict) or "name" not in node:
            problems.append(f"{kind}: expected a mapping with a `name`, got {node!r}")
            continue
        name = node["name"]
        if name not in registries[kind]:
            problems.append(f"{kind}.name: {registries[kind].suggest(str(name))}")
            continue
        cls = registries[kind].get(name).Params
        params = {k: v for k, v in node.items() if k != "name"}
        found = check_fields(params, cls, f"{kind}[{name}]")
        problems += found
        if not found:
            try:
                slots[kind] = (name, build(cls, params))
            except (TypeError, ValueError) as exc:  # Params.__post_init__ checks
                problems.append(f"{kind}[{name}]: {exc}")
    if "run" in sections and "eval" in sections:
        problems += _check_eval_models(sections["eval"].models, sections["run"].iterations)
    if problems:
        raise RecipeError(problems, source)
    return Recipe(slots=slots, raw=data, **sections)


def _check_eval_models(models: list[str], iterations: int) -> list[str]:
    """Caught here, not after hours of training when evaluation asks for weights that will never exist."""
    known = ["base", "sft", "final"] + [f"iter{k}" for k in range(iterations + 1)]
    return [f"eval.models: {m!r} will not exist in a run with run.iterations={iterations}; "
            f"choose from {', '.join(known)}" for m in models if m not in known]
