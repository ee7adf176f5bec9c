"""The public rollout layer: agent episodes in lock-step and the pools that hold environments warm.

Plugins (executors, evaluators, methods) import from here. Each module has one job:
:mod:`.episodes` (episodes advanced with one batched model call per step),
:mod:`.asynchronous` (the same episodes, each on its own: the engine kept busy while environments step),
:mod:`.explore` (whole agent episodes from a reset or a replayed prefix: what exploring methods play),
:mod:`.pool` (the pool interface and the local pool), :mod:`.worker` (a
worker's environments, rebuilt from a spec), :mod:`.remote` (the driver side
of a pool in workers), :mod:`.processes` (workers as local processes) and
:mod:`.raypool` (workers as Ray actors; Ray is imported only when one is made).
"""

from sand_framework.rollout.episodes import (
    INVALID_FEEDBACK, Episode, act_all, assign_seeds, derive_seed, replay_outcome, run_lockstep, turn_seed,
)
from sand_framework.rollout.asynchronous import (
    ROLLOUT_MODES, AsyncStats, EngineMeter, EnvStepper, MicroBatcher, engine_client, run_async, run_episodes,
)
from sand_framework.rollout.pool import EnvPool, Handle, ReplayItem
from sand_framework.rollout.explore import ExploreRequest, Exploration, PoolSource, explore, replayable
from sand_framework.rollout.processes import ProcessEnvPool
from sand_framework.rollout.raypool import RayEnvPool
from sand_framework.rollout.remote import RemotePool
from sand_framework.rollout.worker import EnvHost, build_env, env_blob

__all__ = ["INVALID_FEEDBACK", "ROLLOUT_MODES", "AsyncStats", "EngineMeter", "EnvHost", "EnvPool", "EnvStepper",
           "Episode", "ExploreRequest", "Exploration", "Handle", "MicroBatcher", "PoolSource", "ProcessEnvPool",
           "RayEnvPool", "RemotePool", "ReplayItem", "act_all", "assign_seeds", "build_env", "derive_seed",
           "engine_client", "env_blob", "explore", "replay_outcome", "replayable", "run_async", "run_episodes",
           "run_lockstep", "turn_seed"]
