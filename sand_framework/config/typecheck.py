"""Check plain config values against dataclass field annotations, collecting every problem.

OmegaConf's structured configs stop at the first error; a recipe author wants
all of them at once, with a suggestion for each misspelt key.

Besides the type, a field can carry range constraints with ``typing.Annotated``
and the `annotated-types <https://github.com/annotated-types/annotated-types>`_
markers (the ones pydantic uses)::

    n: Annotated[int, Ge(1)] = 5
    temperature: Annotated[float, Ge(0.0)] = 1.0
    top_p: Annotated[float, Interval(gt=0, le=1)] = 1.0
    splits: Annotated[list[str], MinLen(1)] = ...

and a dataclass can define ``validate(self) -> list[str]`` for checks that
involve several fields (run after the fields passed). ``__post_init__`` may
still raise ``ValueError``; its message becomes one problem.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types as at


def short(value: Any, limit: int = 120) -> str:
    """``repr(value)`` cut to ``limit`` characters: a problem message quotes values, not whole files."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "null"
    if get_origin(tp) is Annotated:
        return _type_name(get_args(tp)[0])
    if get_origin(tp) is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    return getattr(tp, "__name__", str(tp).replace("typing.", ""))


def _constraints(metadata: tuple[Any, ...]) -> list[Any]:
    out = []
    for m in metadata:
        if isinstance(m, at.GroupedMetadata):
            out.extend(m)
        else:
            out.append(m)
    return out


def _as_type_of(bound: Any, value: Any) -> Any:
    """A bound written as the field's number type. ``typing`` caches ``Annotated[float, Ge(0.0)]`` and
    ``Annotated[float, Ge(0)]`` as one object (the bounds compare equal), so which spelling a field holds depends on
    import order; the message must not."""
    if isinstance(value, float) and isinstance(bound, int) and not isinstance(bound, bool):
        return float(bound)
    if isinstance(value, int) and isinstance(bound, float) and bound.is_integer():
        return int(bound)
    return bound


def constraint_problems(value: Any, metadata: tuple[Any, ...], where: str) -> list[str]:
    """Problems of an already well-typed ``value`` with ``annotated_types`` constraints (others are ignored).

    Comparisons are written so that NaN fails every bound.
    """
    problems = []
    b = lambda bound: _as_type_of(bound, value)  # noqa: E731
    for c in _constraints(metadata):
        if isinstance(c, at.Gt) and not value > c.gt:
            problems.append(f"{where}: must be > {b(c.gt)}, got {short(value)}")
        elif isinstance(c, at.Ge) and not value >= c.ge:
            problems.append(f"{where}: must be >= {b(c.ge)}, got {short(value)}")
        elif isinstance(c, at.Lt) and not value < c.lt:
            problems.append(f"{where}: must be < {b(c.lt)}, got {short(value)}")
        elif isinstance(c, at.Le) and not value <= c.le:
            problems.append(f"{where}: must be <= {b(c.le)}, got {short(value)}")
        elif isinstance(c, at.MinLen) and len(value) < c.min_length:
            what = "empty" if len(value) == 0 else f"{len(value)} long"
            problems.append(f"{where}: must have at least {c.min_length} item(s)/character(s), got {what}")
        elif isinstance(c, at.MaxLen) and len(value) > c.max_length:
            problems.append(f"{where}: must have at most {c.max_length} item(s)/character(s), got {len(value)}")
        elif isinstance(c, at.Predicate) and not c.func(value):
            problems.append(f"{where}: {getattr(c.func, '__doc__', None) or 'invalid value'}, got {short(value)}")
    return problems


