"""What a ``Params`` dataclass declares about each field, for people: type, default, range, choices and help.

A component parameter is declared once, in its component's ``Params``::

    n: Annotated[int, Interval(ge=1, le=100)] = 5
    \"\"\"Actions sampled per step (the paper: 5); at most 100.\"\"\"
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    \"\"\"Weights dtype ...\"\"\"

The type, the default, the range (``Annotated`` with annotated-types markers)
and the choices (``Literal``) are what :mod:`~sand_framework.config.typecheck`
checks; the help text is the string literal right under the field (an
attribute docstring, as Sphinx and PEP 257 read them), found here in the
class's source with :mod:`ast`. ``sand components`` and ``docs/components.md``
(``scripts/components_doc.py``) show all of it; nothing else lists them again.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import re
import textwrap
import types
import typing
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from sand_framework.config.typecheck import describe_constraints

_ROLE = re.compile(r":[a-z]+:`(~?)([^`]+)`")


def _plain(doc: str) -> str:
    """One line of text from a docstring: ``x`` becomes `x`, a reST role its target (``:func:`~a.b``` -> `b`)."""
    text = _ROLE.sub(lambda m: f"`{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}`", doc)
    return " ".join(text.replace("``", "`").split())


def _own_docs(klass: type) -> dict[str, str]:
    """Attribute docstrings of the fields ``klass`` itself declares (empty when its source is not available)."""
    try:
        source = textwrap.dedent(inspect.getsource(klass))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError, IndentationError):
        return {}
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef)), None)
    if node is None:
        return {}
    out = {}
    for first, second in zip(node.body, node.body[1:]):
        if (isinstance(first, ast.AnnAssign) and isinstance(first.target, ast.Name)
                and isinstance(second, ast.Expr) and isinstance(second.value, ast.Constant)
                and isinstance(second.value.value, str)):
            out[first.target.id] = _plain(inspect.cleandoc(second.value.value))
    return out


@functools.lru_cache(maxsize=None)
def field_help(cls: type) -> dict[str, str]:
    """``{field: help}`` for the fields of dataclass ``cls`` that have a docstring (inherited ones included)."""
    found: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is not object and dataclasses.is_dataclass(klass):
            found.update(_own_docs(klass))
    return {f.name: found[f.name] for f in dataclasses.fields(cls) if f.name in found}


def choices(tp: Any) -> list[Any] | None:
    """The values a ``Literal`` annotation allows (through ``Annotated`` and ``| None``); None when not a choice."""
    origin = get_origin(tp)
    if origin is Annotated:
        return choices(get_args(tp)[0])
    if origin is Literal:
        return list(get_args(tp))
    if origin in (Union, types.UnionType):
        found = [c for a in get_args(tp) if a is not type(None) for c in (choices(a) or [])]
        return found or None
    return None


def _type_name(tp: Any) -> str:
    return tp.__name__ if isinstance(tp, type) else str(tp).replace("typing.", "")


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return None
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value


def describe(cls: type, prefix: str = "") -> list[dict[str, Any]]:
    """Each field of a Params dataclass: ``name``, ``type``, ``default`` and, where declared, ``range``,
    ``choices`` and ``help``. A field that is itself a dataclass is followed by its own fields
    (``launch.num_processes``), the key a recipe or an override uses."""
    plain = typing.get_type_hints(cls)
    extras = typing.get_type_hints(cls, include_extras=True)
    helps = field_help(cls)
    out = []
    for f in dataclasses.fields(cls):
        row: dict[str, Any] = {"name": prefix + f.name, "type": _type_name(plain[f.name]), "default": _default(f)}
        allowed = describe_constraints(extras[f.name])
        if allowed:
            row["range"] = allowed
        options = choices(extras[f.name])
        if options is not None:
            row["choices"] = options
        if f.name in helps:
            row["help"] = helps[f.name]
        out.append(row)
        if dataclasses.is_dataclass(plain[f.name]):
            out += describe(plain[f.name], f"{prefix}{f.name}.")
    return out
