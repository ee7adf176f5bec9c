"""The expert trajectories and synthesis components the engine's synthesis tests build on the real TWX
environment (the synthesis, streaming and TWX-fixture tests share them)."""

from __future__ import annotations

from sand_framework.engine.expert import expert_trajectory
from sand_framework.engine.synthesis import Components


def expert_trajs(env, k=2):
    """The environment's expert trajectories (the engine's own helper) with a recognizable expert thought."""
    out = []
    for task_id in env.tasks("train")[:k]:
        t = expert_trajectory(env, task_id)
        for s in t.steps:
            s.thought = "expert thought"
        out.append(t)
    return out


OPEN: list = []


def components(registries, env, policy, critic="rollout_critic", sampler="self_consistency", detector="set_size"):
    b = registries.build
    comps = Components(environment=env, policy=policy, detector=b("detector", detector),
                       sampler=b("sampler", sampler, {"n": 4}),
                       executor=b("executor", "in_process", {"max_rollout_steps": 3}), critic=b("critic", critic),
                       synthesizer=b("synthesizer", "deliberation"))
    OPEN.append(comps.executor)
    return comps


def close_executors() -> None:
    """Close every executor :func:`components` opened."""
    while OPEN:
        OPEN.pop().close()
