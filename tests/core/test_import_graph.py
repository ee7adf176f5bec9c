"""Imports point down, never in circles, across sand_framework/ and the built-in plugins.

Every import counts: module level, inside functions and under ``TYPE_CHECKING``
(a lazy import is still a dependency; hiding a cycle in a function only moves
where it breaks). Layers, bottom first; a module may import its own layer and
the ones below it:

0. core: the contract (components, hookspecs, lifecycle), data types, store, formats, prompting
1. plugin loading: registry, plugins
2. recipes: config
3. the public rollout layer plugins may import (rollout), ETO data import (eto) and the SAND synthesis pass
   (synthesis) that the built-in `sand` method runs
4. the built-in plugins (sand_builtins)
5. the loop: engine (pipeline, synthesis, expert, evaluation of tasks)
6. the application: app (runner, model evaluation, reuse), and the plugin test kit that drives the loop
   (testing.detectors; the rest of testing is core)
7. what users run: report, sweep, view, cli
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {"sand_framework": ROOT / "sand_framework", "sand_builtins": ROOT / "plugins" / "sand_builtins"}

LAYERS: list[tuple[str, ...]] = [
    ("sand_framework",),  # everything not named below
    ("sand_framework.registry", "sand_framework.plugins"),
    ("sand_framework.config",),
    ("sand_framework.rollout", "sand_framework.eto", "sand_framework.synthesis"),
    ("sand_builtins",),
    ("sand_framework.engine",),
    ("sand_framework.app", "sand_framework.testing.detectors"),
    ("sand_framework.report", "sand_framework.sweep", "sand_framework.view", "sand_framework.cli"),
]


def modules() -> dict[str, Path]:
    found = {}
    for package, root in SOURCES.items():
        for path in root.rglob("*.py"):
            parts = [package, *path.relative_to(root).with_suffix("").parts]
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _known(name: str, known: dict[str, Path]) -> str | None:
    """The module of ours ``name`` refers to (``a.b.func`` -> ``a.b``), or None for a third-party one."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {t for a in node.names if (t := _known(a.name, known))}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(here[: len(here) - node.level + 1] + ([base] if base else []))
            out |= {t for a in node.names if (t := _known(f"{base}.{a.name}", known))}
    out.discard(module)
    return out


def graph() -> dict[str, set[str]]:
    known = modules()
    return {m: imports(m, p, known) for m, p in known.items()}


def layer(module: str) -> int:
    best, depth = 0, -1
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and prefix.count(".") > depth:
                best, depth = i, prefix.count(".")
    return best


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_graph_is_read():
    edges = graph()
    assert "sand_framework.engine.pipeline" in edges["sand_framework.app.runner"]
    assert "sand_framework.rollout" in edges["sand_builtins.executors"]
    assert len(edges) > 100


def test_no_import_cycle():
    assert cycles(graph()) == []


def test_imports_point_down():
    upward = sorted(f"{a} (layer {layer(a)}) imports {b} (layer {layer(b)})"
                    for a, targets in graph().items() for b in targets if layer(b) > layer(a))
    assert upward == [], "\n".join(upward)


@pytest.mark.parametrize("edges, expected", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": set()}, []),
])
def test_cycles_are_found(edges, expected):
    assert cycles(edges) == expected


def test_an_upward_import_is_caught():
    assert layer("sand_framework.hookspecs") < layer("sand_framework.engine.context")
    assert layer("sand_builtins.executors") < layer("sand_framework.engine.pipeline")
    assert layer("sand_framework.engine.evaluation") < layer("sand_framework.app.runner")
