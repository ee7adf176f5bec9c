"""Light switches: a small, deterministic text puzzle as a SAND environment.

A panel has ``n`` coloured lights and ``n`` numbered switches. Switch ``k``
toggles light ``k`` and, on most panels, one light further right; the task
text says which. The agent must turn every light on.

Task ids
    ``lights:<n>:<seed>``, e.g. ``lights:4:17``. The panel (wiring and which
    lights start on) is a pure function of ``(n, seed)``, so a task id means
    the same puzzle on any machine and under any ``Params``.

Splits (from seeds; no randomness at split time)
    ``train``  seeds ``0 .. n_train-1``, panel sizes cycling through
               ``min_lights .. max_lights``;
    ``seen``   seeds from ``SEEN_OFFSET``: the same size distribution, never
               trained on, and unchanged when ``n_train`` varies;
    ``unseen`` seeds from ``UNSEEN_OFFSET`` on larger panels
               (``unseen_lights``), so it measures generalisation.

Reward
    Progress from the starting panel: of the lights that were off at the
    start, the share that is on now, less any that were on and are now off
    (clamped to [0, 1]). It is 0 after reset, as the engine assumes, and 1
    exactly when every light is on (then ``success`` and ``done``).

Expert
    Every switch only affects its own light and lights to its right, so
    sweeping left to right and pressing switch ``k`` whenever light ``k`` is
    off solves any panel in at most ``n`` presses (and is the unique minimal
    solution).
"""

from __future__ import annotations

import dataclasses
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from sand_framework.components import Environment
from sand_framework.components.text_environment import EPISODE_OVER
from sand_framework.types import StepResult

COLOURS = ("red", "green", "blue", "yellow", "white", "purple", "orange", "pink")
MAX_LIGHTS = len(COLOURS)
SEEN_OFFSET = 100_000
UNSEEN_OFFSET = 200_000

_PRESS_RE = re.compile(r"^(?:press|flip|toggle|push|use)\s+(?:the\s+)?(?:switch\s*)?#?(\d+)$")
_LOOK = {"look", "look around", "look at panel", "look at the panel", "examine panel", "l"}


@dataclass(frozen=True)
class Panel:
    """One puzzle: ``wiring[k]`` is the set of lights switch ``k`` toggles (0-based)."""

    n: int
    seed: int
    wiring: tuple[tuple[int, ...], ...]
    initial: tuple[bool, ...]


def parse_task_id(task_id: Any) -> tuple[int, int]:
    """``"lights:4:17"`` -> ``(4, 17)``; raise ValueError saying what is wrong."""
    fmt = "expected 'lights:<n>:<seed>', e.g. 'lights:4:17'"
    if not isinstance(task_id, str):
        raise ValueError(f"bad task id {task_id!r}: not a string; {fmt}")
    parts = task_id.strip().split(":")
    if len(parts) != 3 or parts[0] != "lights" or not parts[1].isdigit() or not parts[2].isdigit():
        raise ValueError(f"bad task id {task_id!r}; {fmt}")
    n, seed = int(parts[1]), int(parts[2])
    if not 2 <= n <= MAX_LIGHTS:
        raise ValueError(f"bad task id {task_id!r}: panels have 2..{MAX_LIGHTS} lights, not {n}")
    return n, seed


@lru_cache(maxsize=4096)
def make_panel(n: int, seed: int) -> Panel:
    """The panel of ``(n, seed)``: deterministic across runs, machines and Python versions."""
    rng = random.Random(f"light_switches/{n}/{seed}")  # str seeds hash with SHA-512: stable
    wiring = []
    for k in range(n):
        extra = (rng.randrange(k + 1, n),) if k < n - 1 and rng.random() < 0.7 else ()
        wiring.append((k, *extra))
    while True:
        initial = tuple(rng.random() < 0.4 for _ in range(n))
        if not all(initial):  # at least one press needed
            return Panel(n, seed, tuple(wiring), initial)


def solve(panel: Panel) -> list[int]:
    """Switches to press (0-based), left to right; the unique minimal solution."""
    state, presses = list(panel.initial), []
    for k in range(panel.n):
        if not state[k]:
            presses.append(k)
            for j in panel.wiring[k]:
                state[j] = not state[j]
    assert all(state), "left-to-right sweep must solve an upper-triangular panel"
    return presses


def _names(lights: list[int]) -> str:
    names = [COLOURS[i] for i in lights]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


