"""Asynchronous rollouts (sand_framework.rollout.asynchronous) give the same episodes as lock-step.

Real TextWorld-Express environments. Policies: the scripted one (tests/scripted.py, seeded per chat), a scripted
one with its own ``submit`` whose requests finish out of order (a fake async engine), and the real transformers
policy on the tiny random model (per-request seeds through its row-seeded sampler, served by the micro-batcher).
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
from scripted import ScriptedPolicy
from twx_fixtures import expert_trajectories, twx_env

from sand_framework.components import RolloutRequest
from sand_framework.rollout import Episode, EnvPool, ExploreRequest, MicroBatcher, explore, run_async, run_lockstep
from sand_framework.prompting import trajectory_chat
from sand_framework.types import Candidate, SamplingParams

TWX = {"n_train": 8, "n_seen": 4, "n_unseen": 4, "max_steps": 8}


class AsyncScripted(ScriptedPolicy):
    """The scripted policy with a ``submit``: each request is answered after a random delay, so requests finish
    in another order than they were sent; records the most requests in flight at once."""

    def __init__(self):
        super().__init__()
        self.pool = ThreadPoolExecutor(16)
        self.inflight = self.peak = self.submitted = 0
        self.lock = threading.Lock()
        self.jitter = random.Random(1)

    def submit(self, chat, sampling, role="agent") -> Future:
        with self.lock:
            self.inflight += 1
            self.submitted += 1
            self.peak = max(self.peak, self.inflight)
            delay = self.jitter.random() * 0.004

        def answer():
            time.sleep(delay)
            out = self.generate([chat], sampling, role)[0]
            with self.lock:
                self.inflight -= 1
            return out

        return self.pool.submit(answer)


env = twx_env(TWX)
trajs = expert_trajectories(4)


def rollout_requests(trajs):
    reqs = []
    for t in trajs:
        for j in range(min(2, len(t.steps))):
            for action in ("look around", t.steps[j].action):
                reqs.append(RolloutRequest(trajectory=t, step_index=j, candidate=Candidate(action=action),
                                           max_steps=8))
    return reqs


def run_executor(registries, env, trajs, policy, **params):
    ex = registries.build("executor", "in_process", {"max_rollout_steps": 4, **params})
    try:
        return [r.to_dict() for r in ex.run(rollout_requests(trajs), env, policy, seed=11)], ex.stats
    finally:
        ex.close()


def test_executor_async_equals_lockstep(registries, env, trajs):
    lock, lock_stats = run_executor(registries, env, trajs, ScriptedPolicy(), max_parallel=4)
    assert any(r["steps"] for r in lock) and len(lock) >= 8
    fake = AsyncScripted()
    same, stats = run_executor(registries, env, trajs, fake, max_parallel=4, rollout_mode="async", max_concurrency=3)
    assert same == lock
    assert 1 < fake.peak <= 3  # several requests in flight, never more than max_concurrency
    assert stats["agent_turns"] == lock_stats["agent_turns"] == fake.submitted
    # Waves and concurrency do not change a rollout: its seed comes from its request, not from what shares a call
    assert run_executor(registries, env, trajs, ScriptedPolicy(), max_parallel=16)[0] == lock
    assert run_executor(registries, env, trajs, ScriptedPolicy(), max_parallel=16, rollout_mode="async",
                        max_concurrency=1)[0] == lock  # through the micro-batcher (no submit)


def test_explore_async_equals_lockstep(env, trajs):
    reqs = [ExploreRequest(t, prefix=j, seed=5 + i) for i, t in enumerate(trajs) for j in (0, 1)]
    sp = SamplingParams(temperature=1.0, max_new_tokens=16)
    lock = explore(reqs, env, ScriptedPolicy(), sp, max_parallel=3)
    fake = AsyncScripted()
    same = explore(reqs, env, fake, sp, max_parallel=3, mode="async", max_concurrency=2)
    assert [e.trajectory.to_dict() for e in same] == [e.trajectory.to_dict() for e in lock]
    assert [e.cost() for e in same] == [e.cost() for e in lock]
    assert fake.peak <= 2


def test_async_stats_and_errors(env, trajs):
    pool = EnvPool(env)
    try:
        hs = pool.take(2)
        eps = []
        for h, t in zip(hs, trajs):
            h.reset(t.task_id)
            eps.append(Episode(env=h, chat=trajectory_chat(t, upto=0), steps_left=3))
        ran = run_async(eps, ScriptedPolicy(), SamplingParams(temperature=1.0, seed=3), pool=pool, max_concurrency=4)
        assert ran.agent_turns == sum(len(e.steps) for e in eps) > 0
        assert ran.engine["engine_requests"] == ran.agent_turns and ran.engine["engine_busy_seconds"] > 0
        assert ran.wall_seconds >= ran.engine["engine_busy_seconds"] * 0.5

        class Broken(ScriptedPolicy):
            def generate(self, chats, sampling, role="agent"):
                raise RuntimeError("engine down")

        hs[0].reset(trajs[0].task_id)
        with pytest.raises(RuntimeError, match="engine down"):
            run_async([Episode(env=hs[0], chat=trajectory_chat(trajs[0], upto=0), steps_left=3)], Broken(),
                      SamplingParams(), pool=pool)
    finally:
        pool.close()


def test_rollout_mode_is_validated(registries):
    from sand_framework.config.typecheck import check_fields

    for kind, name in (("executor", "in_process"), ("executor", "process_pool"), ("evaluator", "greedy"),
                       ("evaluator", "best_of_n")):
        cls = registries.by_kind[kind].entries[name].cls.Params
        problems = check_fields({"rollout_mode": "eager", "max_concurrency": 0}, cls, f"{kind}.params")
        assert any("rollout_mode" in p and "lockstep" in p for p in problems), problems
        assert any("max_concurrency" in p for p in problems), problems


# -- the real transformers policy (tiny random model): per-request seeds, micro-batching -------------------------


def test_transformers_per_request_seeds(policy):
    chats = [[{"role": "user", "content": f"say something about {w}"}] for w in ("coins", "doors", "keys")]
    sp = SamplingParams(temperature=1.0, max_new_tokens=12, seeds=[101, 202, 303])
    together = [c[0].text for c in policy.generate(chats, sp)]
    alone = [policy.generate([c], SamplingParams(temperature=1.0, max_new_tokens=12, seeds=[s]))[0][0].text
             for c, s in zip(chats, (101, 202, 303))]
    assert together == alone
    reordered = policy.generate(chats[::-1], SamplingParams(temperature=1.0, max_new_tokens=12,
                                                            seeds=[303, 202, 101]))
    assert [c[0].text for c in reordered] == together[::-1]
    batcher = MicroBatcher(policy)
    try:
        futs = [batcher.submit(c, SamplingParams(temperature=1.0, max_new_tokens=12, seeds=[s]))
                for c, s in zip(chats, (101, 202, 303))]
        assert [f.result()[0].text for f in futs] == together
    finally:
        batcher.close()


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_evaluator_async_equals_lockstep_real_model(registries, env, policy, temperature):
    tasks = env.tasks("seen")[:3]
    results = {}
    for mode in ("lockstep", "async"):
        ev = registries.build("evaluator", "greedy", {"max_new_tokens": 12, "max_steps": 3, "rollout_mode": mode,
                                                      "max_concurrency": 2})
        try:
            got = ev.play(tasks, env, policy, SamplingParams(temperature=temperature, max_new_tokens=12, seed=9))
            results[mode] = [(r.trajectory.to_dict(), r.prompt_tokens, r.completion_tokens) for r in got]
            assert ev.rollout_stats["agent_turns"] == sum(len(r.trajectory.steps) for r in got)
        finally:
            ev.close()
    assert results["async"] == results["lockstep"]


def test_lockstep_turn_seeds_do_not_depend_on_batch(env, trajs):
    """An episode's sampled turns are the same alone or next to others (seed per episode and turn)."""
    def play(ts):
        pool = EnvPool(env)
        try:
            eps = []
            for h, (t, seed) in zip(pool.take(len(ts)), ts):
                h.reset(t.task_id)
                eps.append(Episode(env=h, chat=trajectory_chat(t, upto=0), steps_left=4, seed=seed))
            run_lockstep(eps, ScriptedPolicy(), SamplingParams(temperature=1.0, seed=0), pool=pool)
            return [[s.action for s in e.steps] for e in eps]
        finally:
            pool.close()

    both = play([(trajs[0], 1), (trajs[1], 2)])
    assert play([(trajs[1], 2)]) == both[1:]


