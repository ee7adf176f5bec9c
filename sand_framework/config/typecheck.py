"""Check plain config values against dataclass field annotations, collecting every problem.

OmegaConf's structured configs stop at the first error; a recipe author wants
all of them at once, with a suggestion for each misspelt key.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "null"
    if get_origin(tp) is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    return getattr(tp, "__name__", str(tp).replace("typing.", ""))


def check_value(value: Any, tp: Any, where: str) -> list[str]:
    """Problems with ``value`` for annotation ``tp`` (empty list = fine)."""
    origin = get_origin(tp)
    if tp is Any:
        return []
    if origin in (Union, types.UnionType):
        options = get_args(tp)
        if any(not check_value(value, o, where) for o in options):
            return []
        return [f"{where}: expected {' or '.join(_type_name(o) for o in options)}, got {value!r}"]
    if origin is Literal:
        return [] if value in get_args(tp) else [f"{where}: must be one of {_type_name(tp)}, got {value!r}"]
    if tp is type(None):
        return [] if value is None else [f"{where}: expected null, got {value!r}"]
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return [f"{where}: expected a list, got {value!r}"]
        (inner, *_) = get_args(tp) or (Any,)
        return [p for i, v in enumerate(value) for p in check_value(v, inner, f"{where}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: expected a mapping, got {value!r}"]
        return []
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            return [f"{where}: expected a mapping, got {value!r}"]
        return check_fields(value, tp, where)
    if tp is bool:
        return [] if isinstance(value, bool) else [f"{where}: expected true/false, got {value!r}"]
    if tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return [] if ok else [f"{where}: expected a number, got {value!r}"]
    if tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return [] if ok else [f"{where}: expected an integer, got {value!r}"]
    if tp is str:
        return [] if isinstance(value, str) else [f"{where}: expected a string, got {value!r}"]
    return []


def check_fields(values: dict[str, Any], cls: type, where: str, ignore: tuple[str, ...] = ()) -> list[str]:
    """Unknown keys (with suggestions) and wrongly typed values of a mapping meant for dataclass ``cls``."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    problems = []
    for key, value in values.items():
        if key in ignore:
            continue
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"{where}.{key}: unknown key{hint}; valid keys: {', '.join(sorted(fields)) or '(none)'}")
            continue
        problems += check_value(value, hints[key], f"{where}.{key}")
    return problems


def build(cls: type, values: dict[str, Any]) -> Any:
    """Instantiate dataclass ``cls`` from a checked mapping, recursing into nested dataclasses."""
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in values:
            continue
        v, tp = values[f.name], hints[f.name]
        if dataclasses.is_dataclass(tp) and isinstance(v, dict):
            v = build(tp, v)
        kwargs[f.name] = v
    return cls(**kwargs)
