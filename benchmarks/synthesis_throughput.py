"""Synthesis throughput: the engine's batched synthesis vs one request at a time, on one fixed workload.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/synthesis_throughput.py \\
        [--model smollm2-135m] [--policy transformers|vllm] [--trajectories 2] [--executor in_process]

Workload: the first K TextWorld-Express expert trajectories (train split), N=5
self-consistency samples per step, set-size detector, rollouts of every
distinct candidate (at most ``--rollout-steps`` agent steps after it),
rollout critic and deliberation synthesizer; fixed model and seed.

It runs the workload twice in one invocation:

* ``batched`` - as the engine does: each phase (sampling, each rollout depth,
  critique, synthesis) is one batched ``generate`` over the whole workload;
* ``single``  - one candidate at a time: every ``generate`` call is split into
  single-chat requests and the executor advances one rollout at a time
  (``max_parallel: 1``).

and prints, for each, deliberated steps per minute, the backend's busy fraction
(``policy.stats["busy_seconds"]`` / wall) and the achieved completion tokens/s;
then the ratio batched/single, and the backend's standalone batched throughput
(tokens/s) when the batched run's exact ``generate`` calls are replayed back to
back with nothing else in between: the ceiling the engine could reach, and the
share of it the batched run achieves.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from sand_framework.components import Policy


class Recorder(Policy):
    """A policy proxy that records calls and optionally splits them into single-chat requests."""

    name = "recorder"

    def __init__(self, inner: Policy, split: bool = False):
        super().__init__()
        self.inner, self.split = inner, split
        self.calls: list[tuple[list, Any, str]] = []

    def setup(self, base_model: str) -> None:
        self.inner.setup(base_model)

    def set_agent_weights(self, weights) -> None:
        self.inner.set_agent_weights(weights)

    def generate(self, chats, sampling, role="agent"):
        self.calls.append(([list(c) for c in chats], sampling, role))
        if not self.split:
            return self.inner.generate(chats, sampling, role=role)
        return [self.inner.generate([c], sampling, role=role)[0] for c in chats]

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    @property
    def stats(self):
        return self.inner.stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--policy", default="transformers", choices=["transformers", "vllm"])
    ap.add_argument("--policy-params", default="{}", help="JSON, merged over the defaults")
    ap.add_argument("--trajectories", type=int, default=2)
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rollout-steps", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--executor", default="in_process")
    ap.add_argument("--max-parallel", type=int, default=8, help="executor max_parallel of the batched run")
    args = ap.parse_args()

    from sand_framework.engine.context import cache_dir
    from sand_framework.engine.expert import expert_trajectory
    from sand_framework.engine.synthesis import Components, RolloutCache, synthesize_batch
    from sand_framework.plugins import load_plugins

    plugins = load_plugins()
    regs = plugins.registries()
    model = plugins.resolve_model(args.model, cache_dir())
    env = regs.build("environment", "textworld_express", {"max_steps": 10})
    trajs = [expert_trajectory(env, t) for t in env.tasks("train")[: args.trajectories]]
    defaults = {"transformers": {"threads": 1}, "vllm": {"max_model_len": 2048}}[args.policy]
    policy = regs.build("policy", args.policy, {**defaults, **json.loads(args.policy_params)})
    t0 = time.perf_counter()
    policy.setup(model)
    setup_s = time.perf_counter() - t0
    tok = args.max_new_tokens

    def run(mode: str) -> tuple[dict[str, Any], Recorder]:
        rec = Recorder(policy, split=(mode == "single"))
        b = regs.build
        executor = b("executor", args.executor, {"max_rollout_steps": args.rollout_steps, "max_new_tokens": tok,
                                                 "max_parallel": 1 if mode == "single" else args.max_parallel})
        comps = Components(environment=env, policy=rec, detector=b("detector", "set_size"),
                           sampler=b("sampler", "self_consistency", {"n": args.n, "max_new_tokens": tok}),
                           executor=executor, critic=b("critic", "rollout_critic", {"max_new_tokens": tok}),
                           synthesizer=b("synthesizer", "deliberation", {"max_new_tokens": 2 * tok}),
                           rollout_cache=RolloutCache())
        print(f"[bench] {mode} run ...", file=sys.stderr, flush=True)
        before = dict(policy.stats)
        t = time.perf_counter()
        outs = synthesize_batch(trajs, comps, seed=args.seed)
        wall = time.perf_counter() - t
        executor.close()
        after = policy.stats
        delib = sum(len(o.records) for o in outs)
        busy = after.get("busy_seconds", 0.0) - before.get("busy_seconds", 0.0)
        ctoks = after.get("completion_tokens", 0) - before.get("completion_tokens", 0)
        return {"mode": mode, "wall_s": round(wall, 2), "deliberated_steps": delib,
                "steps": sum(len(t.steps) for t in trajs),
                "rollouts": sum(o.stats.get("rollouts", 0) for o in outs),
                "generate_calls": after.get("calls", 0) - before.get("calls", 0),
                "deliberated_steps_per_min": round(60 * delib / wall, 2) if wall else 0.0,
                "busy_fraction": round(busy / wall, 3) if wall else 0.0,
                "completion_tokens": ctoks,
                "tokens_per_s": round(ctoks / wall, 1) if wall else 0.0}, rec

    batched, rec = run("batched")
    single, _ = run("single")

    # The ceiling: the batched run's own generate calls, replayed back to back.
    print("[bench] standalone replay of the batched calls ...", file=sys.stderr, flush=True)
    before = dict(policy.stats)
    t = time.perf_counter()
    for chats, sampling, role in rec.calls:
        policy.generate(chats, sampling, role=role)
    wall = time.perf_counter() - t
    ctoks = policy.stats.get("completion_tokens", 0) - before.get("completion_tokens", 0)
    ceiling = {"calls": len(rec.calls), "wall_s": round(wall, 2), "completion_tokens": ctoks,
               "tokens_per_s": round(ctoks / wall, 1) if wall else 0.0}

    ratio = (batched["deliberated_steps_per_min"] / single["deliberated_steps_per_min"]
             if single["deliberated_steps_per_min"] else float("nan"))
    print(json.dumps({"model": args.model, "policy": args.policy, "executor": args.executor,
                      "trajectories": len(trajs), "n": args.n, "seed": args.seed, "setup_s": round(setup_s, 1)}))
    for r in (batched, single):
        print(json.dumps(r))
    of_ceiling = batched["tokens_per_s"] / ceiling["tokens_per_s"] if ceiling["tokens_per_s"] else float("nan")
    print(json.dumps({"standalone_batched": ceiling, "batched_of_ceiling": round(of_ceiling, 3)}))
    print(f"deliberated steps/min: batched {batched['deliberated_steps_per_min']}, "
          f"single {single['deliberated_steps_per_min']}, ratio {ratio:.2f}x; "
          f"backend busy: batched {batched['busy_fraction']:.0%}, single {single['busy_fraction']:.0%}; "
          f"tokens/s: batched {batched['tokens_per_s']}, single {single['tokens_per_s']}, "
          f"standalone ceiling {ceiling['tokens_per_s']} (batched reaches {of_ceiling:.0%} of it)")
    policy.close()
    env.close()


if __name__ == "__main__":
    main()
