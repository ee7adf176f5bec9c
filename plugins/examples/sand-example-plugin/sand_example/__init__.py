"""Example SAND plugin: a light-switch puzzle environment and a majority-margin detector.

SAND finds this module through the ``sand`` entry-point group declared in
``pyproject.toml`` and calls the ``@hookimpl`` functions below once at
start-up. Nothing else is needed: no change to SAND, no import of this
package anywhere.
"""

from __future__ import annotations

from sand_framework import hookimpl

from sand_example.detectors import MajorityMarginDetector
from sand_example.lights import LightSwitchesEnv

__version__ = "0.1.0"


@hookimpl
def sand_register_environments(register):
    register(LightSwitchesEnv)


@hookimpl
def sand_register_detectors(register):
    register(MajorityMarginDetector)


__all__ = ["LightSwitchesEnv", "MajorityMarginDetector", "__version__"]
