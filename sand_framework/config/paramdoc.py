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

A setting that cannot change what a stage computes (thread counts, logging,
checkpoint cadence, time-outs, worker counts) says so with a :class:`SpeedOnly`
marker in its ``Annotated`` metadata, with the reason::

    threads: Annotated[int, Ge(0), SpeedOnly("float summation order only")] = 0

Stage fingerprints leave such settings out (:func:`result_settings`), so
editing one neither blocks ``sand run --resume`` nor stops ``sand sweep`` from
reusing a stage; ``sand components`` and ``docs/components.md`` show the mark.
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

@dataclasses.dataclass(frozen=True)
class SpeedOnly:
    """``Annotated`` marker of a setting that does not affect results: what a stage computes is the same
    whatever its value (up to the float rounding noted in ``why``), so stage fingerprints leave it out
    (:func:`result_settings`) and an edit to it never blocks a resume or a reuse.

    Mark a setting only when you can say why its results cannot depend on it; ``why`` says so, and
    ``sand components`` shows it."""

    why: str
    """Why results cannot depend on the setting (one sentence, shown by ``sand components``)."""

    def __post_init__(self) -> None:
        if not isinstance(self.why, str) or not self.why.strip():
            raise ValueError("SpeedOnly(why): say why results cannot depend on the setting")


THREADS = SpeedOnly(
    "the same arithmetic on more or fewer CPU threads; on a CPU a parallel sum may round differently in the last "
    "bits with the count (as it does with 0, the cores free at start-up, which varies by machine and load)")
"""The mark of a CPU thread count (bitwise identical results are promised only with one machine and one count)."""
LOGGING = SpeedOnly("only what is logged or reported, never what is trained or generated")
"""The mark of a logging or tracking setting."""
CHECKPOINTS = SpeedOnly(
    "only when resumable checkpoints are written and which are kept; the trained weights (`final/`, what later "
    "stages read and fingerprint) are the same")
"""The mark of a checkpoint cadence or retention setting."""
FAULTS = SpeedOnly(
    "only how long to wait and how many failures to survive: a failed call is retried or replayed with the same "
    "inputs and seeds, or the run stops; it never gives other results")
"""The mark of a time-out, retry or restart setting."""
ENV_WORKERS = SpeedOnly(
    "only how many processes hold the environments: each episode is replayed and stepped on its own copy, "
    "deterministically, whichever worker holds it")
"""The mark of an environment worker count or placement setting."""
SCHEDULING = SpeedOnly(
    "only how requests are scheduled: each sampled turn carries its own seed, so the episodes are the same in "
    "either mode and at any concurrency (tests/engine/test_async_rollouts.py), up to a batched forward's float rounding")
"""The mark of ``rollout_mode`` and ``max_concurrency`` (docs/scaling.md, "Asynchronous rollouts")."""


def speed_only(tp: Any) -> SpeedOnly | None:
    """The :class:`SpeedOnly` marker in annotation ``tp`` (in its ``Annotated`` metadata, also inside
    ``X | None``), or None."""
    origin = get_origin(tp)
    if origin is Annotated:
        inner, *metadata = get_args(tp)
        found = next((m for m in metadata if isinstance(m, SpeedOnly)), None)
        return found if found is not None else speed_only(inner)
    if origin in (Union, types.UnionType):
        return next((m for m in map(speed_only, get_args(tp)) if m is not None), None)
    return None


@functools.lru_cache(maxsize=None)
def speed_only_fields(cls: type) -> dict[str, str]:
    """``{field: why}`` for the fields of dataclass ``cls`` marked :class:`SpeedOnly` (inherited ones included)."""
    extras = typing.get_type_hints(cls, include_extras=True)
    out = {}
    for f in dataclasses.fields(cls):
        mark = speed_only(extras[f.name])
        if mark is not None:
            out[f.name] = mark.why
    return out


def _value(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return result_settings(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_value(v) for v in value)
    if isinstance(value, dict):
        return {k: _value(v) for k, v in value.items()}
    return value


def result_settings(obj: Any) -> dict[str, Any]:
    """``dataclasses.asdict(obj)`` without the fields marked :class:`SpeedOnly` (nested dataclasses alike):
    the settings of a Params or recipe section that can change what a stage computes."""
    marked = speed_only_fields(type(obj))
    return {f.name: _value(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.name not in marked}


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
    ``choices``, ``help`` and ``speed_only`` (the reason of its :class:`SpeedOnly` marker). A field that is itself a dataclass is followed by its own fields
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
        mark = speed_only(extras[f.name])
        if mark is not None:
            row["speed_only"] = mark.why
        out.append(row)
        if dataclasses.is_dataclass(plain[f.name]):
            out += describe(plain[f.name], f"{prefix}{f.name}.")
    return out
