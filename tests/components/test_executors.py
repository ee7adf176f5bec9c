"""Rollout executors: in_process, process_pool and ray give identical rollouts; workers that die are survived;
identical rollouts are computed once per iteration (rollout cache).

Real TextWorld-Express environments; the policy is the scripted one (tests/scripted.py) with a fixed seed, so
any difference between executors would come from the executors themselves.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from scripted import ScriptedPolicy
from twx_fixtures import expert_trajectories, twx_env

from sand_framework.components import RolloutRequest
from sand_framework.engine.synthesis import Components, RolloutCache, synthesize_batch
from sand_framework.types import Candidate

TWX = {"n_train": 8, "n_seen": 4, "n_unseen": 4, "max_steps": 10}
EXEC = {"max_rollout_steps": 3, "max_parallel": 4}


class KillingPolicy(ScriptedPolicy):
    """The scripted policy, which also kills one env worker once, at its ``at``-th agent call (mid-rollouts)."""

    def __init__(self, kill, at=2):
        super().__init__()
        self.kill, self.at, self.agent_calls, self.killed = kill, at, 0, False

    def generate(self, chats, sampling, role="agent"):
        if role == "agent":
            self.agent_calls += 1
            if self.agent_calls == self.at and not self.killed:
                self.kill()
                self.killed = True
        return super().generate(chats, sampling, role)


def synth(registries, env, trajs, executor, policy=None, cache=None):
    b = registries.build
    comps = Components(environment=env, policy=policy or ScriptedPolicy(), detector=b("detector", "set_size"),
                       sampler=b("sampler", "self_consistency", {"n": 4}), executor=executor,
                       critic=b("critic", "rollout_critic"), synthesizer=b("synthesizer", "deliberation"),
                       rollout_cache=cache)
    return synthesize_batch(trajs, comps, seed=7)


def records(outs):
    return [[r.to_dict() for r in o.records] for o in outs]


env = twx_env(TWX)
trajs = expert_trajectories(1)


@pytest.fixture(scope="module")
def baseline(registries, env, trajs):
    ex = registries.build("executor", "in_process", EXEC)
    try:
        outs = synth(registries, env, trajs, ex)
        stats = ex.stats
    finally:
        ex.close()
    recs = records(outs)
    assert sum(len(r) for r in recs) > 0 and any(ro for r in recs for rec in r for ro in rec["rollouts"])
    return recs, stats


def test_process_pool_matches_in_process_and_survives_a_killed_worker(registries, env, trajs, baseline):
    recs, base_stats = baseline
    ex = registries.build("executor", "process_pool", {**EXEC, "workers": 2})
    try:
        outs = synth(registries, env, trajs, ex)
        assert records(outs) == recs
        assert ex.stats["env_steps"] == base_stats["env_steps"] and ex.stats["faults_survived"] == 0
        pids = ex.worker_pids()
        assert len(pids) == 2 and all(pids) and os.getpid() not in pids

        # Kill worker 0 while rollouts are in flight (the sampling call is agent call 1, rollouts start at 2).
        policy = KillingPolicy(lambda: os.kill(ex.worker_pids()[0], signal.SIGKILL))
        outs = synth(registries, env, trajs, ex, policy=policy)
        assert policy.killed
        assert records(outs) == recs, "the killed worker's episodes were replayed, results unchanged"
        assert ex.stats["faults_survived"] >= 1
        assert ex.worker_pids()[0] != pids[0]
    finally:
        ex.close()


def test_process_pool_survives_a_hung_worker(registries, env, trajs, baseline):
    """A worker frozen mid-rollouts (SIGSTOP: a real hang, as a stuck JVM would be) is killed after
    ``timeout_s``, restarted and its episodes replayed; the results are unchanged and the hang is counted."""
    recs, _ = baseline
    ex = registries.build("executor", "process_pool", {**EXEC, "workers": 2, "timeout_s": 10})
    try:
        synth(registries, env, trajs, ex)  # warm both workers (JVM start-up is not a hang)
        frozen = ex.worker_pids()[1]
        policy = KillingPolicy(lambda: os.kill(frozen, signal.SIGSTOP))
        outs = synth(registries, env, trajs, ex, policy=policy)
        assert policy.killed
        assert records(outs) == recs
        assert ex.stats["hangs"] >= 1 and ex.stats["faults_survived"] >= 1
        assert ex.worker_pids()[1] != frozen
    finally:
        try:
            os.kill(frozen, signal.SIGKILL)
        except (ProcessLookupError, UnboundLocalError):
            pass
        ex.close()


def test_process_pool_worker_log_records_reach_run_log(flaky, tmp_path):
    """A record an environment logs inside a pool process is handled in the driver by the logger of its name,
    so it lands in the run's run.log (and on the console) like the driver's own; also after a worker restart."""
    from sand_framework.logs import run_log
    from sand_framework.rollout import ProcessEnvPool

    log = tmp_path / "run.log"
    pool = ProcessEnvPool(flaky, workers=1)
    try:
        with run_log(log):
            (h,) = pool.take(1)
            pool.replay_all([(h, "t0", [], None)])
            pool.step_all([(h, "log first words")])
            first = pool.pids()[0]
            os.kill(first, signal.SIGKILL)  # the record it sent before replying survives it
            pool.workers[0].proc.join(10)
            pool.step_all([(h, "log after the restart")])
            pool.close()  # the listener stops after the workers: nothing they logged is lost
    finally:
        pool.close()
    lines = [line.split(" ", 2)[2] for line in log.read_text().splitlines()]  # without the timestamp
    second = next(int(line.rsplit(" ", 1)[1].rstrip(")")) for line in lines if "after the restart" in line)
    assert second != first and pool.counters["faults_survived"] == 1
    assert lines == [f"WARNING flaky_env: first words (pid {first})",
                     f"WARNING flaky_env: first words (pid {second})",  # the fresh worker replays the episode
                     f"WARNING flaky_env: after the restart (pid {second})"]


def test_process_pool_gives_up_on_an_environment_that_keeps_hanging(registries, env, trajs):
    from sand_framework.errors import EnvWorkerError

    ex = registries.build("executor", "process_pool", {**EXEC, "workers": 1, "timeout_s": 0.001,
                                                         "startup_timeout_s": 0.001, "max_restarts": 1})
    try:
        with pytest.raises(EnvWorkerError, match="kept dying or hanging.*resumed"):
            synth(registries, env, trajs, ex)
        assert ex.stats["hangs"] == 2
    finally:
        ex.close()


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()


@pytest.mark.slow
def test_ray_matches_in_process_and_survives_a_lost_actor(registries, env, trajs, baseline, local_ray):
    recs, base_stats = baseline
    ex = registries.build("executor", "ray", {**EXEC, "num_workers": 2, "num_cpus": 0.5})
    try:
        outs = synth(registries, env, trajs, ex)
        assert records(outs) == recs
        assert ex.stats["env_steps"] == base_stats["env_steps"] and ex.stats["faults_survived"] == 0

        pool = next(iter(ex._pools.values()))
        policy = KillingPolicy(lambda: local_ray.kill(pool.actors[0], no_restart=False))
        outs = synth(registries, env, trajs, ex, policy=policy)
        assert policy.killed
        assert records(outs) == recs, "the restarted actor replayed the episodes, results unchanged"
        assert ex.stats["faults_survived"] >= 1
    finally:
        ex.close()


@pytest.fixture
def flaky(tmp_path):
    from flaky_env import FlakyEnv

    return FlakyEnv(FlakyEnv.Params(marker_dir=str(tmp_path), hang_s=120))


def _ray_pool(env, workers, **kw):
    from sand_framework.rollout import RayEnvPool

    pool = RayEnvPool(env, num_workers=workers, num_cpus=0.5, **kw)
    handles = pool.take(workers)
    pool.replay_all([(h, f"t{h}", ["a"], None) for h in handles])  # start every actor (not a hang)
    return pool


def test_ray_replaces_an_actor_that_hangs_past_its_timeout(local_ray, flaky):
    """A step that does not return within ``timeout_s`` (an environment stuck, as a JVM can be): the actor is
    killed and replaced, the fresh one replays the episode and steps, the other actor is untouched."""
    pool = _ray_pool(flaky, 2, timeout_s=2, startup_timeout_s=60)
    try:
        pids = pool.pids()
        t0 = time.monotonic()
        res = pool.step_all([(0, "hang"), (1, "b")])
        assert time.monotonic() - t0 < 30
        assert [r.observation for r in res] == ["did hang in t0 at 2", "did b in t1 at 2"]
        assert pool.stats["hangs"] == 1 and pool.stats["faults_survived"] == 1
        new = pool.pids()
        assert new[0] != pids[0] and new[1] == pids[1]
        assert pool.step_all([(0, "c")])[0].observation == "did c in t0 at 3"
    finally:
        pool.close()


def test_ray_actor_failures_are_reported_with_the_actor_named(local_ray, flaky):
    from sand_framework.errors import EnvWorkerError

    pool = _ray_pool(flaky, 2, timeout_s=2, startup_timeout_s=60, max_restarts=0, max_task_retries=0)
    try:
        with pytest.raises(RuntimeError, match=r"ValueError: boom in t0 \[env actor 0 of 2 \(sand-env-\w+-w0\.0\)\]"):
            pool.step_all([(0, "raise")])
        with pytest.raises(EnvWorkerError, match=r"env actor 1 of 2 \(sand-env-\w+-w1\.0\) failed while running "
                                                 r"run\(1 step; tasks t1\): the actor died") as err:
            pool.step_all([(0, "x"), (1, "crash")])
        assert err.value.exit_code == 5 and "resumed" in str(err.value)
        with pytest.raises(EnvWorkerError, match=r"env actor 0 of 2 \(sand-env-\w+-w0\.0\) did not answer "
                                                 r"run\(1 step; tasks t0\) within 2s .*hangs"):
            pool.step_all([(0, "hang forever")])
        assert pool.stats["hangs"] == 1
    finally:
        pool.close()


def test_rollout_cache_runs_identical_rollouts_once(registries, env, trajs, baseline):
    recs, base_stats = baseline
    traj = trajs[0]
    ex = registries.build("executor", "in_process", EXEC)
    try:
        # Duplicates inside one call: (task, prefix, candidate) equal up to normalization -> one execution.
        expert_a = traj.steps[1].action
        reqs = [RolloutRequest(traj, 1, Candidate(expert_a), 10), RolloutRequest(traj, 1, Candidate("look around"), 10),
                RolloutRequest(traj, 1, Candidate("  " + expert_a.upper() + ". "), 10)]
        cache = RolloutCache()
        ros = cache.run(ex, reqs, env, ScriptedPolicy(), seed=0)
        assert (cache.misses, cache.hits) == (2, 1)
        assert [r.candidate for r in ros] == [r.candidate.action for r in reqs]
        assert ros[0].steps == ros[2].steps
        single = ex.stats["env_steps"]
        fresh = registries.build("executor", "in_process", EXEC)
        try:
            fresh.run(reqs[:2], env, ScriptedPolicy(), seed=0)
            assert single == fresh.stats["env_steps"], "the duplicate cost no environment step"
        finally:
            fresh.close()

        # Across batches of one iteration: the same trajectory again costs no rollout at all.
        cache = RolloutCache()
        first = synth(registries, env, trajs, ex, cache=cache)
        before = ex.stats["env_steps"]
        again = synth(registries, env, trajs, ex, cache=cache)
        assert ex.stats["env_steps"] == before, "no environment step for cached rollouts"
        assert records(first) == records(again) == recs
        assert again[0].stats["rollout_cache_hits"] == cache.hits == cache.misses > 0
    finally:
        ex.close()


@pytest.mark.parametrize("name", ["ray", "process_pool"])
def test_recipe_switches_executor_by_name(name):
    proc = subprocess.run([sys.executable, "-m", "sand_framework.cli.main", "validate", "smoke", f"executor={name}"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"executor={name}" in proc.stdout + proc.stderr
