"""Rollout executors: restore step t, execute a candidate, let the agent play on, record the outcome."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from annotated_types import Ge, Gt, Interval

from sand_framework import hookimpl
from sand_framework.components import Environment, Executor, Policy, RolloutRequest
from sand_framework.components.environment import MAX_EPISODE_STEPS
from sand_framework.config.paramdoc import ENV_WORKERS, FAULTS, LOGGING, SCHEDULING, SpeedOnly
from sand_framework.rollout import EnvPool, Episode, act_all, derive_seed
from sand_framework.errors import ReplayMismatch
from sand_framework.prompting import trajectory_chat
from sand_framework.types import Rollout, SamplingParams


class InProcessExecutor(Executor["InProcessExecutor.Params"]):
    """All requested rollouts advance together in this process, one batched model call per depth (or, with
    ``rollout_mode: async``, each on its own: :mod:`sand_framework.rollout.asynchronous`).

    Each branch gets its own warm environment from a pool; the prefix is
    replayed and checked against the expert's recorded observations, so a
    rollout always starts from exactly the expert's state at step t.

    The other executors differ only in where that pool keeps its environments
    (:meth:`make_pool`): the lock-step loop, and therefore every model call,
    stays here in the driver, so all executors produce identical rollouts.
    """

    name = "in_process"
    description = "lock-step or async rollouts on warm environments in this process"

    @classmethod
    def agent_token_budget(cls, params):
        return ("max_new_tokens", params.max_new_tokens)

    @dataclass
    class Params:
        temperature: Annotated[float, Ge(0.0)] = 1.0
        """Decoding of the agent's continuation (paper: 1.0)."""
        max_new_tokens: Annotated[int, Ge(1)] = 64
        """Token budget of each agent turn in a rollout (``sand validate`` checks it holds the longest trained
        thought plus an action)."""
        max_rollout_steps: Annotated[int, Interval(ge=0, le=MAX_EPISODE_STEPS)] | None = None
        """Cap on steps after the candidate, at most 1000 (null: the environment's own cap)."""
        verify_replay: bool = True
        """Check that replaying the expert prefix gives back its recorded observations (a mismatch stops the
        rollout with :class:`ReplayMismatch` instead of branching from another state)."""
        max_parallel: Annotated[int, Interval(ge=1, le=4096), SpeedOnly(
            "only how many episodes are positioned and played at once: an executor rollout's seed comes from its "
            "place in the call, a method's exploration's from its place in its seed group, never from its wave "
            "(tests/engine/test_methods.py), up to a batched forward's float rounding")] = 8
        """Environments (branches) advanced together, at most 4096; more requests run in successive waves (as do a
        method's explorations on this executor's pool)."""
        rollout_mode: Annotated[Literal["lockstep", "async"], SCHEDULING] = "lockstep"
        """``lockstep``: per depth one batched model call for all live branches, then one parallel environment
        step; ``async``: each branch submits its next turn as soon as its environment answers (the engine batches
        what is in flight; environment steps overlap generation). Same rollouts for the same seed
        (docs/scaling.md, "Asynchronous rollouts"). Methods' explorations on this executor's pool use it too."""
        max_concurrency: Annotated[int, Ge(1), SCHEDULING] = 32
        """``async`` only: branches in flight at once within a wave of ``max_parallel``."""
        expert_switch: bool = False
        """Replace an expert trajectory when a candidate's rollout beats it (paper: on for ALFWorld and
        WebShop, off for ScienceWorld); see :meth:`Executor.switches_expert`."""

    def __init__(self, params=None):
        super().__init__(params)
        self._pools: dict[tuple[int, str | None], EnvPool] = {}

    def make_pool(self, env: Environment) -> EnvPool:
        """The env-worker pool for ``env``; subclasses put the environments elsewhere."""
        return EnvPool(env)

    def make_phase_pool(self, env: Environment) -> EnvPool:
        """A second pool of ``env`` for a caller that plays while the first pool is in use (:meth:`pool`'s
        ``phase``): another :meth:`make_pool` when that pool's environments live apart from ``env`` (the worker
        pools), else one that starts from a clone, since the local pool steps ``env`` itself."""
        pool = self.make_pool(env)
        if any(e is env for e in pool.instances):
            return EnvPool.of_clone(env)
        return pool

    def pool(self, env: Environment, phase: str | None = None) -> EnvPool:
        """The warm pool of ``env``'s instances this executor steps (made on first use). Components that play
        episodes of their own (a method's explorations) share it: the environments live where this executor
        keeps them (worker processes, Ray actors) and their steps count in :attr:`stats`.

        ``phase`` names a pool of its own for work that runs at the same time as the default pool's (IPR's Monte
        Carlo rollouts while its agent episodes play, ``run.batches_in_flight``): a pool hands the same
        environments to every caller, so two callers at once need two pools. Counted in :attr:`stats` too."""
        return self._pool(env, phase)

    def _pool(self, env: Environment, phase: str | None = None) -> EnvPool:
        key = (id(env), phase)
        if key not in self._pools:
            self._pools[key] = self.make_pool(env) if phase is None else self.make_phase_pool(env)
        return self._pools[key]

    @property
    def stats(self) -> dict[str, int]:
        """Environment steps (replays included), replays and survived worker faults, agent turns generated and
        seconds spent in rollout loops, over all pools: this executor's rollouts and the episodes other components
        played on its pools (:meth:`EnvPool.run_episodes` counts both)."""
        total: dict[str, float] = {"agent_turns": 0, "rollout_seconds": 0.0}
        for pool in self._pools.values():
            for k, v in pool.stats.items():
                total[k] = total.get(k, 0) + v
        return total

    def _cap(self, req: RolloutRequest) -> int:
        cap = req.max_steps - req.step_index
        if self.params.max_rollout_steps is not None:
            cap = min(cap, self.params.max_rollout_steps + 1)
        return max(1, cap)

    def run(self, requests, env, policy: Policy, seed=None) -> list[Rollout]:
        out: list[Rollout] = []
        wave = max(1, self.params.max_parallel)
        for i in range(0, len(requests), wave):
            seeds = [None if seed is None else derive_seed(seed, "rollout", i + j)
                     for j in range(len(requests[i:i + wave]))]
            out += self._run_wave(requests[i:i + wave], env, policy, seeds)
        return out

    def _run_wave(self, requests, env, policy: Policy, seeds) -> list[Rollout]:
        pool = self._pool(env)
        handles = pool.take(len(requests))
        # Position every branch at its prefix (one parallel call), then execute all candidates (one more).
        positioned = pool.replay_all([
            (h, req.trajectory.task_id, [s.action for s in req.trajectory.steps[:req.step_index]],
             [s.observation for s in req.trajectory.steps[:req.step_index]] if self.params.verify_replay else None)
            for req, h in zip(requests, handles)])
        episodes: list[Episode | None] = []
        rollouts = []
        for req, h, res, ep_seed in zip(requests, handles, positioned, seeds):
            rollout = Rollout(task_id=req.trajectory.task_id, prefix_len=req.step_index, candidate=req.candidate.action)
            if isinstance(res, ReplayMismatch):
                rollout.error = str(res)
                episodes.append(None)
            else:
                episodes.append(Episode(env=h, chat=trajectory_chat(req.trajectory, upto=req.step_index),
                                        steps_left=self._cap(req), seed=ep_seed))
            rollouts.append(rollout)
        live = [ep for ep in episodes if ep is not None]
        act_all(live, [(req.candidate.thought, req.candidate.action, bool(req.candidate.action))
                       for req, ep in zip(requests, episodes) if ep is not None], pool)
        sp = SamplingParams(temperature=self.params.temperature, max_new_tokens=self.params.max_new_tokens,
                            seed=seeds[0] if seeds else None)
        pool.run_episodes(live, policy, sp, role="agent", mode=self.params.rollout_mode,
                          max_concurrency=self.params.max_concurrency)
        for rollout, ep in zip(rollouts, episodes):
            if ep is not None:
                rollout.steps, rollout.reward, rollout.success, rollout.done = ep.steps, ep.reward, ep.success, ep.done
        return rollouts

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()


