"""A plugin written against SAND's 0.1 plugin contract, kept exactly as a 0.1 author wrote it: do not update it.

Its observers take ``context`` (0.1's name of the lifecycle argument, the live run context then, renamed
``run`` in 0.2) and read what 0.1's docs offered (``context.run_dir.path``, ``context.recipe.run.name``). Under
0.2 it must load with a DeprecationWarning naming ``run``, keep its detector, and have its observers called
(tests/core/test_contract.py). Each observer appends one JSON line to ``$LEGACY_OBSERVER_LOG``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from sand_framework import hookimpl
from sand_framework.components import Detector
from sand_framework.types import Decision


class AnyDisagreement(Detector):
    """Deliberate when the samples and the expert name at least ``threshold`` distinct actions."""

    name = "legacy_any_disagreement"

    @dataclass
    class Params:
        threshold: int = 2

    def decide(self, sampled, expert):
        distinct = len(set(sampled) | {expert})
        return Decision(distinct >= self.params.threshold, float(distinct))


@hookimpl
def sand_register_detectors(register):
    register(AnyDisagreement)


def _log(event, context, **data):
    path = os.environ.get("LEGACY_OBSERVER_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"event": event, "run_dir": str(context.run_dir.path),
                                "name": context.recipe.run.name, **data}) + "\n")


@hookimpl
def sand_run_start(context):
    _log("run_start", context)


@hookimpl
def sand_stage_end(context, stage, summary):
    _log("stage_end", context, stage=stage)


@hookimpl
def sand_step_deliberated(context, record):
    _log("step_deliberated", context, task=record.task_id)


@hookimpl
def sand_iteration_end(context, iteration, summary):
    _log("iteration_end", context, iteration=iteration)


@hookimpl
def sand_run_end(context, metrics):
    _log("run_end", context, models=sorted(metrics["eval"]))