def check_value(value: Any, tp: Any, where: str) -> list[str]:
    """Problems with ``value`` for annotation ``tp`` (empty list = fine)."""
    origin = get_origin(tp)
    if tp is Any:
        return []
    if origin is Annotated:
        inner, *metadata = get_args(tp)
        return check_value(value, inner, where) or constraint_problems(value, tuple(metadata), where)
    if origin in (Union, types.UnionType):
        options = get_args(tp)
        found = [check_value(value, o, where) for o in options]
        if any(not f for f in found):
            return []
        for o, f in zip(options, found):  # the right type but out of range: say which range
            if get_origin(o) is Annotated and not check_value(value, get_args(o)[0], where):
                return f
        return [f"{where}: expected {' or '.join(_type_name(o) for o in options)}, got {short(value)}"]
    if origin is Literal:
        ok = any(type(value) is type(a) and value == a for a in get_args(tp))
        return [] if ok else [f"{where}: must be one of {_type_name(tp)}, got {short(value)}"]
    if tp is type(None):
        return [] if value is None else [f"{where}: expected null, got {short(value)}"]
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return [f"{where}: expected a list, got {short(value)}"]
        (inner, *_) = get_args(tp) or (Any,)
        return [p for i, v in enumerate(value) for p in check_value(v, inner, f"{where}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: expected a mapping, got {short(value)}"]
        return [f"{where}: keys must be strings, got {short(k)}" for k in value if not isinstance(k, str)]
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            return [f"{where}: expected a mapping, got {short(value)}"]
        return check_fields(value, tp, where)
    if tp is bool:
        return [] if isinstance(value, bool) else [f"{where}: expected true/false, got {short(value)}"]
    if tp is float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return [f"{where}: expected a number, got {short(value)}"]
        try:
            finite = math.isfinite(value)
        except OverflowError:  # an int too large for a float
            finite = False
        return [] if finite else [f"{where}: expected a finite number, got {short(value)}"]
    if tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return [] if ok else [f"{where}: expected an integer, got {short(value)}"]
    if tp is str:
        return [] if isinstance(value, str) else [f"{where}: expected a string, got {short(value)}"]
    return []


def hints(cls: type) -> dict[str, Any]:
    """Field annotations of ``cls`` with their ``Annotated`` constraints kept."""
    return typing.get_type_hints(cls, include_extras=True)


def check_fields(values: dict[str, Any], cls: type, where: str, ignore: tuple[str, ...] = ()) -> list[str]:
    """Unknown keys (with suggestions) and wrongly typed values of a mapping meant for dataclass ``cls``."""
    types_ = hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    problems = []
    for key, value in values.items():
        if key in ignore:
            continue
        if not isinstance(key, str):
            problems.append(f"{where}: key {short(key)} is not a name (string); "
                            f"valid keys: {', '.join(sorted(fields))}")
            continue
        if key not in fields:
            close = difflib.get_close_matches(key[:100], list(fields), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            shown = key if len(key) <= 100 else short(key, 100)
            problems.append(f"{where}.{shown}: unknown key{hint}; valid keys: {', '.join(sorted(fields)) or '(none)'}")
            continue
        problems += check_value(value, types_[key], f"{where}.{key}")
    return problems


def build(cls: type, values: dict[str, Any]) -> Any:
    """Instantiate dataclass ``cls`` from a checked mapping, recursing into nested dataclasses."""
    types_ = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in values:
            continue
        v, tp = values[f.name], types_[f.name]
        if dataclasses.is_dataclass(tp) and isinstance(v, dict):
            v = build(tp, v)
        kwargs[f.name] = v
    return cls(**kwargs)


def instance_problems(obj: Any, where: str, given: Any = ()) -> list[str]:
    """Problems a built dataclass reports about itself: its defaults' ranges and its ``validate()`` (if any).

    The fields not in ``given`` (the defaults) are checked against their
    constraints, so a default out of its own range is caught by the first
    recipe that uses it rather than by a run.
    """
    problems = []
    types_, plain = hints(type(obj)), typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        if f.name not in given and not dataclasses.is_dataclass(plain[f.name]):
            problems += check_value(getattr(obj, f.name), types_[f.name], f"{where}.{f.name}")
    check = getattr(obj, "validate", None)
    if problems or not callable(check):
        return problems
    try:
        found = check() or []
    except Exception as exc:  # noqa: BLE001 - a component's own check failing is that component's problem
        return [f"{where}: its validate() failed ({type(exc).__name__}: {exc})"]
    found = [found] if isinstance(found, str) else list(found)
    return [p if isinstance(p, str) and p.startswith(where) else f"{where}: {p}" for p in found]


def _bound(value: Any) -> Any:
    """A bound as shown, whole numbers without a fraction: ``typing`` caches ``Annotated[float, Ge(0.0)]`` and
    ``Annotated[float, Ge(0)]`` as one object (see :func:`_as_type_of`), and which spelling an annotation gets when
    ``get_type_hints`` evaluates it depends on what was evaluated before, so the listing must not show it."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def describe_constraints(tp: Any) -> str:
    """``>= 1``, ``in (0, 1]``, ... for ``sand components``; empty when the field has no constraint."""
    if get_origin(tp) in (Union, types.UnionType):
        return " or ".join(d for d in (describe_constraints(o) for o in get_args(tp)) if d)
    if get_origin(tp) is not Annotated:
        return ""
    symbols = {at.Gt: (">", "gt"), at.Ge: (">=", "ge"), at.Lt: ("<", "lt"), at.Le: ("<=", "le")}
    parts = []
    for c in _constraints(tuple(get_args(tp)[1:])):
        if type(c) in symbols:
            sym, attr = symbols[type(c)]
            parts.append(f"{sym} {_bound(getattr(c, attr))}")
        elif isinstance(c, at.MinLen):
            parts.append(f"at least {c.min_length} long")
    return ", ".join(parts)
