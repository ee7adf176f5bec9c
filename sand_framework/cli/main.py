"""The ``sand`` command line.

Errors the user can fix (bad recipe, unknown component, missing plugin or
data) print one clear message and exit with the error's code (2 for recipe and
plugin problems) instead of a traceback.
"""

from __future__ import annotations

import dataclasses
import json

import click
import yaml

from sand_framework.cli.common import PLUGINS_DIR, echo_eval, friendly
from sand_framework.cli.plugin_commands import PluginCommands
from sand_framework import CONTRACT_VERSION as _contract, __version__ as _version
from sand_framework.logs import DEFAULT_LEVEL, LEVEL_VAR, LEVELS, configure


@click.group(cls=PluginCommands)
@click.version_option(_version, prog_name="sand-framework",
                      message=f"%(prog)s %(version)s (plugin contract {_contract})")
@click.option("--log-level", type=click.Choice(LEVELS, case_sensitive=False), default=DEFAULT_LEVEL,
              envvar=LEVEL_VAR, show_default=True,
              help=f"Least severe log record (SAND's, plugins', warnings) shown on stderr; a run's run.log keeps "
                   f"info and above (debug too at debug). Same as {LEVEL_VAR}=LEVEL.")
def main(log_level: str) -> None:
    """SAND: train LLM agents to deliberate before acting, with pluggable components."""
    configure(log_level)


def recipe_command(fn):
    """``sand NAME RECIPE [k=v ...]``: a command that resolves a recipe with overrides (and may load plugins)."""
    return main.command()(click.argument("recipe")(click.argument("overrides", nargs=-1)(PLUGINS_DIR(friendly(fn)))))


@main.command()
@click.argument("recipe", required=False)
@click.argument("overrides", nargs=-1)
@click.option("--resume", type=click.Path(exists=True, file_okay=False), help="Continue this run directory.")
@click.option("--run-dir", type=click.Path(file_okay=False), help="Create the run here instead of run.output_dir/NAME-STAMP.")
@click.option("--redo-from", metavar="STAGE",
              help="With --resume: discard STAGE (expert, train/iterK, synth/iterK, eval) and every stage after it, "
                   "then compute them again (what to do when the recipe or inputs changed under a finished stage).")
@click.option("--rebuild-weights", is_flag=True,
              help="With --resume: train the SFT start (train/iter0) of a run exported without weights again, "
                   "keeping every result, so that arms reusing it can run on this machine.")
@click.option("--until", metavar="STAGE",
              help="Compute up to and including STAGE (expert, train/iterK, synth/iterK, eval) of the run, then stop; "
                   "`sand run --resume` goes on from there.")
@PLUGINS_DIR
@friendly
def run(recipe, overrides, resume, run_dir, redo_from, rebuild_weights, until, plugin_dirs):
    """Run RECIPE (a path or a bundled name like `quickstart`) with key=value OVERRIDES."""
    from sand_framework.app.runner import run as run_recipe

    if recipe and "=" in recipe and resume:  # `sand run --resume DIR` may be followed by nothing else
        overrides = (recipe, *overrides)
        recipe = None
    metrics, path = run_recipe(recipe, list(overrides), list(plugin_dirs), resume, run_dir, redo_from,
                               rebuild_weights, until)
    if metrics is not None:  # None: stopped after --until STAGE, as it said
        echo_eval(metrics, path)


FOR_ANOTHER_MACHINE = click.option(
    "--for-another-machine", is_flag=True,
    help="Check only the recipe: what this machine lacks to run it (a component's package, a data file or local "
         "model folder that is not here, GPUs) is listed but does not fail.")


@recipe_command
@FOR_ANOTHER_MACHINE
def validate(recipe, overrides, for_another_machine, plugin_dirs):
    """Check RECIPE and report every problem at once.

    Exit 2: the recipe (or an input file it names) is wrong. Exit 4: the recipe is valid but this machine lacks
    what running it needs (packages, the data file, a local model folder, GPUs), listed as such; with
    --for-another-machine these are listed and the exit is 0. Also lists the plugin code beyond the built-ins
    that a run of it would load.
    """
    from sand_framework.config.preflight import check
    from sand_framework.app.runner import resolve

    r, plugins, registries = resolve(recipe, list(overrides), list(plugin_dirs))
    found = check(r, registries)
    if found.recipe and found.machine:
        click.echo(f"this machine also lacks {len(found.machine)} thing(s) to run it (not recipe problems):\n"
                   + "\n".join(f"  - {p}" for p in found.machine), err=True)
    found.raise_for(recipe, for_another_machine)
    slots = ", ".join(f"{k}={name}" for k, (name, _) in r.slots.items())
    click.echo(f"ok: {recipe} ({slots})")
    if found.machine:
        click.echo(f"not ready here: this machine lacks {len(found.machine)} thing(s) to run it (checked again "
                   "where it runs):\n" + "\n".join(f"  - {p}" for p in found.machine))
    for note in r.notes:
        click.echo(f"note: {note}")
    extra = [i for i in plugins.info.values() if i.source != "builtin"]
    for info in extra:
        click.echo(f"loads plugin {info.name} ({info.source}, version {info.version}): "
                   f"{plugins.origins.get(info.name) or '?'}")


@recipe_command
def config(recipe, overrides, plugin_dirs):
    """Print the resolved RECIPE (extends and overrides applied, component defaults filled in)."""
    from sand_framework.app.runner import resolve

    r, _, _ = resolve(recipe, list(overrides), list(plugin_dirs))
    for note in r.notes:
        click.echo(f"note: {note}", err=True)  # stdout stays the YAML
    out = {k: dataclasses.asdict(getattr(r, k)) for k in ("run", "model", "data", "eval", "plugins")}
    for kind, (name, params) in r.slots.items():
        out[kind] = {"name": name, **dataclasses.asdict(params)}
    click.echo(yaml.safe_dump(out, sort_keys=False))


@main.command()
@PLUGINS_DIR
@friendly
def plugins(plugin_dirs):
    """List loaded plugins as JSON: name, version, source, hooks and the plugin contracts each declares it
    supports (`sand --version` shows the contract this SAND implements)."""
    from sand_framework.plugins import load_plugins

    ps = load_plugins(dirs=list(plugin_dirs))
    ps.registries()  # surfaces duplicate or malformed registrations
    click.echo(json.dumps([dataclasses.asdict(i) for i in ps.info.values()], indent=2))


# Command groups living in their own modules (sand components, sand data ..., sand env ..., sand report, ...).
# Each module defines a click command or group named ``command``.
COMMAND_MODULES = ("components", "data", "env", "report", "evaluate", "sweep", "plan", "view")


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
