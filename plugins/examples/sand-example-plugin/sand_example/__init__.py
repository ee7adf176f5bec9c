"""Example SAND plugin: a light-switch puzzle environment, a majority-margin detector and an iteration method.

SAND finds this module through the ``sand`` entry-point group declared in
``pyproject.toml`` and calls the ``@hookimpl`` functions below once at
start-up (``sand_add_commands`` only when ``sand`` is asked for a command it does not have, here ``sand lights``). Nothing else is needed: no change to SAND, no import of this
package anywhere.
"""

from __future__ import annotations

import click

from sand_framework import hookimpl

from sand_example.detectors import MajorityMarginDetector
from sand_example.lights import LightSwitchesEnv
from sand_example.methods import SuccessfulReplayMethod

__version__ = "0.2.0"

sand_contract = ">=0.3,<0.4"
"""The SAND plugin contracts this plugin is written for (``sand_framework.CONTRACT_VERSION``); SAND refuses to
load it under another one, naming both. The package's dependency says the same to pip."""


@hookimpl
def sand_register_environments(register):
    register(LightSwitchesEnv)


@hookimpl
def sand_register_detectors(register):
    register(MajorityMarginDetector)


@hookimpl
def sand_register_methods(register):
    register(SuccessfulReplayMethod)


@hookimpl
def sand_add_commands(cli):
    @cli.command(name="lights")
    @click.option("--split", default="train", show_default=True, help="train, seen or unseen.")
    @click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many puzzles.")
    def lights(split, limit):
        """List the light-switch puzzles of a split with their shortest solutions (a command added by a plugin)."""
        env = LightSwitchesEnv()
        if split not in env.splits():
            raise click.BadParameter(f"{split!r} is not a split; use one of {', '.join(env.splits())}",
                                     param_hint="--split")
        for task in env.tasks(split)[:limit]:
            click.echo(f"{task}: {' -> '.join(env.expert_actions(task))}")


__all__ = ["LightSwitchesEnv", "MajorityMarginDetector", "SuccessfulReplayMethod", "__version__"]
