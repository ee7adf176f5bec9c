"""Recipe interpolation: ``${a.b}`` and allowlisted ``${oc.env:NAME}``, resolved once and bounded.

A recipe value may refer to another value of the recipe (``output_dir:
runs/${run.name}``; ``${.key}`` is a sibling, ``${..key}`` one level up) and
read an environment variable with ``${oc.env:NAME}`` or
``${oc.env:NAME,default}`` (OmegaConf's spelling), but only a variable on the
allowlist: :data:`SAFE_ENV` plus the names the user lists in
``$SAND_RECIPE_ENV``. The resolved recipe names the run directory and is
stored in its ``recipe.yaml``, and run directories get copied and shared, so a
recipe able to read any variable could copy a secret
(``${oc.env:AWS_SECRET_ACCESS_KEY}``) into them. There are no other resolvers:
``${name:...}`` is a problem. ``\\${`` is a literal ``${``.

Resolution is bounded: a resolved string is at most :data:`MAX_CHARS`
characters and the resolved recipe at most :data:`MAX_VALUES` values, so
doubling chains (``a1: ${a0}${a0}``, ``a2: ${a1}${a1}``, ...) stop with a
message instead of exhausting memory.
"""

from __future__ import annotations

import copy
import os
import re
from typing import Any

ENV_ALLOW_VAR = "SAND_RECIPE_ENV"
SAFE_ENV: tuple[str, ...] = ("HOME", "USER", "TMPDIR", "ALFWORLD_DATA", "SAND_CACHE")
"""Variables a recipe may always read: locations, never credentials."""
MAX_CHARS = 65_536
MAX_VALUES = 100_000

_TOKEN = re.compile(r"\\\$\{|\$\{([^{}]*)\}")
_KEY = re.compile(r"(\.*)([A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)*)")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

Path_ = tuple[Any, ...]


def allowed_env() -> list[str]:
    extra = [s.strip() for s in os.environ.get(ENV_ALLOW_VAR, "").split(",") if s.strip()]
    return sorted({*SAFE_ENV, *extra})


class _Overflow(Exception):
    pass


class _Dependent(Exception):
    """A reference to a value whose own interpolation failed (already reported once)."""


def _where(path: Path_) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def _count(value: Any) -> int:
    n, stack = 0, [value]
    while stack:
        v = stack.pop()
        n += 1
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return n


class _Resolver:
    def __init__(self, data: dict[str, Any]):
        self.data = data
        self.problems: list[str] = []
        self.memo: dict[Path_, Any] = {}
        self.active: set[Path_] = set()
        self.failed: set[Path_] = set()
        self.budget = MAX_VALUES

    def spend(self, n: int) -> None:
        self.budget -= n
        if self.budget < 0:
            raise _Overflow

    def value_at(self, path: Path_) -> Any:
        if path in self.memo:
            return self.memo[path]
        if path in self.active:
            raise ValueError(f"${{{'.'.join(map(str, path))}}} refers to itself (a cycle of interpolations)")
        node: Any = self.data
        for key in path:
            if isinstance(node, dict) and key in node or isinstance(node, list) and isinstance(key, int):
                node = node[key]
            else:
                raise ValueError(f"the recipe has no value {'.'.join(map(str, path))!r}")
        self.active.add(path)
        try:
            value = self.tree(node, path)
        finally:
            self.active.discard(path)
        self.memo[path] = value
        return value

    def tree(self, value: Any, path: Path_) -> Any:
        self.spend(1)
        if isinstance(value, dict):
            return {k: self.value_at((*path, k)) for k in value}
        if isinstance(value, list):
            return [self.value_at((*path, i)) for i in range(len(value))]
        if isinstance(value, str) and "${" in value:
            try:
                return self.string(value, path)
            except _Dependent:
                self.failed.add(path)
            except ValueError as exc:
                self.failed.add(path)
                self.problems.append(f"{_where(path)}: interpolation in {value[:120]!r}: {exc}")
        return value

    def string(self, text: str, path: Path_) -> Any:
        whole = _TOKEN.fullmatch(text)
        if whole and whole.group(1) is not None:
            value = self.token(whole.group(1), path)
            if isinstance(value, (dict, list)):
                self.spend(_count(value))
                return copy.deepcopy(value)
            return value
        parts, pos = [], 0
        for m in _TOKEN.finditer(text):
            parts.append(self.literal(text[pos:m.start()]))
            pos = m.end()
            if m.group(1) is None:
                parts.append("${")
                continue
            value = self.token(m.group(1), path)
            if isinstance(value, (dict, list)):
                raise ValueError(f"${{{m.group(1)}}} is a {type(value).__name__}, which cannot be part of a string")
            parts.append("null" if value is None else str(value).lower() if isinstance(value, bool) else str(value))
            if sum(map(len, parts)) > MAX_CHARS:
                raise ValueError(f"it expands to more than {MAX_CHARS:,} characters")
        parts.append(self.literal(text[pos:]))
        return "".join(parts)

    @staticmethod
    def literal(segment: str) -> str:
        if "${" in segment:
            raise ValueError("unterminated or nested '${'; write a literal '${' as '\\${'")
        return segment

    def token(self, body: str, path: Path_) -> Any:
        body = body.strip()
        if ":" in body:
            resolver, _, arg = body.partition(":")
            if resolver.strip() != "oc.env":
                raise ValueError(f"unknown resolver {resolver.strip()!r}; a recipe may use only ${{key.path}} and "
                                 "${oc.env:NAME}")
            name, comma, default = arg.partition(",")
            name = name.strip()
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an environment variable name")
            if name not in allowed_env():
                raise ValueError(
                    f"environment variable {name!r} is not on the allowlist ({', '.join(allowed_env())}). The "
                    f"resolved value is written to the run directory's recipe.yaml (and may name the directory), so "
                    f"recipes read only listed variables. If {name} holds no secret, allow it with "
                    f"{ENV_ALLOW_VAR}={name}; a secret never belongs in a recipe (components read credentials "
                    "from the environment themselves, e.g. policy.api_key_env names the variable)")
            if name in os.environ:
                return os.environ[name]
            if comma:
                return default.strip()
            raise ValueError(f"environment variable {name!r} is not set (give a default: ${{oc.env:{name},DEFAULT}})")
        m = _KEY.fullmatch(body)
        if m is None:
            raise ValueError(f"${{{body}}} is not a key path like ${{run.name}}")
        dots, dotted = m.groups()
        keys = tuple(dotted.split("."))
        if dots:
            container = tuple(path[:-1])
            up = len(dots) - 1
            if up > len(container):
                raise ValueError(f"${{{body}}} goes above the top of the recipe")
            target = (*container[:len(container) - up], *keys)
        else:
            target = keys
        if target in self.failed:
            raise _Dependent
        return self.value_at(target)


def resolve(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The recipe with every interpolation resolved, and the problems found (the recipe unchanged if any)."""
    if not _has_interpolation(data):
        return data, []
    r = _Resolver(data)
    try:
        out = r.value_at(())
    except _Overflow:
        return data, [f"interpolation: the recipe expands to more than {MAX_VALUES:,} values; "
                      "refer to sections with ${...} less often"]
    except ValueError as exc:  # a cycle through the top level
        return data, [f"interpolation: {exc}"]
    return (data, r.problems) if r.problems else (out, [])


def _has_interpolation(value: Any) -> bool:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, str) and "${" in v:
            return True
    return False
