"""The vLLM policy's request pump, on engine stand-ins (the real engine: tests/vllm/test_policy_vllm.py, ``-m vllm``).

What it must hold: requests from several threads share an engine's batch; two engines that may be awake together
hold requests at once, two that must take turns never do; an engine that fails fails what it holds and the pump
goes on; ``stop`` answers what is queued first.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from sand_builtins.policies.vllm_pump import RequestPump
from sand_framework.rollout import EngineMeter


class FakeEngine:
    """``LLMEngine``'s surface the pump uses, batching like vLLM: each step advances every request it holds, and a
    request finishes after ``steps`` of them (its output: the prompt ids reversed). The first step waits for
    ``gate`` when one is set."""

    def __init__(self, name: str, steps: int = 1, gate: threading.Event | None = None):
        self.name, self.steps, self.gate = name, steps, gate
        self.held: dict[str, list] = {}
        self.most_held = 0
        self.fail: Exception | None = None

    def add_request(self, rid, prompt, params, lora_request=None):
        self.held[rid] = [prompt["prompt_token_ids"], self.steps]
        self.most_held = max(self.most_held, len(self.held))

    def has_unfinished_requests(self):
        return bool(self.held)

    def step(self):
        if self.gate is not None:
            assert self.gate.wait(10)
            self.gate = None
        if self.fail is not None:
            raise self.fail
        threading.Event().wait(0.001)
        for req in self.held.values():
            req[1] -= 1
        done = [rid for rid, (_, left) in self.held.items() if left <= 0]
        return [SimpleNamespace(request_id=rid, finished=True, ids=self.held.pop(rid)[0][::-1]) for rid in done]


def make_pump(engines: dict[str, FakeEngine], may_share: bool = True):
    llms = {role: SimpleNamespace(llm_engine=e) for role, e in engines.items()}
    woken: list[str] = []

    def activate(llm):
        woken.append(llm.llm_engine.name)
        if not may_share:  # taking turns: nothing may be in the engine being put to sleep
            assert all(not other.llm_engine.held for other in llms.values() if other is not llm)

    pump = RequestPump(lambda role: (llms[role], None), activate, lambda: may_share, EngineMeter())
    return pump, woken


def put(pump, ids, role="agent"):
    return pump.put(ids, SimpleNamespace(), role, finish=lambda out: out.ids)


def test_requests_from_several_threads_share_the_engine_batch():
    gate = threading.Event()
    engine = FakeEngine("one", steps=3, gate=gate)
    pump, _ = make_pump({"agent": engine, "base": engine})
    first = put(pump, [1, 2])
    futures = []
    threads = [threading.Thread(target=lambda i=i: futures.append(put(pump, [i, 9], role="base"))) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gate.set()
    assert first.result(10) == [2, 1]
    assert sorted(f.result(10) for f in futures) == [[9, 0], [9, 1], [9, 2]]
    assert engine.most_held == 4  # the three arrived while the first decoded, and joined its batch
    pump.stop()


@pytest.mark.parametrize("may_share", [True, False])
def test_two_engines_hold_requests_together_only_where_they_may(may_share):
    agent, base = FakeEngine("agent", steps=200), FakeEngine("base", steps=1)
    pump, woken = make_pump({"agent": agent, "base": base}, may_share)
    order: list[str] = []
    slow = pump.put([1], SimpleNamespace(), "agent", finish=lambda out: order.append("agent"))
    while not agent.held:  # the agent's request is in its engine
        threading.Event().wait(0.001)
    quick = pump.put([2], SimpleNamespace(), "base", finish=lambda out: order.append("base"))
    slow.result(10), quick.result(10)
    # beside the agent's request where the engines may both be awake; after it where they take turns
    assert order == (["base", "agent"] if may_share else ["agent", "base"])
    assert woken == ["agent", "base"]
    pump.stop()


def test_a_failing_engine_fails_what_it_holds_and_the_pump_goes_on():
    gate = threading.Event()
    engine = FakeEngine("one", gate=gate)
    pump, _ = make_pump({"agent": engine})
    held = [put(pump, [1]), put(pump, [2])]
    engine.fail = RuntimeError("EngineCore died")
    gate.set()
    for fut in held:
        with pytest.raises(RuntimeError, match="EngineCore died"):
            fut.result(10)
    engine.fail = None
    engine.held.clear()
    assert put(pump, [3, 4]).result(10) == [4, 3]
    assert pump.meter.snapshot()["engine_requests"] == 3
    pump.stop()


def test_stop_answers_what_is_queued_then_a_new_request_restarts_the_thread():
    gate = threading.Event()
    pump, _ = make_pump({"agent": FakeEngine("one", gate=gate)})
    futures = [put(pump, [i]) for i in range(3)]
    stopper = threading.Thread(target=pump.stop)
    stopper.start()
    gate.set()
    stopper.join(10)
    assert [f.result(0) for f in futures] == [[0], [1], [2]]
    assert put(pump, [5, 6]).result(10) == [6, 5]
    pump.stop()
