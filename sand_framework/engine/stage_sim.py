"""A discrete-event simulation of a data-building stage: batches through phases, their work sharing the engines.

Whether streaming the stage pays, and what an iteration costs on hardware this project has not run on, turns on
how the phases' work meets on the engines: a chunked stage runs one batch's phases one after another, a streamed
one lets the next batch sample and roll out while this one is critiqued, and then two pieces of work compete for
whatever they share (one model, one GPU, the CPU's cores). This module replays that with a fluid model:

- a batch is a list of phases, each phase a sequence of :class:`Task` (run one after another); one worker per
  phase takes the batches in order, and batch k enters the first phase once batch k - ``depth`` has left the last
  (``depth`` 1 is the chunked stage, ``run.batches_in_flight`` the streamed one);
- a task needs ``seconds`` of its role's resources when it runs alone, and alone it may use at most ``share`` of
  them (a rollout wave of 64 episodes on an engine that batches 256 is latency-bound: it leaves room for a
  critique beside it);
- each role draws on a list of pools (``Layout.pools``); the tasks running at a moment get rates by max-min
  fairness under every pool's capacity (progressive filling), so two tasks on one saturated pool each go at half
  speed, and a task slowed by a pool it shares with another finishes later.

It returns the wall seconds and, per role, the time it had work (``busy``, as
:class:`sand_framework.rollout.metered.MeteredPolicy` measures a real stage) and the share of its capacity it used
(``used``). No I/O, no model: callers build the tasks from measured batch costs (``benchmarks/streaming.py``) or
from an engine model and a plan (``benchmarks/projection.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

EPS = 1e-12


@dataclass(frozen=True)
class Task:
    role: str
    """Whose work it is (``agent``, ``base``, ``host``, or any name the layout maps)."""
    seconds: float
    """How long it takes when it runs alone."""
    share: float = 1.0
    """The fraction of its role's capacity it can use alone (1: it saturates it)."""


@dataclass(frozen=True)
class Layout:
    """Which pools each role draws on, and each pool's capacity (in units a task's ``share`` is measured in)."""

    pools: dict[str, tuple[str, ...]]
    """Role -> the pools its tasks draw on; a role not listed draws on nothing (it is never slowed)."""
    capacity: dict[str, float] = field(default_factory=dict)
    """Pool -> capacity; 1.0 where not given."""

    def of(self, role: str) -> tuple[str, ...]:
        return self.pools.get(role, ())


def rates(tasks: list[Task], layout: Layout) -> list[float]:
    """Max-min fair rates (fraction of its ``seconds`` done per second) of tasks running together: every task's
    resource use rises at one pace until it reaches its ``share`` or a pool it draws on is full."""
    use = [0.0] * len(tasks)
    frozen = [t.share <= EPS for t in tasks]
    left = {p: layout.capacity.get(p, 1.0) for t in tasks for p in layout.of(t.role)}
    while not all(frozen):
        live = [i for i, f in enumerate(frozen) if not f]
        step = min(tasks[i].share - use[i] for i in live)
        for p, cap in left.items():
            n = sum(1 for i in live if p in layout.of(tasks[i].role))
            if n:
                step = min(step, cap / n)
        for i in live:
            use[i] += step
            for p in layout.of(tasks[i].role):
                left[p] -= step
        for i in live:
            if tasks[i].share - use[i] <= EPS or any(left[p] <= EPS for p in layout.of(tasks[i].role)):
                frozen[i] = True
    return [u / t.share if t.share > EPS else 1.0 for u, t in zip(use, tasks)]


def simulate(batches: list[list[list[Task]]], depth: int, layout: Layout) -> dict:
    """The stage's wall seconds and, per role, ``busy`` (time with work) and ``used`` (capacity used) as shares of
    the wall. ``batches[k][p]`` is batch k's phase p, a list of tasks run in order."""
    n = len(batches)
    phases = len(batches[0]) if batches else 0
    pos = [[0, 0] for _ in range(phases)]  # per phase worker: batch, next task
    left_phase: list[list[float | None]] = [[None] * n for _ in range(phases)]
    running: dict[int, tuple[Task, float]] = {}  # phase -> (task, fraction of it left)
    now = 0.0
    busy: dict[str, float] = {}
    used: dict[str, float] = {}

    def ready(p: int, k: int) -> bool:
        if p > 0:
            return left_phase[p - 1][k] is not None
        return k < depth or left_phase[phases - 1][k - depth] is not None

    def start_what_can() -> None:
        progressed = True
        while progressed:
            progressed = False
            for p in range(phases):
                k, i = pos[p]
                if p in running or k >= n or not (i > 0 or ready(p, k)):
                    continue
                tasks = batches[k][p]
                if i < len(tasks) and tasks[i].seconds > EPS:
                    running[p] = (tasks[i], 1.0)
                    continue
                pos[p][1] += 1  # an empty task (or the end of the phase)
                if pos[p][1] >= len(tasks):
                    left_phase[p][k] = now
                    pos[p] = [k + 1, 0]
                progressed = True

    start_what_can()
    while running:
        order = sorted(running)
        tasks = [running[p][0] for p in order]
        r = rates(tasks, layout)
        dt = min(running[p][1] / (rr / t.seconds) for p, t, rr in zip(order, tasks, r) if rr > EPS)
        for role in {t.role for t in tasks}:
            busy[role] = busy.get(role, 0.0) + dt
        for p, t, rr in zip(order, tasks, r):
            used[t.role] = used.get(t.role, 0.0) + dt * rr * t.share
            task, frac = running[p]
            running[p] = (task, frac - dt * rr / t.seconds)
        now += dt
        for p in order:
            if running[p][1] <= 1e-9:
                del running[p]
                k = pos[p][0]
                pos[p][1] += 1
                if pos[p][1] >= len(batches[k][p]):
                    left_phase[p][k] = now
                    pos[p] = [k + 1, 0]
        start_what_can()
    wall = now
    roles = sorted(busy.keys() | used.keys())
    return {"wall_seconds": round(wall, 3),
            "busy": {r: round(busy.get(r, 0.0) / wall, 3) if wall else None for r in roles},
            "used": {r: round(used.get(r, 0.0) / wall, 3) if wall else None for r in roles}}
