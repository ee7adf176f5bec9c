"""``sand data``: make expert trajectory files.

* ``sand data import-eto FILE --env ENV -o OUT`` converts ETO's ShareGPT
  expert files (``alfworld_sft.json``, ``sciworld_sft.json``,
  ``webshop_sft.json``) to this framework's task ids.
* ``sand data expert --env ENV --split SPLIT -o OUT`` runs the environment's
  own expert, optionally with thoughts written by a model.

Both write the same two files: ``OUT`` (ETO-layout ShareGPT JSON, ``id`` =
the environment's task id; a recipe reads it with ``data.source: sharegpt``)
and ``OUT``'s stem + ``.trajectories.jsonl`` (one ``Trajectory.to_dict()``
per line, keeping reward, success and ``meta``: ETO's id and extra fields).

Preference pairs made elsewhere (:mod:`sand_framework.pairs`):

* ``sand data import-pairs FILE --env ENV -o OUT`` reads a TRL conversational
  preference JSONL file or ETO's ``construct_preference.py`` output and writes
  TRL JSON lines with the environment's task ids (what the ``pairs_file``
  method trains on);
* ``sand data check-pairs FILE`` reads one and reports what it holds (JSON),
  exit 2 with the record named when it is malformed or empty.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from sand_framework.cli.common import PLUGINS_DIR, build_environment, friendly, params_dict
from sand_framework.errors import SandError
from sand_framework.eto import import_eto
from sand_framework.formats import write_trajectory_files as write_outputs

if TYPE_CHECKING:
    from sand_framework.registry import Registries


class DataError(SandError):
    exit_code = 2


def _environment(name: str, base: dict[str, Any], sets: tuple[str, ...], registries: Registries):
    """The environment ``name``: ``base`` parameters (a recipe's) updated by the ``--set key=value`` items."""
    from sand_framework.config.load import parse_overrides

    return build_environment(registries, name, {**base, **parse_overrides(list(sets))})


def _report(problems: list[str], shown: int = 10) -> None:
    for p in problems[:shown]:
        click.echo(f"warning: {p}", err=True)
    if len(problems) > shown:
        click.echo(f"warning: ... and {len(problems) - shown} more", err=True)


@click.group(name="data")
def command() -> None:
    """Make expert trajectory files (ETO import, environment experts) and import or check preference-pair files."""


@command.command("import-eto")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--env", "env_name", required=True, help="Environment the trajectories belong to (alfworld, scienceworld, webshop, ...).")
@click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False),
              help="ShareGPT JSON to write; OUT's stem + .trajectories.jsonl is written next to it.")
@click.option("--set", "env_sets", multiple=True, metavar="KEY=VALUE", help="Environment parameter (repeatable).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Import at most this many records.")
@click.option("--verify/--no-verify", default=False, help="Replay each trajectory in the environment (needs it installed).")
@PLUGINS_DIR
@friendly
def import_eto_cmd(file, env_name, out, env_sets, limit, verify, plugin_dirs):
    """Convert ETO expert FILE (ShareGPT JSON) to this framework's task ids."""
    from sand_framework.plugins import load_plugins

    env = _environment(env_name, {}, env_sets, load_plugins(dirs=list(plugin_dirs)).registries())
    try:
        trajs, problems = import_eto(file, env, limit=limit, verify=verify)
    finally:
        env.close()
    _report(problems)
    if not trajs:
        raise DataError(f"{file}: no trajectory could be imported for environment {env_name!r}")
    sharegpt, side = write_outputs(out, trajs)
    click.echo(f"imported {len(trajs)} trajectories ({len(problems)} skipped) -> {sharegpt}, {side}")


# --------------------------------------------------------------------------- preference pairs

PAIR_FORMATS = click.Choice(["auto", "trl", "eto"])


def _pair_summary(file: str, found: Any) -> dict[str, Any]:
    pairs = found.pairs
    return {"file": file, "format": found.format, "pairs": len(pairs),
            "tasks": len({p.prompt.task_id for p in pairs}),
            "step_level_pairs": sum(1 for p in pairs if p.prompt.steps),
            "chosen_steps": sum(len(p.chosen) for p in pairs), "rejected_steps": sum(len(p.rejected) for p in pairs),
            "notes": len(found.notes)}


@command.command("import-pairs")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--env", "env_name", required=True, help="Environment the pairs belong to: ETO ids are mapped to its task ids.")
@click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False),
              help="TRL conversational preference JSON lines to write (with each pair's task id and rewards).")
@click.option("--format", "fmt", type=PAIR_FORMATS, default="auto", show_default=True,
              help="trl (JSON lines), eto (construct_preference.py's JSON list), or auto (a file opening with '[' is ETO's).")