class ProcessPoolExecutor(InProcessExecutor):
    """Like ``in_process``, but the environments live warm in worker processes and each lock-step depth's
    steps run in parallel across them; model calls stay batched in the driver.

    Workers rebuild the environment from its spec. A worker that dies is
    restarted and its episodes replayed (``stats["faults_survived"]``).
    """

    name = "process_pool"
    params: ProcessPoolExecutor.Params
    description = "lock-step or async rollouts; environments stepped in parallel in local worker processes"

    @dataclass
    class Params(InProcessExecutor.Params):
        workers: Annotated[int, Ge(1), ENV_WORKERS] = 2
        """Worker processes; branch i lives in worker i % workers."""
        start_method: Annotated[Literal["spawn", "forkserver"], ENV_WORKERS] = "spawn"
        """``spawn`` or ``forkserver`` (never ``fork``: the driver may hold model threads)."""
        max_restarts: Annotated[int, Ge(0), FAULTS] = 3
        """Restarts of dead or hung workers tolerated within one parallel call."""
        timeout_s: Annotated[float, Gt(0.0), FAULTS] | None = 300.0
        """A worker that has not answered one parallel call after this long is hung: killed, restarted, replayed."""
        startup_timeout_s: Annotated[float, Gt(0.0), FAULTS] = 180.0
        """The same limit for a worker's first call, which includes its start-up (environment, JVM)."""

    def make_pool(self, env: Environment) -> EnvPool:
        from sand_framework.rollout import ProcessEnvPool

        return ProcessEnvPool(env, workers=self.params.workers, start_method=self.params.start_method,
                              max_restarts=self.params.max_restarts, timeout_s=self.params.timeout_s,
                              startup_timeout_s=self.params.startup_timeout_s)

    def worker_pids(self) -> list[int | None]:
        return [pid for pool in self._pools.values() for pid in pool.pids()]


