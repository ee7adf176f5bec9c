"""Environment latency: SAND plugin vs the raw engine, side by side, for each installed environment.

    OMP_NUM_THREADS=1 python benchmarks/env_latency.py [--games 3] [--repeats 3]

For every environment whose package (and data) is present it prints, in
milliseconds, the mean over a few tasks of:

* ``reset (first)``  the first reset of a task in the process (ALFWorld: PDDL->SAS translation);
* ``reset``          later resets of the same task (what branching pays);
* ``step``           one expert action;
* ``replay``         reset + replay of the whole expert trajectory (one EAC branch).

"raw" drives the engine directly the way its own examples do (TWX's python
wrapper; TextWorld + ALFWorld's wrappers), "plugin" goes through the SAND
``Environment``. Figures on a shared 2-core machine vary several-fold between
runs; compare columns of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "plugins"))


def _ms(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t0) * 1000, out


def _row(name: str, raw: dict[str, float] | None, plugin: dict[str, float]) -> list[str]:
    lines = []
    for key in ("reset (first)", "reset", "step", "raw step", "replay", "replay10"):
        if key not in plugin and not (raw and key in raw):
            continue
        r = f"{raw[key]:10.1f}" if raw and key in raw else f"{'-':>10}"
        p = f"{plugin[key]:10.1f}" if key in plugin else f"{'-':>10}"
        lines.append(f"{name:<20} {key:<15} {r} {p}")
    return lines


def _summary(samples: dict[str, list[float]]) -> dict[str, float]:
    return {k: statistics.mean(v) for k, v in samples.items() if v}


# ---------------------------------------------------------------- TextWorld-Express


def bench_twx(games: int, repeats: int) -> tuple[dict, dict] | None:
    try:
        from textworld_express import TextWorldExpressEnv as RawTWX
    except ImportError:
        return None
    from sand_builtins.environments.textworld_express import TextWorldExpressEnv

    env = TextWorldExpressEnv()
    tasks = env.tasks("seen")[:games]
    plugin: dict[str, list[float]] = {"reset (first)": [], "reset": [], "step": [], "replay": []}
    experts = {t: env.expert_actions(t) for t in tasks}
    for t in tasks:
        plugin["reset (first)"].append(_ms(lambda: env.reset(t))[0])
        for _ in range(repeats):
            plugin["reset"].append(_ms(lambda: env.reset(t))[0])
        for a in experts[t]:
            plugin["step"].append(_ms(lambda: env.step(a))[0])
        plugin["replay"].append(_ms(lambda: env.replay(t, experts[t]))[0])
    params = env.params
    env.close()

    raw_env = RawTWX(envStepLimit=10**9)
    raw: dict[str, list[float]] = {"reset (first)": [], "reset": [], "step": [], "replay": []}
    raw_env.load(params.game, params.game_params)
    for t in tasks:
        seed = int(t.rsplit(":", 1)[1])
        do_reset = lambda: raw_env.reset(seed=seed, gameFold="train", generateGoldPath=False)  # noqa: E731
        raw["reset (first)"].append(_ms(do_reset)[0])
        for _ in range(repeats):
            raw["reset"].append(_ms(do_reset)[0])
        for a in experts[t]:
            raw["step"].append(_ms(lambda: raw_env.step(a))[0])

        def replay():
            do_reset()
            for a in experts[t]:
                raw_env.step(a)
        raw["replay"].append(_ms(replay)[0])
    raw_env.close()
    return _summary(raw), _summary(plugin)


# ---------------------------------------------------------------- ALFWorld


def bench_alfworld(games: int, repeats: int) -> tuple[dict, dict] | None:
    try:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
    except ImportError:
        return None
    from sand_builtins.environments.alfworld import AlfworldEnv

    env = AlfworldEnv()
    try:
        tasks = env.tasks("seen")[:: max(1, 140 // games)][:games]
    except Exception as exc:  # noqa: BLE001 - no data
        print(f"alfworld: skipped ({exc})", file=sys.stderr)
        return None
    experts = {t: env.expert_actions(t) for t in tasks}
    gamefiles = {t: str(env.data_dir / "json_2.1.1" / t / "game.tw-pddl") for t in tasks}

    # Raw first: outside the plugin's calls TextWorld translates with its own (uncached) code.
    raw: dict[str, list[float]] = {"reset (first)": [], "reset": [], "step": [], "replay": []}
    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    for t in tasks:
        def start():
            e = textworld.start(gamefiles[t], request_infos=infos,
                                wrappers=[AlfredDemangler(shuffle=False), AlfredInfos])
            e.reset()
            return e
        ms, tw = _ms(start)
        raw["reset (first)"].append(ms)
        for _ in range(repeats):
            raw["reset"].append(_ms(tw.reset)[0])
        for a in experts[t]:
            raw["step"].append(_ms(lambda: tw.step(a))[0])

        def replay():
            tw.reset()
            for a in experts[t]:
                tw.step(a)
        raw["replay"].append(_ms(replay)[0])
        tw.close()

    plugin: dict[str, list[float]] = {"reset (first)": [], "reset": [], "step": [], "replay": []}
    for t in tasks:
        plugin["reset (first)"].append(_ms(lambda: env.reset(t))[0])
        for _ in range(repeats):
            plugin["reset"].append(_ms(lambda: env.reset(t))[0])
        for a in experts[t]:
            plugin["step"].append(_ms(lambda: env.step(a))[0])
        plugin["replay"].append(_ms(lambda: env.replay(t, experts[t]))[0])
    env.close()
    return _summary(raw), _summary(plugin)


# ---------------------------------------------------------------- ScienceWorld


def bench_scienceworld(games: int, repeats: int) -> tuple[dict, dict] | None:
    """Plugin vs ``scienceworld.ScienceWorldEnv`` (load + reset; ``step`` also lists valid actions).

    ``raw step`` is the server's own step call, which the plugin uses; ``replay10`` is reset + the
    first 10 expert actions (repeated when the expert is shorter), the cost of one SAND branch.
    """
    try:
        from scienceworld import ScienceWorldEnv as RawSW
        from scienceworld.utils import infer_task
    except ImportError:
        return None
    from sand_builtins.environments.scienceworld import ScienceWorldEnv, parse_task_id

    env = ScienceWorldEnv()
    keys = ("reset (first)", "reset", "step", "raw step", "replay", "replay10")
    tasks = env.tasks("seen")[:: max(1, 194 // games)][:games]
    experts = {t: env.expert_actions(t) for t in tasks}
    prefix10 = {t: (experts[t] * 10)[:10] for t in tasks}
    plugin: dict[str, list[float]] = {k: [] for k in keys}
    for t in tasks:
        plugin["reset (first)"].append(_ms(lambda: env.reset(t))[0])
        for _ in range(repeats):
            plugin["reset"].append(_ms(lambda: env.reset(t))[0])
        for a in experts[t]:
            plugin["step"].append(_ms(lambda: env.step(a))[0])
        plugin["replay"].append(_ms(lambda: env.replay(t, experts[t]))[0])
        plugin["replay10"].append(_ms(lambda: env.replay(t, prefix10[t]))[0])
    simpl = env.params.simplifications
    env.close()

    raw_env = RawSW("", envStepLimit=10**9)
    raw: dict[str, list[float]] = {k: [] for k in keys}
    for t in tasks:
        name, var = parse_task_id(t)

        def do_reset():
            raw_env.load(infer_task(name), var, simpl)
            raw_env.reset()
        raw["reset (first)"].append(_ms(do_reset)[0])
        for _ in range(repeats):
            raw["reset"].append(_ms(do_reset)[0])
        for a in experts[t]:
            raw["step"].append(_ms(lambda: raw_env.step(a))[0])
        do_reset()
        for a in experts[t]:
            raw["raw step"].append(_ms(lambda: raw_env.server.step(a))[0])

        def replay(actions):
            do_reset()
            for a in actions:
                raw_env.step(a)
        raw["replay"].append(_ms(lambda: replay(experts[t]))[0])
        raw["replay10"].append(_ms(lambda: replay(prefix10[t]))[0])
    raw_env.close()
    return _summary(raw), _summary(plugin)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--games", type=int, default=3, help="tasks per environment")
    ap.add_argument("--repeats", type=int, default=3, help="repeated resets per task")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if "ALFWORLD_DATA" not in os.environ and (REPO.parent / "shared" / "alfworld" / "json_2.1.1").is_dir():
        os.environ["ALFWORLD_DATA"] = str(REPO.parent / "shared" / "alfworld")

    results = {}
    for name, bench in (("textworld_express", bench_twx), ("alfworld", bench_alfworld),
                        ("scienceworld", bench_scienceworld)):
        out = bench(args.games, args.repeats)
        if out is None:
            print(f"{name}: not installed, skipped", file=sys.stderr)
            continue
        results[name] = {"raw_ms": out[0], "plugin_ms": out[1]}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{'env':<20} {'what (ms)':<15} {'raw':>10} {'plugin':>10}")
    for name, r in results.items():
        print("\n".join(_row(name, r["raw_ms"], r["plugin_ms"])))


if __name__ == "__main__":
    main()
