"""The ``vllm`` policy's asynchronous path (``-m vllm``, scripts/test_vllm.sh): ``submit`` on the real vLLM CPU
engine with SmolLM2-135M, per-request seeds, and real TextWorld-Express episodes that are the same in lock-step
and asynchronous mode. One engine for the module; short generations, so the module takes well under a minute
after the engine start."""

from __future__ import annotations

import os

import pytest

from sand_builtins.policies.vllm_backend import VLLMPolicy
from sand_builtins.policies.vllm_engine import vllm_available
from sand_framework.prompting import trajectory_chat
from sand_framework.rollout import Episode, EnvPool, derive_seed, run_episodes
from sand_framework.types import SamplingParams, Trajectory

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not vllm_available(), reason="vllm is not importable (setup.sh --vllm)")]

CHATS = [[{"role": "user", "content": f"Name a {w}."}] for w in ("color", "city", "fruit")]


@pytest.fixture(scope="module")
def policy():
    from sand_framework.plugins import load_plugins

    model = load_plugins().resolve_model("smollm2-135m", os.environ.get("SAND_CACHE", ".sand_cache"))
    pol = VLLMPolicy(VLLMPolicy.Params(dtype="float32", max_model_len=2048, kv_cache_space_gb=1))
    pol.setup(model)
    yield pol
    pol.close()


def test_submit_matches_generate_with_per_request_seeds(policy):
    sp = SamplingParams(temperature=1.0, max_new_tokens=12, seeds=[7, 8, 9])
    batched = [c[0].text for c in policy.generate(CHATS, sp)]
    futures = [policy.submit(c, SamplingParams(temperature=1.0, max_new_tokens=12, seeds=[s]))
               for c, s in zip(CHATS, (7, 8, 9))]
    assert [f.result(timeout=120)[0].text for f in futures] == batched
    stats = policy.stats
    assert stats["engine_requests"] >= 6 and stats["engine_busy_seconds"] > 0
    # a synchronous call after submitted ones still works (the engine lock was released)
    assert [c[0].text for c in policy.generate(CHATS[::-1], SamplingParams(
        temperature=1.0, max_new_tokens=12, seeds=[9, 8, 7]))] == batched[::-1]


def test_textworld_express_episodes_same_in_both_modes(policy, registries):
    env = registries.build("environment", "textworld_express", {"n_train": 4, "n_seen": 4, "n_unseen": 4,
                                                                  "max_steps": 3})
    pool = EnvPool(env)
    try:
        runs = {}
        for mode in ("lockstep", "async"):
            eps = []
            for i, h in enumerate(pool.take(4)):
                task_id = env.tasks("seen")[i]
                traj = Trajectory(task_id=task_id, env=env.name, instruction=h.instruction(), task=h.reset(task_id))
                eps.append(Episode(env=h, chat=trajectory_chat(traj, upto=0), steps_left=3,
                                   seed=derive_seed(1, "episode", i)))
            ran = run_episodes(eps, policy, SamplingParams(temperature=1.0, max_new_tokens=24, seed=1), pool=None,
                               mode=mode, max_concurrency=4)
            assert ran.agent_turns == sum(len(e.steps) for e in eps) > 0
            runs[mode] = [[s.to_dict() for s in e.steps] for e in eps]
        assert runs["async"] == runs["lockstep"]
    finally:
        pool.close()
        env.close()
