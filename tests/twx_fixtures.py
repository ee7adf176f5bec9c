"""Module-scoped fixtures of a real TextWorld-Express environment and its expert trajectories, for the test modules
that play episodes in one (tests/components/test_executors.py, tests/engine/test_async_rollouts.py)::

    env = twx_env({"n_train": 8, "n_seen": 4, "n_unseen": 4, "max_steps": 10})
    trajs = expert_trajectories(4)
"""

from __future__ import annotations

import pytest
from synthesis_fixtures import expert_trajs


def twx_env(params: dict):
    """An ``env`` fixture: the ``textworld_express`` environment built with ``params``, closed after the module."""

    @pytest.fixture(scope="module")
    def env(registries):
        e = registries.build("environment", "textworld_express", params)
        yield e
        e.close()

    return env


def expert_trajectories(n: int):
    """A ``trajs`` fixture: the expert trajectories of the first ``n`` training tasks of the module's ``env``."""

    @pytest.fixture(scope="module")
    def trajs(env):
        return expert_trajs(env, n)

    return trajs
