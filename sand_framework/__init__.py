"""SAND: Self-taught ActioN Deliberation, as a plugin framework.

Plugin authors need only ``hookimpl`` and the classes in
``sand_framework.components``.
"""

import pluggy

__version__ = "0.1.0"

hookimpl = pluggy.HookimplMarker("sand")
"""Decorator marking a function as an implementation of a spec in ``sand_framework.hookspecs``."""

__all__ = ["hookimpl", "__version__"]
