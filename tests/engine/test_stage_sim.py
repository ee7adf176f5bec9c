"""The stage simulation's fluid model (sand_framework.engine.stage_sim): what docs/gpu.md's projection and the
streaming benchmark's calibration rest on. Each test pins one rule with figures worked out by hand."""

from __future__ import annotations

import pytest

from sand_framework.engine.stage_sim import Layout, Task, rates, simulate

ENGINES = Layout({"agent": ("agent",), "base": ("base",)})
SHARED = Layout({"agent": ("gpu",), "base": ("gpu",)})


def batches(k: int, agent: float, base: float, share: float = 1.0) -> list:
    return [[[Task("agent", agent, share)], [Task("base", base)]] for _ in range(k)]


def test_rates_are_max_min_fair_under_every_pool():
    # two saturating tasks on one pool: half each; a task that can use only 0.2 keeps it, the other gets the rest
    assert rates([Task("agent", 1), Task("base", 1)], SHARED) == [0.5, 0.5]
    assert rates([Task("agent", 1, 0.2), Task("base", 1)], SHARED) == pytest.approx([1.0, 0.8])
    # nested pools: two engines on 2 cores with host work beside them (3 tasks, capacity 2): 2/3 each
    cores = Layout({"agent": ("a", "cores"), "base": ("b", "cores"), "host": ("cores",)}, {"cores": 2.0})
    assert rates([Task("agent", 1), Task("base", 1), Task("host", 1)], cores) == pytest.approx([2 / 3] * 3)
    assert rates([Task("host", 1)], Layout({})) == [1.0]  # a role on no pool is never slowed


def test_depth_one_is_the_chunked_sum_and_streaming_overlaps_separate_engines():
    work = batches(10, agent=3.0, base=2.0)
    assert simulate(work, 1, ENGINES)["wall_seconds"] == pytest.approx(50.0)
    streamed = simulate(work, 2, ENGINES)
    assert streamed["wall_seconds"] == pytest.approx(10 * 3.0 + 2.0)  # the agent's work, then the last critique
    assert streamed["busy"]["agent"] == pytest.approx(30 / 32, abs=1e-3)
    # on one shared GPU, saturating work cannot overlap: streaming buys nothing
    assert simulate(work, 2, SHARED)["wall_seconds"] == pytest.approx(50.0)


def test_latency_bound_work_leaves_room_for_the_other_role_on_a_shared_engine():
    """A rollout wave that uses 40% of the engine alone lets the base model's critique of the previous batch run
    beside it at the remaining 60%: the streamed stage on one GPU is shorter than the chunked one."""
    work = batches(10, agent=5.0, base=2.0, share=0.4)
    chunked = simulate(work, 1, SHARED)
    streamed = simulate(work, 2, SHARED)
    assert chunked["wall_seconds"] == pytest.approx(70.0)
    assert streamed["wall_seconds"] == pytest.approx(10 * 5.0 + 2.0, rel=1e-6)  # each critique hides in a wave
    assert chunked["used"]["agent"] == pytest.approx(10 * 5.0 * 0.4 / 70.0, abs=1e-3)


def test_a_batch_enters_only_when_depth_allows_and_phases_keep_their_order():
    work = [[[Task("agent", 1.0)], [Task("base", 4.0)]] for _ in range(3)]
    # depth 1: each batch waits for the previous one's base phase
    assert simulate(work, 1, ENGINES)["wall_seconds"] == pytest.approx(15.0)
    # unbounded: the agent runs ahead, the base phase is the bottleneck: 1 + 3 x 4
    assert simulate(work, 3, ENGINES)["wall_seconds"] == pytest.approx(13.0)
    assert simulate([], 2, ENGINES)["wall_seconds"] == 0.0


def test_docs_gpu_projection_table_is_the_scripts_output():
    """docs/gpu.md's hours are computed from the plan the code builds (benchmarks/projection.py), not typed."""
    import importlib.util
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("projection_benchmark", root / "benchmarks" / "projection.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # its dataclasses look their module up
    spec.loader.exec_module(bench)
    doc = (root / "docs" / "gpu.md").read_text(encoding="utf-8")
    shown = doc.split("<!-- projection:begin -->\n", 1)[1].split("\n<!-- projection:end -->", 1)[0]
    assert shown == bench.markdown(bench.table())
    work = doc.split("<!-- projection-workload:begin -->\n", 1)[1].split("\n<!-- projection-workload:end -->", 1)[0]
    assert work == bench.workload_markdown()
    w = bench.workload()
    assert w["rollouts"] == w["critiques"] == w["deliberated_steps"] * bench.Shape().candidates
    assert "Rollout throughput" not in doc  # the old data-parallel hand estimate is gone (issue 37, item 3)
    full8 = [r for r in bench.table() if r["gpus"] == 8 and not r["lora"] and r["agent_tokens"] == 31.0]
    assert [r["engines"] for r in full8][0] == ["base: GPUs 0,1,2,3 (tp=4)", "agent: GPUs 4,5,6,7 (tp=4)"]
    assert full8[1]["hours"] < full8[0]["hours"]  # streaming pays where the roles have engines of their own
    # placement: shared puts both engines on every GPU: streamed, the GPUs are nearly always in use and the
    # stage is faster than the split layout's (docs/gpu.md states both)
    split, shared = full8[1], [r for r in full8 if r["placement"] == "shared" and r["depth"] == 2][0]
    assert shared["engines_share_gpus"] and split["hours"] / shared["hours"] >= 1.29  # "1.30x" in docs/gpu.md
    assert shared["used"]["agent"] + shared["used"]["base"] >= 0.95 > split["used"]["base"]
