"""``sand components [KIND]``: the registered components, their parameters and defaults.

The text is laid out the same on a terminal and in a pipe, one block per
component with nothing cut to a width: names stay whole for ``grep``, and
long parameter lists are left to the terminal to wrap. ``--json`` is the
machine-readable form.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import typing
from typing import Any

import click

from sand_framework.cli.common import PLUGINS_DIR, friendly


def kind_of(word: str) -> str:
    """The kind a user typed, singular (``environment``) or plural (``environments``, the hook's spelling)."""
    from sand_framework.components import KINDS, SLOTS
    from sand_framework.components.declared import kind_named

    kind = kind_named(word)
    if kind is not None:
        return kind.name
    close = difflib.get_close_matches(word, [*SLOTS, *(k.plural for k in KINDS)], n=1)
    raise click.BadParameter(f"unknown kind {word!r}{f' (did you mean {close[0]!r}?)' if close else ''}; "
                             f"kinds: {', '.join(SLOTS)} (or their plurals)", param_hint="KIND")


def params_doc(cls: type) -> list[dict[str, Any]]:
    """Each field of a Params dataclass: name, type, default and, where it has one, its allowed range."""
    from sand_framework.config.typecheck import describe_constraints

    hints = typing.get_type_hints(cls)
    extras = typing.get_type_hints(cls, include_extras=True)
    out = []
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        tp = hints[f.name]
        name = tp.__name__ if isinstance(tp, type) else str(tp).replace("typing.", "")
        row = {"name": f.name, "type": name, "default": default}
        allowed = describe_constraints(extras[f.name])
        if allowed:
            row["range"] = allowed
        out.append(row)
    return out


def as_text(kinds: list[str], rows: list[dict[str, Any]]) -> str:
    """The listing: per kind, each component's name and description, its parameters' defaults, its plugin."""
    width = max((len(r["name"]) for r in rows), default=0)
    indent = " " * (width + 4)
    lines: list[str] = []
    for kind in kinds:
        lines.append(click.style(kind, bold=True))
        group = [r for r in rows if r["kind"] == kind]
        for r in group:
            params = ", ".join(f"{p['name']}={p['default']!r}" for p in r["params"]) or "none"
            lines += [f"  {r['name']:<{width}}  {r['description'] or ''}".rstrip(),
                      f"{indent}params: {params}", f"{indent}plugin: {r['plugin']}"]
        if not group:
            lines.append("  (none registered)")
        lines.append("")
    return "\n".join(lines[:-1])


@click.command("components")
@click.argument("kind", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@PLUGINS_DIR
@friendly
def command(kind, as_json, plugin_dirs):
    """List registered components (of one KIND, e.g. detector or detectors) with their parameters."""
    from sand_framework.components import SLOTS
    from sand_framework.plugins import load_plugins

    kinds = [kind_of(kind)] if kind is not None else list(SLOTS)
    regs = load_plugins(dirs=list(plugin_dirs)).registries()
    rows = []
    for k in kinds:
        for name in regs[k].names():
            e = regs[k].entries[name]
            rows.append({"kind": k, "name": name, "plugin": e.plugin, "description": e.cls.description,
                         "params": params_doc(e.cls.Params)})
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
    else:
        click.echo(as_text(kinds, rows))