class RayExecutor(InProcessExecutor):
    """Like ``in_process``, but the environments live warm in Ray actors (local or on a cluster).

    Ray restarts a lost actor and retries its call; an actor that hangs past
    ``timeout_s`` is replaced; either way the episode is replayed on the new
    actor (``stats["faults_survived"]``, ``stats["hangs"]``). What Ray cannot
    recover stops the run with an error naming the actor (exit code 5,
    resumable). Ray is imported on first use: ``pip install 'sand-framework[ray]'``.
    """

    name = "ray"
    params: RayExecutor.Params
    requires = {"ray": "ray"}
    description = "lock-step or async rollouts; environments stepped in parallel in Ray actors"

    @dataclass
    class Params(InProcessExecutor.Params):
        address: str | None = None
        """Ray cluster to join; null = the cluster of a ``ray job submit`` job (RAY_ADDRESS), else a local
        instance started (or reused) here; ``auto`` = the cluster this node belongs to."""
        num_workers: Annotated[int, Ge(1), ENV_WORKERS] = 2
        """Env actors; branch i lives in actor i % num_workers."""
        num_cpus: Annotated[float, Ge(0.0), ENV_WORKERS] = 1.0
        """CPUs reserved per actor."""
        max_restarts: Annotated[int, Ge(0), FAULTS] = 3
        """Ray restarts of a lost actor; also the hung-actor replacements tolerated within one parallel call."""
        max_task_retries: Annotated[int, Ge(-1), FAULTS] = 3
        """Ray retries of a call that was running on a lost actor."""
        timeout_s: Annotated[float, Gt(0.0), FAULTS] | None = 300.0
        """An actor that has not answered one parallel call after this long is hung: killed, replaced, replayed."""
        startup_timeout_s: Annotated[float, Gt(0.0), FAULTS] = 180.0
        """The same limit for an actor's first call, which includes its start-up (scheduling, environment, JVM)."""
        log_to_driver: Annotated[bool, LOGGING] = False
        """Stream the actors' stdout/stderr into the driver's output when this executor starts Ray (they are
        always in the Ray logs of each node)."""
        actor_options: dict[str, Any] = field(default_factory=dict)
        """Extra ``ray.remote(...).options(...)`` (resources, runtime_env, scheduling_strategy...)."""
        init_options: dict[str, Any] = field(default_factory=dict)
        """Extra ``ray.init(...)`` arguments when this executor initializes Ray (e.g. runtime_env)."""

    def make_pool(self, env: Environment) -> EnvPool:
        from sand_framework.rollout import RayEnvPool

        p = self.params
        return RayEnvPool(env, num_workers=p.num_workers, address=p.address, num_cpus=p.num_cpus,
                          max_restarts=p.max_restarts, max_task_retries=p.max_task_retries, timeout_s=p.timeout_s,
                          startup_timeout_s=p.startup_timeout_s, log_to_driver=p.log_to_driver,
                          actor_options=dict(p.actor_options), init_options=dict(p.init_options))

    def worker_pids(self) -> list[int]:
        return [pid for pool in self._pools.values() for pid in pool.pids()]


@hookimpl
def sand_register_executors(register):
    register(InProcessExecutor)
    register(ProcessPoolExecutor)
    register(RayExecutor)