class LightSwitchesEnv(Environment):
    """Turn on every light of a panel whose switches toggle more than one light."""

    name = "light_switches"
    description = "pure-Python light-switch puzzle (example plugin): turn all lights on; exact expert, instant replay"

    @dataclass
    class Params:
        min_lights: int = 3
        """Smallest panel in the train and seen splits."""
        max_lights: int = 4
        """Largest panel in the train and seen splits."""
        unseen_lights: int = 5
        """Panel size of the unseen split (larger than training: held-out difficulty)."""
        n_train: int = 100
        """Training tasks: seeds 0 .. n_train-1."""
        n_seen: int = 20
        """Seen-distribution eval tasks (disjoint seeds, same sizes as train)."""
        n_unseen: int = 20
        """Unseen eval tasks (larger panels)."""
        max_steps: int = 8
        """Step cap per episode; invalid actions count. Must fit the expert (<= one press per light)."""

        def __post_init__(self) -> None:
            for f in ("min_lights", "max_lights", "unseen_lights"):
                v = getattr(self, f)
                if not 2 <= v <= MAX_LIGHTS:
                    raise ValueError(f"{f} must be in 2..{MAX_LIGHTS}, got {v}")
            if self.min_lights > self.max_lights:
                raise ValueError(f"min_lights ({self.min_lights}) must be <= max_lights ({self.max_lights})")
            for f in ("n_train", "n_seen", "n_unseen"):
                v = getattr(self, f)
                if not 0 <= v <= SEEN_OFFSET:
                    raise ValueError(f"{f} must be in 0..{SEEN_OFFSET}, got {v}")
            biggest = max(self.max_lights, self.unseen_lights)
            if self.max_steps < biggest:
                raise ValueError(f"max_steps ({self.max_steps}) must be >= the largest panel ({biggest} lights), "
                                 "or the expert may not fit")

    def __init__(self, params: Any = None):
        super().__init__(params)
        self._panel: Panel | None = None
        self._state: list[bool] = []
        self._steps = 0
        self._done = False

    def clone(self) -> "LightSwitchesEnv":
        return type(self)(dataclasses.replace(self.params))

    # ---------------------------------------------------------------- tasks

    def tasks(self, split: str) -> list[str]:
        p = self.params
        span = p.max_lights - p.min_lights + 1
        if split == "train":
            return [f"lights:{p.min_lights + i % span}:{i}" for i in range(p.n_train)]
        if split == "seen":
            return [f"lights:{p.min_lights + i % span}:{SEEN_OFFSET + i}" for i in range(p.n_seen)]
        if split == "unseen":
            return [f"lights:{p.unseen_lights}:{UNSEEN_OFFSET + i}" for i in range(p.n_unseen)]
        raise ValueError(f"light_switches: unknown split {split!r} (known: {', '.join(self.splits())})")

    def max_steps(self, task_id: str) -> int:
        parse_task_id(task_id)
        return self.params.max_steps

    def instruction(self) -> str:
        return (
            "You are solving a light-switch puzzle. Each switch toggles its own light and maybe one other; "
            "turn every light on.\n"
            "Every turn, reply in exactly this format:\n"
            "Thought: <think briefly about what to do next>\n"
            "Action: <one action>\n"
            "Actions:\n- press switch <number>\n- look\n"
            f"Invalid actions waste a step; you have at most {self.params.max_steps} steps."
        )

    # ---------------------------------------------------------------- agent

    def normalize_action(self, action: str) -> str:
        """Aliases share one canonical form: 'Press 2.', 'flip switch #2' -> 'press switch 2'."""
        base = super().normalize_action(action)
        m = _PRESS_RE.match(base)
        if m:
            return f"press switch {int(m.group(1))}"
        if base in _LOOK:
            return "look"
        return base

    def _describe(self) -> str:
        on = [i for i, s in enumerate(self._state) if s]
        off = [i for i, s in enumerate(self._state) if not s]
        if not off:
            return "All lights are on."
        if not on:
            return "All lights are off."
        return f"On: {_names(on)}. Off: {_names(off)}."

    def reset(self, task_id: str) -> str:
        n, seed = parse_task_id(task_id)
        panel = make_panel(n, seed)
        self._panel, self._state, self._steps, self._done = panel, list(panel.initial), 0, False
        lines = [f"Task: Turn on all {n} lights ({_names(list(range(n)))})."]
        for k, lights in enumerate(panel.wiring):
            lights_txt = f"the {_names(list(lights))} light" + ("s" if len(lights) > 1 else "")
            lines.append(f"Switch {k + 1} toggles {lights_txt}.")
        return "\n".join(lines) + f"\nObservation: {self._describe()}"

    def _reward(self) -> float:
        start = self._panel.initial
        gained = sum(1 for s0, s in zip(start, self._state) if s and not s0)
        lost = sum(1 for s0, s in zip(start, self._state) if s0 and not s)
        return min(1.0, max(0.0, (gained - lost) / (len(start) - sum(start))))

    def step(self, action: str) -> StepResult:
        if self._panel is None:
            raise RuntimeError("light_switches: step() before reset()")
        if self._done:
            return StepResult(EPISODE_OVER, self._reward(), True, all(self._state), valid=False)
        self._steps += 1
        act = self.normalize_action(action) if isinstance(action, str) else ""
        m = re.fullmatch(r"press switch (\d+)", act)
        n = self._panel.n
        if m and 1 <= int(m.group(1)) <= n:
            k = int(m.group(1)) - 1
            changes = []
            for j in self._panel.wiring[k]:
                self._state[j] = not self._state[j]
                changes.append(f"the {COLOURS[j]} light turns {'on' if self._state[j] else 'off'}")
            obs, valid = f"You press switch {k + 1}: {' and '.join(changes)}. {self._describe()}", True
        elif act == "look":
            obs, valid = self._describe(), True
        else:
            obs, valid = f"Nothing happens. Valid actions: press switch <1-{n}>, look.", False
        success = all(self._state)
        self._done = success or self._steps >= self.params.max_steps
        if success:
            obs += " You solved the puzzle!"
        return StepResult(obs, self._reward(), self._done, success, valid)

    # --------------------------------------------------------------- expert

    def expert_actions(self, task_id: str) -> list[str]:
        """Computed from the panel, not by stepping: an episode in progress is untouched."""
        return [f"press switch {k + 1}" for k in solve(make_panel(*parse_task_id(task_id)))]
