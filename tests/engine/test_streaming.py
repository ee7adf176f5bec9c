"""The streamed data-building stage: the stream mechanism, and streamed units equal to the chunked stage's.

The byte-for-byte comparisons run SAND's phases on the real TextWorld-Express environment, once with a scripted
policy (every branch of the control flow: rollouts, critiques, syntheses) and once with a real transformers model;
tests/engine/test_fault_injection.py kills a streamed run in every stage and resumes it to the uninterrupted run's units.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from scripted import ScriptedPolicy
from synthesis_fixtures import components, expert_trajs

from sand_framework.components import MethodTools
from sand_framework.streaming import stream
from sand_framework.synthesis import synthesize_batch


def test_stream_keeps_order_and_overlaps_the_stages():
    log: list[tuple[str, int]] = []
    first_done = threading.Event()

    def slow_last(x):
        if x == 0:  # item 0's last stage waits until item 1 has passed stage 0: the stages overlap
            assert first_done.wait(5), "stage 0 never ran item 1 while stage 1 held item 0"
        log.append(("b", x))
        return x * 10

    def first(x):
        log.append(("a", x))
        if x == 1:
            first_done.set()
        return x

    assert list(stream(range(5), [first, slow_last], depth=3)) == [0, 10, 20, 30, 40]
    assert log.index(("a", 1)) < log.index(("b", 0))


def test_stream_depth_one_runs_in_the_callers_thread_one_item_after_another():
    names = []
    out = list(stream([1, 2], [lambda x: names.append(threading.current_thread().name) or x + 1], depth=1))
    assert out == [2, 3] and set(names) == {threading.current_thread().name}
    with pytest.raises(ValueError, match="at least 1"):
        list(stream([1], [lambda x: x], depth=0))


def test_stream_raises_a_stage_error_in_order_after_the_items_before_it():
    def stage(x):
        if x == 2:
            raise KeyError("bad item")
        return x

    got = []
    with pytest.raises(KeyError, match="bad item"):
        for x in stream(range(5), [stage, lambda x: x], depth=4):
            got.append(x)
    assert got == [0, 1]


def test_closing_a_stream_stops_feeding_and_holds_at_most_depth_items():
    fed = []

    def items():
        for i in range(100):
            fed.append(i)
            yield i

    s = stream(items(), [lambda x: x, lambda x: (time.sleep(0.01), x)[1]], depth=2)
    assert next(s) == 0
    time.sleep(0.2)
    s.close()
    assert len(fed) <= 4, f"a stream of depth 2 fed {len(fed)} items before its consumer took the second"
    assert not [t for t in threading.enumerate() if t.name.startswith("sand-stream")]


class ThreadNoting(ScriptedPolicy):
    """The scripted policy, noting which thread each call came from."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.threads: set[str] = set()

    def generate(self, chats, sampling, role="agent"):
        self.threads.add(threading.current_thread().name)
        return super().generate(chats, sampling, role)


def _units_of(outputs) -> list[str]:
    from sand_builtins.methods.sand import SandMethod

    return [json.dumps(SandMethod._unit(o), sort_keys=True) for o in outputs]


def _streamed_and_chunked(registries, env, make_policy, batch=1, k=4, depth=3):
    from sand_builtins.methods.sand import SandMethod

    trajs = expert_trajs(env, k=k)
    batches = [(trajs[i:i + batch], 100 + i) for i in range(0, len(trajs), batch)]
    chunked_policy = make_policy()
    chunked_comps = components(registries, env, chunked_policy)
    chunked = [u for b, seed in batches for u in _units_of(synthesize_batch(b, chunked_comps, seed))]

    streamed_policy = make_policy()
    comps = components(registries, env, streamed_policy)
    slots = {"detector": comps.detector, "sampler": comps.sampler, "executor": comps.executor,
             "critic": comps.critic, "synthesizer": comps.synthesizer, "environment": env, "policy": streamed_policy}
    tools = MethodTools(env=env, policy=streamed_policy, component=slots.__getitem__, iteration=1,
                        weights={"agent": None, "sft": None, "base": None})
    streamed = [json.dumps(u, sort_keys=True) for built in SandMethod().build_stream(batches, tools, depth)
                for u in built]
    return chunked, streamed, streamed_policy


def test_streamed_sand_units_are_the_chunked_units_byte_for_byte(registries, twx):
    chunked, streamed, policy = _streamed_and_chunked(registries, twx, lambda: ThreadNoting(seed=5))
    assert streamed == chunked
    units = [json.loads(u) for u in streamed]
    assert sum(u["stats"]["rollouts"] for u in units) > 0 and sum(u["stats"]["critiques"] for u in units) > 0
    assert {"sand-stream-0", "sand-stream-1", "sand-stream-2"} <= policy.threads, policy.threads


