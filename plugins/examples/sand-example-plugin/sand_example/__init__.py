"""Example SAND plugin: a light-switch puzzle environment, a majority-margin detector and an iteration method.

SAND finds this module through the ``sand`` entry-point group declared in
``pyproject.toml`` and calls the ``@hookimpl`` functions below once at
start-up. Nothing else is needed: no change to SAND, no import of this
package anywhere.
"""

from __future__ import annotations

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


__all__ = ["LightSwitchesEnv", "MajorityMarginDetector", "SuccessfulReplayMethod", "__version__"]
