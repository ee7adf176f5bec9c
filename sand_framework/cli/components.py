"""``sand components [KIND]``: the registered components and their parameters (default, range or choices, help).

The text is laid out the same on a terminal and in a pipe, one block per
component with nothing cut to a width: names stay whole for ``grep``, and
long parameter lists are left to the terminal to wrap. ``--json`` is the
machine-readable form.
"""

from __future__ import annotations

import difflib
import json
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
    """Each field of a Params dataclass: name, type, default and, where declared, range, choices, help and
    speed_only (:func:`sand_framework.config.paramdoc.describe`)."""
    from sand_framework.config.paramdoc import describe

    return describe(cls)


def param_line(p: dict[str, Any]) -> str:
    """``name=default  (range)  one of: a, b  help  [speed only: why]``: one parameter of the listing (the last
    part for a setting marked :class:`~sand_framework.config.paramdoc.SpeedOnly`, which stage fingerprints leave
    out)."""
    parts = [f"{p['name']}={p['default']!r}"]
    if "range" in p:
        parts.append(f"({p['range']})")
    if "choices" in p:
        parts.append("one of: " + ", ".join(repr(c) for c in p["choices"]))
    if "help" in p:
        parts.append(p["help"])
    if "speed_only" in p:
        parts.append(f"[{speed_only_text(p['speed_only'])}]")
    return "  ".join(parts)


def speed_only_text(why: str) -> str:
    """How ``sand components`` and docs/components.md mark a speed-only setting."""
    return f"speed only, not fingerprinted: {why}"


def as_text(kinds: list[str], rows: list[dict[str, Any]]) -> str:
    """The listing: per kind, each component's name and description, its parameters (default, range or
    choices, help), its plugin."""
    width = max((len(r["name"]) for r in rows), default=0)
    indent = " " * (width + 4)
    lines: list[str] = []
    for kind in kinds:
        lines.append(click.style(kind, bold=True))
        group = [r for r in rows if r["kind"] == kind]
        for r in group:
            lines.append(f"  {r['name']:<{width}}  {r['description'] or ''}".rstrip())
            if r["params"]:
                lines += [f"{indent}params:", *(f"{indent}  {param_line(p)}" for p in r["params"])]
            else:
                lines.append(f"{indent}params: none")
            lines.append(f"{indent}plugin: {r['plugin']}")
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
