"""The ``sand`` command line.

Errors the user can fix (bad recipe, unknown component, missing plugin or
data) print one clear message and exit with the error's code (2 for recipe and
plugin problems) instead of a traceback.
"""

from __future__ import annotations

import dataclasses
import json
import typing

import click
import yaml

from sand_framework.cli.common import PLUGINS_DIR, friendly


@click.group()
@click.version_option(package_name="sand-framework")
def main() -> None:
    """SAND: train LLM agents to deliberate before acting, with pluggable components."""


@main.command()
@click.argument("recipe", required=False)
@click.argument("overrides", nargs=-1)
@click.option("--resume", type=click.Path(exists=True, file_okay=False), help="Continue this run directory.")
@click.option("--run-dir", type=click.Path(file_okay=False), help="Create the run here instead of run.output_dir/NAME-STAMP.")
@PLUGINS_DIR
@friendly
def run(recipe, overrides, resume, run_dir, plugin_dirs):
    """Run RECIPE (a path or a bundled name like `quickstart`) with key=value OVERRIDES."""
    from sand_framework.engine.runner import run as run_recipe

    if recipe and "=" in recipe and resume:  # `sand run --resume DIR` may be followed by nothing else
        overrides = (recipe, *overrides)
        recipe = None
    metrics, path = run_recipe(recipe, list(overrides), list(plugin_dirs), resume, run_dir)
    click.echo(json.dumps(metrics["eval"], indent=2))
    click.echo(f"metrics: {path / 'metrics.json'}")


@main.command()
@click.argument("recipe")
@click.argument("overrides", nargs=-1)
@PLUGINS_DIR
@friendly
def validate(recipe, overrides, plugin_dirs):
    """Check RECIPE and report every problem at once (exit 2 if any).

    Also checks what the recipe points at (its data file, a local model folder) and lists the plugin code
    beyond the built-ins that a run of it would load.
    """
    from sand_framework.config.preflight import preflight
    from sand_framework.engine.runner import resolve
    from sand_framework.errors import RecipeError

    r, plugins, _ = resolve(recipe, list(overrides), list(plugin_dirs))
    problems = preflight(r)
    if problems:
        raise RecipeError(problems, recipe)
    slots = ", ".join(f"{k}={name}" for k, (name, _) in r.slots.items())
    click.echo(f"ok: {recipe} ({slots})")
    extra = [i for i in plugins.info.values() if i.source != "builtin"]
    for info in extra:
        click.echo(f"loads plugin {info.name} ({info.source}, version {info.version}): "
                   f"{plugins.origins.get(info.name) or '?'}")


@main.command()
@click.argument("recipe")
@click.argument("overrides", nargs=-1)
@PLUGINS_DIR
@friendly
def config(recipe, overrides, plugin_dirs):
    """Print the resolved RECIPE (extends and overrides applied, component defaults filled in)."""
    from sand_framework.engine.runner import resolve

    r, _, _ = resolve(recipe, list(overrides), list(plugin_dirs))
    out = {k: dataclasses.asdict(getattr(r, k)) for k in ("run", "model", "data", "eval", "plugins")}
    for kind, (name, params) in r.slots.items():
        out[kind] = {"name": name, **dataclasses.asdict(params)}
    click.echo(yaml.safe_dump(out, sort_keys=False))


@main.command()
@PLUGINS_DIR
@friendly
def plugins(plugin_dirs):
    """List loaded plugins as JSON: name, version, source and hooks."""
    from sand_framework.plugins import load_plugins

    ps = load_plugins(dirs=list(plugin_dirs))
    ps.registries()  # surfaces duplicate or malformed registrations
    click.echo(json.dumps([dataclasses.asdict(i) for i in ps.info.values()], indent=2))


def _params_doc(cls: type) -> list[dict]:
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


@main.command()
@click.argument("kind", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@PLUGINS_DIR
@friendly
def components(kind, as_json, plugin_dirs):
    """List registered components (of one KIND, e.g. detector) with their parameters."""
    from sand_framework.hookspecs import KINDS
    from sand_framework.plugins import load_plugins

    if kind is not None and kind not in KINDS:
        import difflib

        close = difflib.get_close_matches(kind, list(KINDS), n=1)
        raise click.BadParameter(f"unknown kind {kind!r}{f' (did you mean {close[0]!r}?)' if close else ''}; "
                                 f"kinds: {', '.join(KINDS)}")
    regs = load_plugins(dirs=list(plugin_dirs)).registries()
    rows = []
    for k in [kind] if kind else list(KINDS):
        for name in regs[k].names():
            e = regs[k].entries[name]
            rows.append({"kind": k, "name": name, "plugin": e.plugin, "description": e.cls.description,
                         "params": _params_doc(e.cls.Params)})
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("kind", "name", "plugin", "params", "description")
    for r in rows:
        params = ", ".join(f"{p['name']}={p['default']!r}" for p in r["params"])
        table.add_row(r["kind"], r["name"], r["plugin"], params, r["description"])
    Console().print(table)


# Command groups living in their own modules (sand data ..., sand env ..., sand report, sand eval).
# Each module defines a click command or group named ``command``.
COMMAND_MODULES = ("data", "env", "report", "evaluate", "sweep")


def _add_command_modules() -> None:
    import importlib
    import importlib.util

    for mod in COMMAND_MODULES:
        name = f"sand_framework.cli.{mod}"
        if importlib.util.find_spec(name) is not None:
            main.add_command(importlib.import_module(name).command)


_add_command_modules()

if __name__ == "__main__":
    main()
