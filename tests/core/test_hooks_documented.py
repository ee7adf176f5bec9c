"""Every hookspec has a section in docs/hooks.md, with its real signature (and no section is stale)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from sand_framework import hookspecs

DOC = Path(__file__).resolve().parents[2] / "docs" / "hooks.md"
HEADING = re.compile(r"^#{2,4}\s+`?(sand_\w+)\(([^)]*)\)`?\s*$", re.MULTILINE)


def hookspec_names() -> list[str]:
    return sorted(name for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
                  if hasattr(fn, "sand_spec"))


def documented() -> dict[str, list[str]]:
    """Hook name -> argument names, from headings like ``### sand_stage_end(context, stage, summary)``."""
    return {m.group(1): [a.strip() for a in m.group(2).split(",") if a.strip()]
            for m in HEADING.finditer(DOC.read_text(encoding="utf-8"))}


def test_hookspecs_are_found():
    names = hookspec_names()
    assert "sand_register_environments" in names and "sand_resolve_model" in names and "sand_run_end" in names


def test_registration_hooks_are_the_declared_kinds():
    """The hookspecs spell out one ``sand_register_<kinds>`` per declared kind, and no other."""
    from sand_framework.components import KINDS

    registration = {n for n in hookspec_names() if n.startswith("sand_register_")}
    assert registration == {k.hook for k in KINDS}


@pytest.mark.parametrize("name", hookspec_names())
def test_hook_is_documented(name):
    docs = documented()
    assert name in docs, f"docs/hooks.md has no section for hook {name!r}; add a heading '### {name}(...)'"
    # a deprecated alias (0.1's `context`) is in the spec so that old plugins load, and in docs only as such
    params = [p for p in inspect.signature(getattr(hookspecs, name)).parameters if p not in hookspecs.DEPRECATED_ARGS]
    assert docs[name] == params, f"docs/hooks.md documents {name}({', '.join(docs[name])}), the spec is {params}"


@pytest.mark.parametrize("name", hookspec_names())
def test_hook_docstrings_say_when_and_what(name):
    """Like pytest's hookspecs: every spec's docstring (what help() shows) documents each argument and the
    rules of the call (when it is called, its order or first-result rule, what a failure does)."""
    fn = getattr(hookspecs, name)
    doc = inspect.getdoc(fn) or ""
    for param in inspect.signature(fn).parameters:
        assert f":param {param}:" in doc, f"{name}'s docstring does not document {param!r}"
    assert "Called" in doc and ("exception" in doc.lower()), f"{name}'s docstring gives no calling rules"


def test_deprecated_arguments_are_warned_about_by_pluggy():
    for name in hookspecs.LIFECYCLE_HOOKS:
        opts = getattr(hookspecs, name).sand_spec
        assert set(opts["warn_on_impl_args"]) == set(hookspecs.DEPRECATED_ARGS), name
    assert "sand_run_end" in hookspecs.LIFECYCLE_HOOKS and len(hookspecs.LIFECYCLE_HOOKS) == 6


def test_no_stale_sections():
    stale = set(documented()) - set(hookspec_names())
    assert not stale, f"docs/hooks.md documents hooks that no longer exist: {sorted(stale)}"
