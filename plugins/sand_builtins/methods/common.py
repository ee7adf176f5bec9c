"""What the exploring baselines (RFT, ETO, IPR) share: where episodes run, seeds, per-benchmark defaults."""

from __future__ import annotations

from typing import Any

from sand_framework.components import MethodTools
from sand_framework.rollout import PoolSource, derive_seed
from sand_framework.types import Trajectory

STORED_REWARD_ENVS = ("webshop",)
"""Benchmarks whose expert trajectories are scored by their stored reward (ETO's WebShop); elsewhere the expert
counts as 1.0 (ETO's ALFWorld and ScienceWorld: the expert reaches the goal)."""

TRUNCATE_REJECTED = {"webshop": 10, "scienceworld": 10}
"""ETO's cut of the rejected side, in messages beyond the expert's (``construct_preference.py``: WebShop and
ScienceWorld; ALFWorld uncut)."""


def env_family(name: str) -> str:
    """The benchmark an environment's name refers to (``webshop``, ``scienceworld``, ``alfworld``), else the name."""
    low = name.lower()
    for family, spellings in (("webshop", ("webshop",)), ("scienceworld", ("scienceworld", "sciworld")),
                              ("alfworld", ("alfworld",))):
        if any(s in low for s in spellings):
            return family
    return low


def expert_reward_rule(setting: str, env_name: str) -> str:
    """``one`` or ``stored`` for a method's ``expert_reward`` param (``auto``: by benchmark, see
    :data:`STORED_REWARD_ENVS`)."""
    if setting != "auto":
        return setting
    return "stored" if env_family(env_name) in STORED_REWARD_ENVS else "one"


def expert_reward(traj: Trajectory, rule: str) -> float:
    return float(traj.reward) if rule == "stored" else 1.0


def task_seed(seed: int, traj: Trajectory, *parts: object) -> int:
    """A trajectory's own seed: the engine's batch seed with the task id (and any further parts)."""
    return derive_seed(seed, traj.task_id, *parts)


def pools(tools: MethodTools) -> PoolSource:
    """The recipe executor's environment pool (its workers, when it has them), kept for the iteration."""
    src = tools.shared.get("pool_source")
    if src is None:
        try:
            executor: Any = tools.component("executor")
        except KeyError:  # no executor slot (a unit test's tools): a local pool
            executor = None
        src = tools.shared["pool_source"] = PoolSource(executor)
    return src
