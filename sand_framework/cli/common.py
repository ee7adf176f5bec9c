"""Helpers shared by every ``sand`` command module (kept apart so command modules never import main)."""

from __future__ import annotations

import sys
from functools import wraps

import click

from sand_framework.errors import SandError

PLUGINS_DIR = click.option("--plugins-dir", "plugin_dirs", multiple=True, type=click.Path(file_okay=False),
                           help="Folder of extra plugin modules (repeatable).")


def friendly(fn):
    """Turn user-fixable :class:`SandError` failures into one message and the error's exit code."""

    @wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except SandError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)
    return wrapper
