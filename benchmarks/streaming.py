"""Chunked vs streamed data building, side by side in one run: wall time, engine time per role, same units.

The engine's own ``synth/iter1`` stage (``Pipeline.build``) of a recipe, built twice from the same expert
trajectories with the same policy weights: once chunked (``run.batches_in_flight=1``: each batch goes sample ->
roll out -> critique -> synthesize before the next begins) and once streamed (``run.batches_in_flight=D``: one
thread per phase, the next batch sampled and rolled out while this one is critiqued). Arms alternate
(chunked, streamed, chunked, ...) for ``--repeats`` rounds so that a drift of the machine falls on both. Each
arm's units are compared with the first chunked arm's (the timings left out): streaming must change nothing
but the time. Per arm it prints the stage's wall seconds and the agent's and base model's busy seconds
(:class:`sand_framework.rollout.metered.MeteredPolicy`), which bound what overlap can gain on this backend:

    serial work = agent busy + base busy + the rest (environment steps, tokenization, bookkeeping)
    streamed wall >= max(agent busy + base busy, ...) on one model in this process (the roles take turns),
                  >= max(agent busy, base busy, ...) on separate engines (two GPUs' worth of engines)

:func:`simulate` is a discrete-event simulation of the stage that replays the chunked arm's measured batch costs
(each batch's agent and base busy seconds, backend calls, the rest as host time) through the streamed pipeline;
its error against the measured streamed arm is recorded (the calibration), and the same costs replayed with one
engine per role give what the overlap would buy where the roles do not share one model.

Usage (an idle machine: another busy process collapses torch's threads, docs/MACHINE_NOTES)::

    python benchmarks/streaming.py                                   # quickstart, SmolLM2-135M, base as agent
    python benchmarks/streaming.py --set data.limit=16 --depth 3 --repeats 2
    python benchmarks/streaming.py --agent-weights runs/qs/weights/iter0/final   # a trained agent

Writes one JSON record (``--out``, default ``benchmarks/data/streaming-<host>.json``) with every arm's figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

from sand_framework.engine import stage_sim
from sand_framework.engine.stage_sim import Layout, Task

def units_without_windows(log: Path) -> dict[str, dict]:
    """The stage's units, less what the engine measured over each batch's window (its time and, with batches in
    flight, other batches' calls and steps too: ``stage_cost.is_batch_window``): what the method built."""
    from sand_framework.engine.stage_cost import is_batch_window

    out = {}
    for line in log.read_text().splitlines():
        rec = json.loads(line)
        stats = rec["data"].get("stats") or {}
        for key in [k for k in stats if is_batch_window(k)]:
            stats.pop(key)
        out[rec["unit"]] = rec["data"]
    return out


def differences(a: dict[str, dict], b: dict[str, dict], limit: int = 5) -> list[str]:
    """Where two stages' units differ: ``unit: top-level key`` (at most ``limit``)."""
    out = [f"{u}: missing" for u in sorted(set(a) ^ set(b))]
    for u in sorted(set(a) & set(b)):
        out += [f"{u}: {k}" for k in sorted(set(a[u]) | set(b[u])) if a[u].get(k) != b[u].get(k)]
    return out[:limit]


def batch_costs(log: Path) -> list[dict]:
    """Each batch's measured cost, in stage order (the first unit of a batch carries it: ``seconds``, the two
    roles' busy seconds, backend calls): what :func:`simulate` replays."""
    out = []
    for line in log.read_text().splitlines():
        stats = json.loads(line)["data"].get("stats") or {}
        if "seconds" in stats:
            out.append({"seconds": stats["seconds"], "agent": stats.get("agent_engine_busy_seconds", 0.0),
                        "base": stats.get("base_engine_busy_seconds", 0.0), "calls": stats.get("backend_calls", 0)})
    return out


BASE_CALLS = 2
"""Base-model calls of a batch that deliberates: one batched critique, one batched synthesis (``retries: 0``)."""


def batch_steps(cost: dict) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """A batch as the simulation sees it: the agent phases' steps (engine calls of equal length, each followed by
    an equal share of the host time: environment steps, tokenization, the detector) and the base phase's calls."""
    n_base = BASE_CALLS if cost["base"] > 0 else 0
    n_agent = max(1, cost["calls"] - n_base)
    host = max(0.0, cost["seconds"] - cost["agent"] - cost["base"])
    agent = [step for _ in range(n_agent) for step in (("agent", cost["agent"] / n_agent), ("host", host / n_agent))]
    base = [("base", cost["base"] / n_base)] * n_base if n_base else []  # no step disagreed: no critique
    return agent, base


LAYOUTS = {
    "one_model": Layout({"agent": ("model",), "base": ("model",)}),
    "engine_per_role": Layout({"agent": ("agent",), "base": ("base",)}),
}
"""How the roles meet in :func:`simulate`: on one model in this process (``transformers``: the roles take turns)
or on one engine each (``vllm`` with an agent engine of its own, two ``openai`` servers). Host steps never wait."""


def simulate(costs: list[dict], depth: int, layout: str) -> dict:
    """The stage's batches (their measured costs, :func:`batch_steps`) through an agent phase and a base phase,
    at most ``depth`` batches in flight, the engine work shared as ``LAYOUTS[layout]`` says
    (:func:`sand_framework.engine.stage_sim.simulate`). Returns the wall seconds and each role's busy share."""
    batches = [[[Task(kind, seconds) for kind, seconds in phase] for phase in batch_steps(c)] for c in costs]
    got = stage_sim.simulate(batches, depth, LAYOUTS[layout])
    return {"wall_seconds": round(got["wall_seconds"], 2),
            **{f"{role}_share": got["busy"].get(role) for role in ("agent", "base")}}


def calibrate(arms: list[dict]) -> None:
    """Each streamed arm, predicted from its round's chunked batch costs, and each arm of round r > 0 from round
    0's (out of sample): the simulated batch windows against the measured ones (``engine_time.wall_seconds``),
    and the simulated wall plus the chunked arm's time outside its batches (the agent engine's start, the same in
    both arms) against the measured wall."""
    first = next((a for a in arms if a["depth"] == 1), None)
    for arm in arms:
        own = next(a for a in arms if a["round"] == arm["round"] and a["depth"] == 1)
        fixed = own["wall_seconds"] - sum(c["seconds"] for c in own["batches"])
        measured = (arm["engine_time"] or {}).get("wall_seconds") or sum(c["seconds"] for c in arm["batches"])
        sims = {}
        for source, costs in (("own_round", own["batches"]), ("round_0", first["batches"])):
            if arm["depth"] == 1 and (source == "own_round" or arm is first):
                continue  # its own costs replayed chunked are its batches' sum: no test
            for layout in LAYOUTS:
                sim = simulate(costs, arm["depth"], layout)
                sims[f"{layout}/{source}"] = {
                    **sim, "batches_error": round(sim["wall_seconds"] / measured - 1, 3),
                    "wall_error": round((sim["wall_seconds"] + fixed) / arm["wall_seconds"] - 1, 3)}
        arm["measured_batches_seconds"] = round(measured, 2)
        arm["outside_batches_seconds"] = round(fixed, 2)
        arm["simulated"] = sims
        for old in ("simulated_one_model", "simulated_two_engines", "simulation_error"):  # before stage_sim
            arm.pop(old, None)
        for name, sim in sims.items():
            print(f"round {arm['round']} depth {arm['depth']}: simulated {name}: batches {sim['wall_seconds']:.1f} s "
                  f"(measured {measured:.1f} s, {sim['batches_error']:+.1%}), wall {sim['wall_seconds'] + fixed:.1f} s"
                  f" (measured {arm['wall_seconds']:.1f} s, {sim['wall_error']:+.1%})", flush=True)


def build_stage(recipe: str, overrides: list[str], run_dir: Path, agent: str | None, expert_from: Path | None,
                plugins) -> dict:
    """One ``synth/iter1`` of ``recipe`` in ``run_dir`` (the expert stage copied from ``expert_from``)."""
    from sand_framework.config import load_recipe, validate
    from sand_framework.engine.context import RunContext
    from sand_framework.engine.pipeline import Pipeline
    from sand_framework.store import RunDir

    data, _ = load_recipe(recipe, overrides)
    spec = validate(data, plugins.registries())
    rd = RunDir.create_at(run_dir)
    (rd.path / "recipe.yaml").write_text("{}")
    if expert_from is not None:  # the same gold paths for every arm
        shutil.copytree(expert_from / "expert", run_dir / "expert")
        state = json.loads((expert_from / "state.json").read_text())
        (run_dir / "state.json").write_text(json.dumps({"done": {"expert": state["done"]["expert"]}}))
    ctx = RunContext(recipe=spec, run_dir=rd, plugins=plugins, registries=plugins.registries())
    try:
        p = Pipeline(ctx)
        expert = p.expert()
        ctx.policy()  # the model loads before the clock starts
        t0 = time.perf_counter()
        p.build(1, expert, {"agent": agent, "sft": agent, "base": None})
        wall = time.perf_counter() - t0
    finally:
        ctx.close()
    summary = json.loads((run_dir / "state.json").read_text())["done"]["synth/iter1"]
    return {"wall_seconds": round(wall, 2), "engine_time": summary.get("engine_time"),
            "deliberated": summary.get("deliberated"), "rollouts": summary.get("rollouts"),
            "critiques": summary.get("critiques"), "env_steps": summary.get("env_steps"),
            "batches": batch_costs(run_dir / "iter1" / "synthesis.units.jsonl"),
            "units": units_without_windows(run_dir / "iter1" / "synthesis.units.jsonl")}


def measure(args) -> tuple[list[dict], list[str]]:
    """Every arm of every round, built on this machine."""
    os.environ.setdefault("SAND_NO_PROGRESS", "1")
    from sand_framework.plugins import load_plugins

    plugins = load_plugins()
    base = [f"run.synthesis_batch={args.batch}", *args.set]
    work = Path(tempfile.mkdtemp(prefix="sand-streaming-"))
    arms: list[dict] = []
    reference = None
    expert_from = None
    try:
        for r in range(args.repeats):
            for depth in (1, args.depth):
                run_dir = work / f"r{r}-d{depth}"
                got = build_stage(args.recipe, [*base, f"run.batches_in_flight={depth}"], run_dir,
                                  args.agent_weights, expert_from, plugins)
                expert_from = expert_from or run_dir
                units = got.pop("units")
                reference = reference if reference is not None else units
                got.update(depth=depth, round=r, same_units=units == reference,
                           differences=differences(units, reference))
                arms.append(got)
                e = got["engine_time"] or {}
                agent, base_busy = ((e.get(role) or {}).get("busy_seconds") for role in ("agent", "base"))
                print(f"round {r} depth {depth}: wall {got['wall_seconds']:.1f} s, agent busy {agent} s, base busy "
                      f"{base_busy} s, deliberated {got['deliberated']}, same units: {got['same_units']}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return arms, base


def summarize(record: dict) -> dict:
    """The record's figures over its arms (calibrated first): means, speed-up, bounds, the simulation's."""
    arms, depth = record["arms"], record["depth"]
    calibrate(arms)

    def mean(d: int, key=lambda a: a["wall_seconds"]) -> float:
        xs = [key(a) for a in arms if a["depth"] == d]
        return sum(xs) / len(xs)

    chunked, streamed = mean(1), mean(depth)
    busy = {role: mean(1, lambda a, role=role: ((a["engine_time"] or {}).get(role) or {}).get("busy_seconds", 0.0))
            for role in ("agent", "base")}
    per_role = mean(depth, lambda a: a["simulated"]["engine_per_role/own_round"]["wall_seconds"]
                    + a["outside_batches_seconds"])
    record.update({
        "chunked_wall_s": round(chunked, 2), "streamed_wall_s": round(streamed, 2),
        "speedup": round(chunked / streamed, 3) if streamed else None,
        "chunked_busy_s": {k: round(v, 2) for k, v in busy.items()},
        "bound_one_model": round(chunked / max(busy["agent"] + busy["base"], 1e-9), 3),
        "bound_two_engines": round(chunked / max(busy["agent"], busy["base"], 1e-9), 3),
        "same_units": all(a["same_units"] for a in arms),
        "simulated_engine_per_role_speedup": round(chunked / per_role, 3) if per_role else None,
    })
    record.pop("simulated_two_engines_speedup", None)  # the name before stage_sim
    print(f"chunked {chunked:.1f} s, streamed (depth {depth}) {streamed:.1f} s: "
          f"{record['speedup']}x; the chunked arm's busy time bounds it at {record['bound_one_model']}x on one "
          f"in-process model, {record['bound_two_engines']}x on two engines; same units: {record['same_units']}")
    return record


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", default="quickstart")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a recipe override (repeatable)")
    ap.add_argument("--batch", type=int, default=1, help="run.synthesis_batch (trajectories per batch)")
    ap.add_argument("--depth", type=int, default=3, help="run.batches_in_flight of the streamed arm")
    ap.add_argument("--repeats", type=int, default=1, help="rounds of (chunked, streamed)")
    ap.add_argument("--agent-weights", default=None, help="the agent's weights (default: the base model)")
    ap.add_argument("--resimulate", default=None, metavar="RECORD",
                    help="recompute a record's simulation and figures from its measured arms (builds nothing)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    if args.resimulate:
        record = summarize(json.loads(Path(args.resimulate).read_text()))
        out = Path(args.out or args.resimulate)
    else:
        arms, base = measure(args)
        record = summarize({
            "machine": {"host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version()},
            "recipe": args.recipe, "overrides": base, "depth": args.depth, "repeats": args.repeats,
            "agent_weights": args.agent_weights, "arms": arms})
        out = Path(args.out or Path(__file__).resolve().parent / "data" / f"streaming-{platform.node() or 'host'}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"record: {out}")


if __name__ == "__main__":
    main()