@click.option("--set", "env_sets", multiple=True, metavar="KEY=VALUE", help="Environment parameter (repeatable).")
@PLUGINS_DIR
@friendly
def import_pairs_cmd(file, env_name, out, fmt, env_sets, plugin_dirs):
    """Convert preference-pair FILE (TRL JSONL or ETO's pair JSON) to TRL JSON lines with ENV's task ids."""
    from sand_framework.pairs import read_preference_pairs, write_preference_pairs
    from sand_framework.plugins import load_plugins

    env = _environment(env_name, {}, env_sets, load_plugins(dirs=list(plugin_dirs)).registries())
    try:
        found = read_preference_pairs(file, env.name, fmt, map_eto_id=env.task_id_from_eto)
    finally:
        env.close()
    _report(found.notes)
    write_preference_pairs(out, found.pairs)
    click.echo(f"imported {len(found.pairs)} preference pairs ({found.format}, {len(found.notes)} note(s)) -> {out}")


@command.command("check-pairs")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--format", "fmt", type=PAIR_FORMATS, default="auto", show_default=True,
              help="trl (JSON lines), eto (construct_preference.py's JSON list), or auto.")
@friendly
def check_pairs_cmd(file, fmt):
    """Read preference-pair FILE and print what it holds (JSON); exit 2 naming the record if it is malformed."""
    import json

    from sand_framework.pairs import read_preference_pairs

    found = read_preference_pairs(file, "", fmt)
    _report(found.notes)
    click.echo(json.dumps(_pair_summary(file, found), indent=2))


# --------------------------------------------------------------------------- expert


@command.command("expert")
@click.option("--env", "env_name", default=None, help="Environment name (default: the recipe's).")
@click.option("--split", default="train", show_default=True)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="First K tasks of the split.")
@click.option("--recipe", default=None, help="Take environment, policy and model settings from this recipe.")
@click.option("--set", "env_sets", multiple=True, metavar="KEY=VALUE", help="Environment parameter (repeatable).")
@click.option("--thoughts-model", default=None, help="Have this model (alias, path or hub id) write each step's thought.")
@click.option("--policy", "policy_name", default=None, help="Policy component for --thoughts-model (default: the recipe's, else transformers).")
@click.option("--keep-failed", is_flag=True, help="Also write trajectories where the expert did not succeed.")
@click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False))
@PLUGINS_DIR
@friendly
def expert_cmd(env_name, split, limit, recipe, env_sets, thoughts_model, policy_name, keep_failed, out, plugin_dirs):
    """Expert trajectories from the environment's own expert (the environment's short grounded thoughts, Environment.expert_thought; --thoughts-model has a model write them)."""
    from sand_framework.engine.context import cache_dir
    from sand_framework.engine.expert import expert_trajectory, write_thoughts
    from sand_framework.plugins import load_plugins

    env_params: dict[str, Any] = {}
    policy_params: dict[str, Any] = {}
    modules: list[str] = []
    dirs = list(plugin_dirs)
    if recipe:
        from sand_framework.app.runner import resolve

        r, _, _ = resolve(recipe, [], dirs)
        modules, dirs = list(r.plugins.modules), dirs + list(r.plugins.dirs)
        rname, rparams = r.slots["environment"]
        if env_name in (None, rname):
            env_name, env_params = rname, params_dict(rparams)
        pname, pparams = r.slots["policy"]
        if policy_name in (None, pname):
            policy_name, policy_params = pname, params_dict(pparams)
    if env_name is None:
        raise DataError("give --env or --recipe")
    plugins = load_plugins(modules, dirs)
    regs = plugins.registries()
    env = _environment(env_name, env_params, env_sets, regs)
    try:
        if split not in (known := env.splits()):
            raise click.BadParameter(f"{env.name} has no split {split!r}; choose from {', '.join(known)}",
                                     param_hint="--split")
        task_ids = env.tasks(split)[:limit]
        trajs, failed = [], []
        for tid in task_ids:
            t = expert_trajectory(env, tid)
            (trajs if t.success else failed).append(t)
        if keep_failed:
            order = {tid: i for i, tid in enumerate(task_ids)}
            trajs = sorted(trajs + failed, key=lambda t: order[t.task_id])
    finally:
        env.close()
    if failed:
        click.echo(f"warning: the expert failed on {len(failed)} of {len(task_ids)} tasks"
                   f"{'' if keep_failed else ' (not written)'}: {', '.join(t.task_id for t in failed[:5])}", err=True)
    if thoughts_model:
        policy = regs.build("policy", policy_name or "transformers", policy_params or None)
        try:
            policy.setup(plugins.resolve_model(thoughts_model, cache_dir()))
            write_thoughts(trajs, policy)
        finally:
            policy.close()
    if not trajs:
        raise DataError(f"no expert trajectory succeeded on {env_name}/{split}")
    sharegpt, side = write_outputs(out, trajs)
    click.echo(f"wrote {len(trajs)} expert trajectories -> {sharegpt}, {side}")


if __name__ == "__main__":  # pragma: no cover
    command(sys.argv[1:])