class CountingOverlap(ThreadNoting):
    """Notes the most ``generate`` calls in progress at once; each call lasts long enough for phases to meet."""

    def __init__(self, concurrent: bool, **kw):
        super().__init__(**kw)
        self.concurrent_generate = concurrent
        self._inside, self.most, self._count = 0, 0, threading.Lock()

    def generate(self, chats, sampling, role="agent"):
        with self._count:
            self._inside += 1
            self.most = max(self.most, self._inside)
        try:
            time.sleep(0.02)
            return super().generate(chats, sampling, role)
        finally:
            with self._count:
                self._inside -= 1


@pytest.mark.parametrize("concurrent", [False, True])
def test_a_policy_that_takes_concurrent_calls_gets_the_phases_side_by_side(registries, twx, concurrent):
    """``Policy.concurrent_generate`` (vLLM's continuous batching) lets the streamed phases call ``generate`` at
    once; a policy without it gets them one at a time. The units are the chunked ones either way."""
    chunked, streamed, policy = _streamed_and_chunked(registries, twx,
                                                      lambda: CountingOverlap(concurrent, seed=5))
    assert streamed == chunked
    assert (policy.most > 1) if concurrent else (policy.most == 1), policy.most


def test_streamed_units_equal_chunked_with_a_real_model(registries, twx, tiny_model_dir):
    def make():
        policy = registries.build("policy", "transformers", {"threads": 1})
        policy.setup(str(tiny_model_dir))
        return policy

    chunked, streamed, _ = _streamed_and_chunked(registries, twx, make, batch=1, k=3, depth=2)
    assert streamed == chunked


def test_validate_notes_a_stream_setting_the_method_cannot_use(registries):
    from sand_framework.app.fingerprint import recipe_inputs
    from sand_framework.config import load_recipe, validate
    from sand_framework.errors import RecipeError
    from sand_framework.store import RunLayout

    eto = validate(load_recipe("baselines/eto", ["run.batches_in_flight=4"])[0], registries)
    assert eto.notes == ["run.batches_in_flight is 4, but method 'eto' builds one batch after another (it has no "
                         "build_stream of its own): the setting changes nothing for it"]
    ipr = validate(load_recipe("baselines/ipr", ["run.batches_in_flight=4"])[0], registries)
    assert not any("builds one batch after another" in n for n in ipr.notes), ipr.notes  # IPR streams its phases
    plain, streamed = (validate(load_recipe("repro2/sand", over)[0], registries)
                       for over in ([], ["run.batches_in_flight=4"]))
    assert not streamed.notes and streamed.run.batches_in_flight == 4 and plain.run.batches_in_flight == 1
    for paper in ("paper/alfworld", "paper/sciworld"):  # docs/gpu.md: the paper recipes stream nothing until measured
        assert "batches_in_flight" not in load_recipe(paper)[0].get("run", {}), paper
    assert all(recipe_inputs(plain, s) == recipe_inputs(streamed, s) for s in RunLayout.stages(1)), \
        "batches_in_flight is speed-only: it must not change a stage's fingerprint"
    one_model = validate(load_recipe("quickstart", ["run.batches_in_flight=3"])[0], registries)
    assert len(one_model.notes) == 1 and "policy 'transformers' serves the agent and the base model from one model" \
        in one_model.notes[0]
    with pytest.raises(RecipeError, match=r"run.batches_in_flight: must be <= 64"):
        validate(load_recipe("repro2/sand", ["run.batches_in_flight=65"])[0], registries)


def test_the_stage_simulation_replays_chunked_costs_and_bounds_the_overlap():
    """benchmarks/streaming.py's discrete-event simulation of the stage: depth 1 is the chunked stage (the sum of
    its batches), one shared model cannot finish before the engine work is done, and one engine per role
    overlaps the agent's batch k+1 with the base's batch k (equal halves: about half the chunked wall)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "streaming.py"
    spec = importlib.util.spec_from_file_location("streaming_benchmark", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    costs = [{"seconds": 10.0, "agent": 4.0, "base": 4.0, "calls": 5} for _ in range(20)]  # 2 s host a batch
    assert bench.simulate(costs, 1, "one_model")["wall_seconds"] == 200.0
    assert bench.simulate(costs, 1, "engine_per_role")["wall_seconds"] == 200.0
    one = bench.simulate(costs, 3, "one_model")
    assert 160.0 <= one["wall_seconds"] < 200.0  # only the host time hides behind the other role's calls
    two = bench.simulate(costs, 3, "engine_per_role")
    assert two["wall_seconds"] < 0.65 * 200.0 and two["base_share"] > 0.6
    arms = [{"round": 0, "depth": d, "wall_seconds": w, "engine_time": {"wall_seconds": 200.0 if d == 1 else 130.0},
             "batches": costs} for d, w in ((1, 230.0), (3, 160.0))]
    bench.calibrate(arms)  # 30 s outside the batches (the agent engine's start) counts in both arms' walls
    sim = arms[1]["simulated"]["engine_per_role/own_round"]
    assert arms[1]["outside_batches_seconds"] == 30.0 and "simulated" in arms[0] and not arms[0]["simulated"]
    assert sim["batches_error"] == round(sim["wall_seconds"] / 130.0 - 1, 3)
    assert sim["wall_error"] == round((sim["wall_seconds"] + 30.0) / 160.0 - 1, 3)
