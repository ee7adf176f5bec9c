"""What the exploring baselines (RFT, ETO, IPR) share: their base class, where episodes run, seeds, per-benchmark
defaults."""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

from collections.abc import Callable

from sand_framework.components import Environment, Method, MethodTools
from sand_framework.components.base import P
from sand_framework.rollout import Exploration, ExploreRequest, PoolSource, derive_seed, explore
from sand_framework.types import SamplingParams, Trajectory

STORED_REWARD_ENVS = ("webshop",)
"""Benchmarks whose expert trajectories are scored by their stored reward (ETO's WebShop); elsewhere the expert
counts as 1.0 (ETO's ALFWorld and ScienceWorld: the expert reaches the goal)."""

TRUNCATE_REJECTED = {"webshop": 10, "scienceworld": 10}
"""ETO's cut of the rejected side, in messages beyond the expert's (``construct_preference.py``: WebShop and
ScienceWorld; ALFWorld uncut)."""


def benchmark_of(env: Environment) -> str | None:
    """The published benchmark ``env`` is (:attr:`Environment.benchmark`). An environment that declares none and
    whose name spells one (``my_alfworld``, ``sciworld-lite``: how SAND told them until 0.3.1) still gets it, with a
    ``DeprecationWarning`` (0.4 reads only ``benchmark``)."""
    if env.benchmark is not None:
        return env.benchmark
    low = env.name.lower()
    for family, spellings in (("webshop", ("webshop",)), ("scienceworld", ("scienceworld", "sciworld")),
                              ("alfworld", ("alfworld",))):
        if any(s in low for s in spellings):
            warnings.warn(f"environment {env.name!r} is taken for the {family} benchmark from its name, as until "
                          f"SAND 0.3.1; declare `benchmark = {family!r}` on its class (0.4 reads only that)",
                          DeprecationWarning, stacklevel=2)
            return family
    return None


def expert_reward_rule(setting: str, env: Environment) -> str:
    """``one`` or ``stored`` for a method's ``expert_reward`` param (``auto``: by benchmark, see
    :data:`STORED_REWARD_ENVS`)."""
    if setting != "auto":
        return setting
    return "stored" if benchmark_of(env) in STORED_REWARD_ENVS else "one"


def expert_reward(traj: Trajectory, rule: str) -> float:
    return float(traj.reward) if rule == "stored" else 1.0


EXPLORE_ONLY = "explore_only"
"""``Trajectory.meta`` key of a training task a method explores beyond the trajectories it was trained on: its
gold trajectory is a side of its pairs, never part of the next iteration's expert data."""


def with_training_tasks(trajectories: list[Trajectory], train_tasks: list[str], gold: Callable[[str], Trajectory],
                        count: int) -> list[Trajectory]:
    """``trajectories`` and then the first ``count`` tasks of ``train_tasks`` not among them whose gold trajectory
    (the environment's expert) reaches the goal, each marked :data:`EXPLORE_ONLY`."""
    have = {t.task_id for t in trajectories}
    extra: list[Trajectory] = []
    for task_id in train_tasks:
        if len(extra) >= count:
            break
        if task_id in have:
            continue
        path = gold(task_id)
        if path.success:
            path.meta[EXPLORE_ONLY] = True
            extra.append(path)
    return list(trajectories) + extra


def trained_on(trajectories: list[Trajectory]) -> list[Trajectory]:
    """The trajectories that are not :data:`EXPLORE_ONLY`: what the next iteration starts from."""
    return [t for t in trajectories if not t.meta.get(EXPLORE_ONLY)]


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


class ExploringMethod(Method[P]):
    """A method whose units are episodes the current agent plays in the recipe executor's environment pool (RFT,
    ETO, IPR). Its ``Params`` declares ``max_new_tokens`` (the agent's turn budget, which ``sand validate``
    compares with what the agent is trained to write) and ``cross_task_batching`` (each its own help)."""

    uses: ClassVar[tuple[str, ...]] = ("executor",)
    """Only for its environment pool and ``max_parallel`` (waves of episodes); its sampling settings are its own
    params."""

    @classmethod
    def agent_token_budget(cls, params):
        return ("max_new_tokens", params.max_new_tokens)

    def inputs(self, trajectories: list[Trajectory], train_tasks: list[str],
               gold: Callable[[str], Trajectory]) -> list[Trajectory]:
        """The input trajectories, plus :meth:`extra_tasks` more training tasks (ETO, IPR: their pipelines explore
        every training task, not only those the SFT agent was trained on)."""
        extra = self.extra_tasks()
        return with_training_tasks(trajectories, train_tasks, gold, extra) if extra else list(trajectories)

    def extra_tasks(self) -> int:
        """How many training tasks beyond the input trajectories to explore (0 here; ETO's and IPR's
        ``explore_tasks``)."""
        return 0

    def explore(self, requests: list[ExploreRequest], tools: MethodTools, temperature: float,
                phase: str | None = None) -> list[Exploration]:
        """Play ``requests`` to their ends with the current policy at ``temperature`` (results in request order),
        in :func:`pools`' environments, in waves of the executor's ``max_parallel``, in its ``rollout_mode``;
        apart per seed unless ``cross_task_batching``. ``phase``: play on a pool of that name
        (:meth:`PoolSource.pool`), for explorations that run while others play on the default pool."""
        p, src = self.params, pools(tools)
        return explore(requests, tools.env, tools.policy,
                       SamplingParams(temperature=temperature, max_new_tokens=p.max_new_tokens),
                       pool=src.pool(tools.env, phase), max_parallel=src.max_parallel,
                       group_by_seed=not p.cross_task_batching, mode=src.rollout_mode,
                       max_concurrency=src.max_concurrency)
