"""A pure-Python environment that hangs, crashes or raises on command, for env-worker pool fault tests.

Workers (processes, Ray actors) rebuild it from its spec by importing this file
(:func:`sand_framework.rollout.worker.build_env`), so it starts in well under a
second, unlike a JVM-backed environment. Actions:

* ``hang``: the first ``hang`` ever (across every worker: a marker file in
  ``Params.marker_dir``) sleeps for ``hang_s``; later ones answer at once, so a
  replaced worker recovers;
* ``hang forever``: always sleeps ``hang_s``;
* ``crash``: the worker process exits at once (``os._exit``);
* ``raise``: the step raises ``ValueError``;
* ``log <text>``: logs ``<text>`` as a warning on the ``flaky_env`` logger;
* anything else: ``did <action>``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from sand_framework import hookimpl
from sand_framework.components import Environment
from sand_framework.types import StepResult


class FlakyEnv(Environment):
    name = "flaky_test_env"
    description = "test environment that hangs, crashes or raises on command"

    @dataclass
    class Params:
        marker_dir: str = ""
        """Where the first ``hang`` leaves its marker (shared by all workers)."""
        hang_s: float = 600.0
        """How long a hang lasts (the pool's timeout must be shorter)."""

    def __init__(self, params=None):
        super().__init__(params)
        self.task = ""
        self.steps = 0

    def tasks(self, split):
        return [f"t{i}" for i in range(4)]

    def instruction(self):
        return "Say anything."

    def max_steps(self, task_id):
        return 10

    def reset(self, task_id):
        self.task, self.steps = task_id, 0
        return f"start {task_id}"

    def step(self, action):
        self.steps += 1
        if action == "hang":
            marker = Path(self.params.marker_dir) / "hung-once"
            if not marker.exists():
                marker.write_text(str(os.getpid()))
                time.sleep(self.params.hang_s)
        elif action == "hang forever":
            time.sleep(self.params.hang_s)
        elif action == "crash":
            os._exit(3)
        elif action == "raise":
            raise ValueError(f"boom in {self.task}")
        elif action.startswith("log "):
            logging.getLogger("flaky_env").warning("%s (pid %d)", action[4:], os.getpid())
        return StepResult(f"did {action} in {self.task} at {self.steps}", 0.0, self.steps >= 10)

    def clone(self):
        return type(self)(dataclasses.replace(self.params))


@hookimpl
def sand_register_environments(register):
    register(FlakyEnv)
