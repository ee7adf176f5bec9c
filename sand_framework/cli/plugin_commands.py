"""``sand``'s command group: its own commands, then those installed plugins add (``sand_add_commands``).

Plugins are loaded only when the group meets a name it does not have, or lists its commands (``--help``): a
built-in command never pays for importing third-party packages, and a broken plugin never costs one.
"""

from __future__ import annotations

import logging

import click

from sand_framework.errors import SandError

log = logging.getLogger(__name__)


class PluginCommands(click.Group):
    """A ``click.Group`` that asks the installed plugins for more commands the first time it needs them."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._plugins_asked = False

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and not self._plugins_asked:
            self.add_plugin_commands()
            command = super().get_command(ctx, cmd_name)
        return command

    def list_commands(self, ctx: click.Context) -> list[str]:
        self.add_plugin_commands()
        return super().list_commands(ctx)

    def add_plugin_commands(self) -> None:
        """Call every installed plugin's ``sand_add_commands`` (once), each into a group of its own, so a command
        named like one of SAND's is refused (a warning naming the plugin) instead of replacing it."""
        if self._plugins_asked:
            return
        self._plugins_asked = True
        from sand_framework.plugins import PluginSet

        plugins = PluginSet()
        try:
            plugins.load_entrypoints()
        except SandError as exc:
            log.warning("plugin commands not added: %s", exc)
            return
        for impl in plugins.pm.hook.sand_add_commands.get_hookimpls():
            scratch = click.Group()
            try:
                impl.function(cli=scratch)
            except Exception as exc:  # noqa: BLE001 - a plugin's failure costs only its own commands
                log.warning("plugin %r: its sand_add_commands failed (%s: %s); its commands are not added",
                            impl.plugin_name, type(exc).__name__, exc)
                continue
            for name, command in scratch.commands.items():
                if name in self.commands:
                    log.warning("plugin %r adds a command %r, which `sand` already has; it is ignored (rename it)",
                                impl.plugin_name, name)
                    continue
                self.add_command(command, name)