def test_rollout_metrics_of_a_stage():
    from sand_framework.engine.stage_cost import batch_cost, rollout_metrics

    cost = batch_cost(({"completion_tokens": 10, "engine_busy_seconds": 1.0}, {"agent_turns": 2, "env_steps": 1}),
                      ({"completion_tokens": 110, "engine_busy_seconds": 4.0}, {"agent_turns": 12, "env_steps": 9}),
                      5.0)
    assert cost["agent_turns"] == 10 and cost["backend_engine_busy_seconds"] == 3.0
    out = rollout_metrics({"synth/iter1": [{"stats": cost}, {}]},
                          {"rollout_seconds": 2.0, "agent_turns": 8, "completion_tokens": 40, "engine_busy_seconds": 1.0})
    assert out["synth/iter1"]["agent_turns_per_s"] == 2.0 and out["synth/iter1"]["tokens_per_s"] == 20.0
    assert out["synth/iter1"]["engine_utilization"] == 0.6
    assert out["eval"]["agent_turns_per_s"] == 4.0 and out["eval"]["engine_utilization"] == 0.5


def test_metered_policy_times_each_role_once_however_many_calls_overlap():
    """Engine time per role (issue 39): a role is busy while any of its calls is outstanding, so two overlapping
    agent calls count their union, a role never called counts 0, and ``submit`` exists exactly where the
    policy has it (so the async client picks the same path it would for the bare policy)."""
    from sand_framework.components import Policy
    from sand_framework.rollout.asynchronous import engine_client
    from sand_framework.rollout.metered import MeteredPolicy

    release, entered = threading.Event(), threading.Semaphore(0)

    class Gated(ScriptedPolicy):
        def generate(self, chats, sampling, role="agent"):
            entered.release()
            release.wait(10)
            return super().generate(chats, sampling, role)

    metered = MeteredPolicy(Gated())
    chat = [{"role": "user", "content": "go"}]
    t0 = time.perf_counter()
    calls = [threading.Thread(target=metered.generate, args=([chat], SamplingParams(seed=k))) for k in range(2)]
    for t in calls:
        t.start()
    entered.acquire(), entered.acquire()  # both calls are inside the policy at once
    release.set()
    for t in calls:
        t.join()
    window = time.perf_counter() - t0
    busy = metered.busy_seconds()
    latency = metered.meters["agent"].snapshot()["engine_latency_seconds"]
    assert 0 < busy["agent_engine_busy_seconds"] <= window and busy["agent_engine_busy_seconds"] < latency
    assert busy["base_engine_busy_seconds"] == 0.0
    assert not hasattr(metered, "submit") and type(engine_client(metered)).__name__ == "MicroBatcher"
    assert isinstance(metered, Policy)  # what a method that checks tools.policy's type still sees

    class Queued(ScriptedPolicy):
        def submit(self, chat, sampling, role="agent"):
            fut: Future = Future()
            fut.set_result(self.generate([chat], sampling, role)[0])
            return fut

    queued = MeteredPolicy(Queued())
    assert queued.submit(chat, SamplingParams(seed=0), "base").result()
    after = queued.busy_seconds()
    assert after["base_engine_busy_seconds"] > 0 and queued.busy_seconds() == after  # nothing left in flight
    assert type(engine_client(queued)).__name__ == "_PolicyClient"
