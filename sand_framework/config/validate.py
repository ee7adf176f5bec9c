"""Validate a resolved recipe against the sections and the registered components.

Every problem is collected first and raised once as :class:`RecipeError`, so a
user fixes a recipe in one pass rather than one error per run.
"""

from __future__ import annotations

import difflib
from typing import Any

from sand_framework.components.declared import BY_NAME, EVERY_RUN, required_slots
from sand_framework.components.method import TRAINER_SLOT, Method
from sand_framework.config.budgets import check_budgets, check_context
from sand_framework.config.schema import META_KEYS, SECTIONS, SLOTS, Recipe, evaluable_models
from sand_framework.config.typecheck import build, check_fields, instance_problems, short
from sand_framework.registry import Registries


def _unknown_top(key: Any) -> str:
    valid = [*SECTIONS, *SLOTS, *META_KEYS]
    if not isinstance(key, str):
        return (f"{short(key)}: top-level keys must be names (strings), got {type(key).__name__}; "
                f"valid: {', '.join(valid)}")
    close = difflib.get_close_matches(key[:100], valid, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{key if len(key) <= 100 else short(key, 100)}: unknown top-level key{hint}; valid: {', '.join(valid)}"


def component_params(registries: Registries, kind: str, name: str, values: dict[str, Any]) -> tuple[Any, list[str]]:
    """The registered component's ``Params`` built from ``values``, or ``None`` with every problem found.

    Recipes and commands that take a component's parameters on the command
    line (``sand env check ENV k=v``) check them alike: field names and types,
    ranges, ``__post_init__`` and the checks that need the built parameters.
    """
    cls = registries[kind].get(name).Params
    where = f"{kind}[{name}]"
    problems = check_fields(values, cls, where)
    if problems:
        return None, problems
    try:
        built = build(cls, values)
    except (TypeError, ValueError) as exc:  # Params.__post_init__ checks
        return None, [f"{where}: {exc}"]
    problems = instance_problems(built, where, values)
    return (None if problems else built), problems


def validate(data: dict[str, Any], registries: Registries, source: str | None = None) -> Recipe:
    from sand_framework.errors import RecipeError

    problems: list[str] = []
    sections: dict[str, Any] = {}
    for key in data:
        if key not in SECTIONS and key not in SLOTS and key not in META_KEYS:
            problems.append(_unknown_top(key))
    for key, cls in SECTIONS.items():
        values = data.get(key)
        values = {} if values is None else values
        if not isinstance(values, dict):
            problems.append(f"{key}: expected a mapping, got {short(values)}")
            continue
        found = check_fields(values, cls, key)
        problems += found
        # The section's own checks (run.name, data.path ...) run on the values that passed, so they are
        # reported in the same pass as the others.
        good = {k: v for k, v in values.items() if isinstance(k, str) and not check_fields({k: v}, cls, key)}
        try:
            section = build(cls, good)
        except (TypeError, ValueError) as exc:
            problems.append(f"{key}: {exc}")
            continue
        bad = [k for k in values if k not in good]
        own = [p for p in instance_problems(section, key, good) if not p.startswith(tuple(f"{key}.{k}:" for k in bad))]
        problems += own
        if not found and not own:
            sections[key] = section
    slots: dict[str, tuple[str, Any]] = {}
    method = _method_class(data, registries)
    needed = required_slots(method, _iterations(data, sections))
    for kind in SLOTS:
        node = data.get(kind)
        if node is None and kind in needed and BY_NAME[kind].default is not None:  # added after the recipe
            node = data[kind] = {"name": BY_NAME[kind].default}
        if node is None:
            if kind in needed:
                why = (f" (method {method.name!r} uses it; run.iterations > 0 runs the method)"
                       if method is not None and kind not in EVERY_RUN else "")
                problems.append(f"{kind}: missing component slot{why}; add e.g. `{kind}: {{name: ...}}` "
                                f"(available: {', '.join(registries[kind].names()) or 'none'})")
            continue
        if not isinstance(node, dict) or "name" not in node:
            problems.append(f"{kind}: expected a mapping with a `name`, got {short(node)}")
            continue
        name = node["name"]
        if not isinstance(name, str) or name not in registries[kind]:
            shown = name if isinstance(name, str) and len(name) <= 100 else short(name, 100)
            problems.append(f"{kind}.name: {registries[kind].suggest(shown)}")
            continue
        built, found = component_params(registries, kind, name, {k: v for k, v in node.items() if k != "name"})
        problems += found
        if built is not None:
            slots[kind] = (name, built)
    env_node = data.get("environment")
    env_name = env_node.get("name") if isinstance(env_node, dict) else None
    if isinstance(env_name, str) and env_name in registries["environment"]:
        # with params that failed their checks, the splits are still checked on a default-built environment
        params = slots["environment"][1] if "environment" in slots else None
        problems += _check_environment(registries, env_name, params, data.get("data"), data.get("eval"),
                                       report_build="environment" in slots)
    if "run" in sections and "eval" in sections:
        problems += _check_eval_models(sections["eval"].models, sections["run"].iterations)
    complete = all(k in slots for k in needed)
    slots = {k: v for k, v in slots.items() if k in needed}  # checked above, kept only where the method uses it
    if "run" in sections and complete:
        problems += check_budgets(slots, registries, sections["run"].iterations)
        problems += _check_method_trainer(slots, registries)
    if complete:
        problems += check_context(slots, registries)
    if problems:
        raise RecipeError(problems, source)
    unused = [k for k in SLOTS if k not in needed and isinstance(data.get(k), dict)]
    notes = []
    if unused:
        who = ("run.iterations is 0, so the method never runs and the run does not use"
               if sections["run"].iterations == 0 else f"method {slots['method'][0]!r} does not use")
        notes.append(f"{who} {', '.join(unused)}: checked, then left out of the run (its slots: {', '.join(needed)})")
        data = {k: v for k, v in data.items() if k not in unused}
    classes = {kind: registries[kind].get(name) for kind, (name, _) in slots.items()}
    in_flight = sections["run"].batches_in_flight
    method_cls = classes.get("method")
    if in_flight > 1 and method_cls is not None and method_cls.build_stream is Method.build_stream:
        notes.append(f"run.batches_in_flight is {in_flight}, but method {slots['method'][0]!r} builds one batch after "
                     "another (it has no build_stream of its own): the setting changes nothing for it")
    elif in_flight > 1 and not callable(getattr(classes.get("policy"), "submit", None)):
        notes.append(f"run.batches_in_flight is {in_flight}, but policy {slots['policy'][0]!r} serves the agent and "
                     "the base model from one model in this process, one call at a time: streaming overlaps only "
                     "the work outside the model (environment steps, host work), and the threads contend for the cores: "
                     "measured slower than 1 (0.76x on the quickstart) "
                     "(docs/scaling.md, \"Streamed data building\")")
    return Recipe(slots=slots, raw=data, classes=classes, notes=notes, **sections)


def _iterations(data: dict[str, Any], sections: dict[str, Any]) -> int | None:
    """``run.iterations``, as validated, or as written when another ``run`` setting failed (so that failure does
    not also report the method's slots missing); None when neither says."""
    if "run" in sections:
        return sections["run"].iterations
    written = data.get("run", {}).get("iterations") if isinstance(data.get("run"), dict) else None
    return written if isinstance(written, int) and not isinstance(written, bool) else None


def _method_class(data: dict[str, Any], registries: Registries) -> type | None:
    """The registered class of the recipe's method (the default when the slot is left out), or None when it
    names none that is registered: then every slot is required, as before methods declared their slots."""
    node = data.get("method")
    name = node.get("name") if isinstance(node, dict) else BY_NAME["method"].default if node is None else None
    return registries["method"].get(name) if isinstance(name, str) and name in registries["method"] else None


def _check_environment(registries: Registries, name: str, params: Any, data: Any, evals: Any,
                       report_build: bool = True) -> list[str]:
    """Build the environment (its constructor checks its params) and check the splits the recipe uses.

    Environment constructors are cheap by contract (simulators, JVMs and data
    load lazily), so validation can afford one: an impossible parameter or an
    unknown split is reported now instead of failing (or evaluating nothing)
    after hours of training. ``data``/``evals`` are the raw sections, so the
    splits are checked even when other values there have problems.
    """
    where = f"environment[{name}]"
    try:
        env = registries.build("environment", name, params)
    except Exception as exc:  # noqa: BLE001 - whatever the constructor rejects is a recipe problem
        if not report_build:
            return []
        return [f"{where}: {exc}" if isinstance(exc, (ValueError, TypeError))
                else f"{where}: cannot be built ({type(exc).__name__}: {exc})"]
    try:
        splits = list(env.splits())
    except Exception as exc:  # noqa: BLE001
        return [f"{where}: splits() failed ({type(exc).__name__}: {exc})"]
    finally:
        try:
            env.close()
        except Exception:  # noqa: BLE001 - closing a never-used environment must not hide the result
            pass
    problems = []
    data = data if isinstance(data, dict) else {}
    split = data.get("split", "train")
    if data.get("source", "env") == "env" and isinstance(split, str) and split and split not in splits:
        problems.append(f"data.split: {name} has no split {split!r}; choose from {', '.join(splits)}")
    wanted = evals.get("splits") if isinstance(evals, dict) else None
    if isinstance(wanted, list):
        problems += [f"eval.splits: {name} has no split {s!r}; choose from {', '.join(splits)}"
                     for s in wanted if isinstance(s, str) and s and s not in splits]
    return problems


def _check_eval_models(models: list[str], iterations: int) -> list[str]:
    """Caught here, not after hours of training when evaluation asks for weights that will never exist."""
    known = evaluable_models(iterations)
    return [f"eval.models: {m!r} will not exist in a run with run.iterations={iterations}; "
            f"choose from {', '.join(known)}" for m in models if m not in known]


def _check_method_trainer(slots: dict[str, tuple[str, Any]], registries: Registries) -> list[str]:
    """The method's data must reach a trainer that consumes it (caught now, not after behavior initialization)."""
    method = registries["method"].get(slots["method"][0])
    produces = getattr(method, "produces", None)
    if produces not in TRAINER_SLOT:
        return [f"method[{method.name}]: produces {produces!r}, which no trainer slot consumes; a method "
                f"produces one of {', '.join(TRAINER_SLOT)}"]
    return []
