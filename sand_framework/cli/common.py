"""Helpers shared by every ``sand`` command module (kept apart so command modules never import main)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
import traceback
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from sand_framework.config.codegate import ALLOW_FLAG, allow_recipe_plugins
from sand_framework.errors import RecipeError, RunStopped, SandError

if TYPE_CHECKING:
    from sand_framework.registry import Registries

DEBUG_VAR = "SAND_DEBUG"


def _allow(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        allow_recipe_plugins()


_PLUGINS_DIR = click.option("--plugins-dir", "plugin_dirs", multiple=True, type=click.Path(file_okay=False),
                            help="Folder of extra plugin modules (repeatable).")
_ALLOW_RECIPE_PLUGINS = click.option(
    ALLOW_FLAG, is_flag=True, expose_value=False, callback=_allow,
    help="Load the plugin modules and folders the recipe's `plugins:` section names (refused otherwise: a recipe "
         "is data and runs no code by itself). Same as SAND_ALLOW_RECIPE_PLUGINS=1.")


def PLUGINS_DIR(fn):  # noqa: N802 - used as @PLUGINS_DIR like the click option it was
    """``--plugins-dir DIR`` (repeatable) and ``--allow-recipe-plugins``: every way a command can be given code."""
    return _PLUGINS_DIR(_ALLOW_RECIPE_PLUGINS(fn))


def _report_unexpected(exc: BaseException) -> int:
    """One line instead of a traceback for a failure no check anticipated; the traceback goes to a file.

    User-fixable problems all raise :class:`SandError`; anything else is a bug
    in SAND or in a plugin, and the traceback is what its authors need, so it
    is kept (``SAND_DEBUG=1`` prints it instead).
    """
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if os.environ.get(DEBUG_VAR, "") not in ("", "0"):
        click.echo(text, err=True)
        return 1
    where = "(could not be saved)"
    try:
        fd, where = tempfile.mkstemp(prefix="sand-error-", suffix=".txt")
        with os.fdopen(fd, "w") as f:
            f.write(text)
    except OSError:
        pass
    if isinstance(exc, OSError) and exc.filename:
        what = f"{exc.filename}: {exc.strerror or exc}"
    else:
        what = f"{type(exc).__name__}: {str(exc)[:500]}"
    click.echo(f"error: unexpected failure: {what}\nThis is a bug in SAND or in a plugin, not a problem with your "
               f"input. The traceback is in {where} (set {DEBUG_VAR}=1 to print it); please report it.", err=True)
    return 1


def friendly(fn):
    """Turn user-fixable :class:`SandError` failures into one message and the error's exit code.

    Anything else still ends in one line and exit code 1 (see :func:`_report_unexpected`), never a traceback.
    """

    @wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except SandError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except RunStopped as exc:  # SIGTERM / SIGINT during `sand run`: said, and exit 128 + the signal
            click.echo(str(exc), err=True)
            sys.exit(exc.exit_code)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as exc:  # noqa: BLE001 - the last line of defence against a traceback
            sys.exit(_report_unexpected(exc))
    return wrapper


def echo_eval(metrics: dict[str, Any], out_dir: str | Path) -> None:
    """What ``sand run`` and ``sand eval`` print when done: the evaluation as JSON, then where metrics.json is."""
    click.echo(json.dumps(metrics["eval"], indent=2))
    click.echo(f"metrics: {Path(out_dir) / 'metrics.json'}")


def params_dict(params: Any) -> dict[str, Any]:
    """A component's parameters as a plain mapping (``{}`` for a component without a Params dataclass)."""
    return dataclasses.asdict(params) if dataclasses.is_dataclass(params) else dict(params or {})


def build_environment(registries: Registries, name: str, values: dict[str, Any]) -> Any:
    """The environment ``name`` with parameters given on the command line, checked as a recipe's would be.

    Raises :class:`RecipeError` (exit 2) listing every problem: an unknown name (with "did you mean"), a field
    the environment does not have, a value out of range, or one its constructor rejects.
    """
    from sand_framework.config.validate import component_params

    cls = registries["environment"].get(name)
    params, problems = component_params(registries, "environment", name, values)
    if not problems:
        try:
            return cls(params)
        except (TypeError, ValueError) as exc:  # the constructor rejects a value
            problems = [f"environment[{name}]: {exc}"]
    raise RecipeError(problems, "command line")
