"""SAND: Self-taught ActioN Deliberation, as a plugin framework.

Plugin authors need only ``hookimpl`` and the classes in
``sand_framework.components``.

The package version follows semantic versioning, and so does the plugin
contract (the hook specs in :mod:`sand_framework.hookspecs`, the component base
classes in :mod:`sand_framework.components` and the data they exchange):
:data:`CONTRACT_VERSION` is the ``MAJOR.MINOR`` of :data:`__version__`, bumped with
every change a plugin can notice, and CHANGELOG.md says what changed and how to
migrate. A plugin module may declare the contracts it supports with a
module-level ``sand_contract = ">=0.3,<0.4"`` (a PEP 440 specifier); SAND
refuses to load it under a contract outside that range, naming both.
"""

import pluggy

__version__ = "0.3.5"

CONTRACT_VERSION = "0.3"
"""The plugin contract this SAND implements (``MAJOR.MINOR`` of ``__version__``; see docs/writing-plugins.md,
"The contract and its versions"). Before 1.0 a minor bump may rename a hook argument or method; the old name then
keeps working, with a ``DeprecationWarning`` naming the new one, for at least one more minor release."""

hookimpl = pluggy.HookimplMarker("sand")
"""Decorator marking a function as an implementation of a spec in ``sand_framework.hookspecs``."""

__all__ = ["CONTRACT_VERSION", "hookimpl", "__version__"]
