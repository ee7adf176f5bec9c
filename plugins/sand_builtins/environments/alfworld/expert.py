"""ALFWorld's handcoded expert speaking alfworld 0.3.5's placing command, ``put X in/on Y``.

alfworld 0.4.x's expert emits ``move X to Y`` (the 2.1.2 game grammar); on the
2.1.1 games SAND's papers use, that command is never admissible, so the
installed expert would get stuck. Its heuristics are otherwise those of 0.3.5,
which differed from 0.4.x only in that one command string. The wrapper shows
the installed policy the world in the 0.4 spelling and translates its answer
back, so the installed code runs unchanged:

* the admissible commands and the last action it sees are rewritten
  ``put X in/on Y`` -> ``move X to Y`` (order kept: its random tie-breaks pick
  the same command), and its ``move X to Y`` answer is mapped back to the
  engine's own command;
* its state tracking alone sees the engine's ``put X in/on Y`` as the last
  action, as in 0.3.5 (0.4.x tests ``"put" in last_action`` there, which a
  ``move`` command never passes).

Nothing in the installed package or in any module global is changed. This
module imports alfworld; import it only where the live expert is needed.
"""

from __future__ import annotations

import functools
import random
import re
from typing import Any

from alfworld.agents.environment.alfred_tw_env import AlfredExpert
from alfworld.agents.expert import HandCodedTWAgent

EXPERT_CAP = 150
"""Steps the live expert may take before its game counts as unsolved."""

_PUT_RE = re.compile(r"^put (?P<o>.+?) in/on (?P<r>.+)$")
_MOVE_RE = re.compile(r"^move (?P<o>.+?) to (?P<r>.+)$")


def as_move(command: str) -> str:
    """``put X in/on Y`` -> ``move X to Y`` (other commands unchanged): the spelling the installed expert knows."""
    m = _PUT_RE.match(command)
    return f"move {m['o']} to {m['r']}" if m else command


def as_put(command: str) -> str:
    """``move X to Y`` -> ``put X in/on Y`` (other commands unchanged): the 0.3.5 spelling."""
    m = _MOVE_RE.match(command)
    return f"put {m['o']} in/on {m['r']}" if m else command


class _PutTracking:
    """Mixin for an installed task policy: its state tracking sees the last action as the engine ran it."""

    def update_state_tracking(self, game_state: Any, last_action: str) -> None:
        super().update_state_tracking(game_state, as_put(last_action))  # type: ignore[misc]


@functools.lru_cache(maxsize=None)
def _with_put_tracking(policy: type) -> type:
    return type(f"{policy.__name__}035", (_PutTracking, policy), {})


class PutSyntaxAgent(HandCodedTWAgent):
    """The installed ``HandCodedTWAgent`` answering in 0.3.5 syntax (see the module docstring)."""

    def get_task_policy(self, task_param: dict) -> type:
        return _with_put_tracking(super().get_task_policy(task_param))

    def act(self, game_state: Any, reward: float, done: bool, last_action: str = "") -> str:
        engine_commands = [str(c) for c in game_state["admissible_commands"]]
        shown = [as_move(c) for c in engine_commands]
        view = dict(game_state)
        view["admissible_commands"] = shown
        action = super().act(view, reward, done, as_move(last_action))
        return dict(zip(shown, engine_commands)).get(action, as_put(action))


class PutSyntaxExpert(AlfredExpert):
    """alfworld's ``AlfredExpert`` wrapper (handcoded) driving :class:`PutSyntaxAgent`."""

    def __init__(self, env: Any = None):
        super().__init__(env=env, expert_type="handcoded")

    def load(self, gamefile: str) -> None:
        super().load(gamefile)
        self._handcoded_expert = PutSyntaxAgent(max_steps=200)  # what AlfredExpert.load builds, in 0.3.5 syntax


def handcoded_expert_actions(start: Any, gamefile: str) -> list[str] | None:
    """Run the expert on ``gamefile`` in its own engine; its actions, or None when it fails within the cap.

    ``start(gamefile, wrapper)`` opens a TextWorld env with the given expert
    wrapper last. Ties are broken with :mod:`random` seeded 0; the caller's
    random state is restored afterwards.
    """
    state_before = random.getstate()
    env = start(gamefile, PutSyntaxExpert())
    try:
        random.seed(0)  # the expert breaks ties at random
        state = env.reset()
        actions: list[str] = []
        while len(actions) < EXPERT_CAP and not state["won"]:
            action = state["extra.expert_plan"][0]
            actions.append(action)
            state, _, _ = env.step(action)
    finally:
        env.close()
        random.setstate(state_before)
    return actions if state["won"] else None
