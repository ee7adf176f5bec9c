"""TextWorldExpress (TWX) as a SAND environment.

TWX simulates small text games (coin collector, cooking world, ...) in a JVM
reached through py4j. It is the default environment because it needs no data
download, resets in ~3 ms and steps in <1 ms, so SAND's branching (reset +
replay of an action prefix) costs almost nothing, and the coin collector with
few rooms is simple enough for a 135M model to solve some tasks after SFT.

Task ids
    ``<game>:<game_params>:<fold>:<seed>``, e.g.
    ``coin:numLocations=4,numDistractorItems=0,includeDoors=0:train:17``.
    A task id carries everything needed to rebuild the game, so a task id in a
    trajectory file means the same game on any machine and under any
    ``Params``. ``game_params`` may be empty (``coin::test:20003``); it never
    contains ``:``.

Splits (deterministic, no randomness involved)
    ``train``  the first ``n_train`` seeds of TWX's train fold;
    ``seen``   the *last* ``n_seen`` seeds of the train fold: same
               distribution, never trained on, and unchanged when ``n_train``
               varies (an ablation over training-set size keeps its eval set);
    ``unseen`` the first ``n_unseen`` seeds of TWX's ``test`` fold (games built
               from held-out names/layouts); ``unseen_fold="dev"`` uses dev.

Reward
    TWX's normalized score clamped to [0, 1] (the episode's score so far, not
    the per-step delta); ``success`` is TWX's ``tasksuccess``.

Expert
    TWX's gold paths reach success but are poor demonstrations: the coin gold
    path is a random walk (``move north, move south, move north, ...``) that
    starts with a redundant ``look around`` repeating the reset observation;
    cookingworld's contains no-op actions TWX itself rejects; twc's goes on
    after success. :meth:`TextWorldExpressEnv._clean_gold` drops the rejected
    actions and the tail, and (``shorten_expert``) cuts navigation cycles; the
    result is replayed to check it still succeeds, else the raw gold path is
    used. Note that the cut coin path walks straight to the coin's room, which
    the agent cannot know before it sees the coin.

Expert thoughts
    With ``expert_thoughts`` (default) every gold action gets one short ReAct
    thought from :mod:`~sand_builtins.environments.textworld_express_thoughts`,
    written only from the task and the observations so far ("There is no coin
    in the kitchen, so I'll explore the pantry to the north."); the cut coin
    path's foreknowledge is never put into words.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from annotated_types import Ge, Interval

from sand_builtins.environments import textworld_express_thoughts as twx_thoughts
from sand_builtins.environments.jvm import reap_java
from sand_builtins.environments.textworld_express_ids import Game, TaskId, canonical_params
from sand_framework import hookimpl
from sand_framework.components.environment import MAX_EPISODE_STEPS
from sand_framework.components.text_environment import Outcome, TextEnvironment
from sand_framework.errors import EnvironmentUnavailable
from sand_framework.types import Step

UNKNOWN_ACTION = "Unknown action: I'm not sure what you mean."
"""TWX's own reply to an action it does not understand (we answer it without a JVM call)."""

_NAV_PREFIXES = ("move ", "look around", "inventory")
"""Actions that only move the agent or look; cycles made of them alone are wandering."""

# Action templates shown in the instruction. TWX lists the valid actions of the
# current state but has no template API, so these are written from its games.
_COMMON = ["look around", "inventory"]
_TEMPLATES: dict[str, list[str]] = {
    "coin": ["move <direction> (north, south, east or west)", "take coin"],
    "cookingworld": [
        "move <direction> (north, south, east or west)", "open/close <container>",
        "take <object>", "read cookbook", "slice/dice/chop <food>", "cook <food> in <stove or oven>",
        "prepare meal", "eat meal",
    ],
    "twc": ["move <direction> (north, south, east or west)", "open/close <container>", "take <object>",
            "put <object> in <container>"],
    "mapreader": ["move <direction> (north, south, east or west)", "read map", "take <object>",
                  "put <object> in <container>"],
    "arithmetic": ["take <object>", "read <object>", "put <object> in box"],
    "sorting": ["take <object>", "put <object> in box"],
    "simonsays": ["the action Simon says, e.g. eat banana"],
    "peckingorder": ["read instructions book", "take <object>"],
}


def _clean(text: str) -> str:
    """TWX pads sentences with double spaces and trailing blanks; normalize them."""
    lines = [re.sub(r" {2,}", " ", line).strip() for line in str(text).strip().splitlines()]
    return "\n".join(line for line in lines if line)


class TextWorldExpressEnv(TextEnvironment["TextWorldExpressEnv.Params"]):
    """TextWorldExpress games with seed-addressed tasks, one JVM per instance."""

    name = "textworld_express"
    requires = {"textworld_express": "textworld"}
    description = "TextWorldExpress text games (coin collector by default); fast reset + replay branching."

    @dataclass
    class Params:
        game: Game = "coin"
        """TWX game name."""
        game_params: str = "numLocations=4,numDistractorItems=0,includeDoors=0"
        """TWX generation properties ``key=value,...``; the default is a 4-room coin hunt without doors."""
        n_train: Annotated[int, Ge(0)] = 200
        """Training tasks: the first n_train seeds of the train fold."""
        n_seen: Annotated[int, Ge(0)] = 50
        """Seen-distribution eval tasks: the last n_seen seeds of the train fold (disjoint from train)."""
        n_unseen: Annotated[int, Ge(0)] = 50
        """Unseen eval tasks: the first n_unseen seeds of ``unseen_fold``."""
        unseen_fold: Literal["test", "dev"] = "test"
        """TWX fold the ``unseen`` split draws from."""
        max_steps: Annotated[int, Interval(ge=1, le=MAX_EPISODE_STEPS)] = 15
        """Step cap per episode (invalid actions count), at most 1000. Shortened coin experts need <= ~6 steps."""
        shorten_expert: bool = True
        """Cut wandering cycles from TWX's gold path (verified to still succeed); unknown-action no-ops
        and actions after success are always dropped."""
        show_valid_actions: bool = False
        """Append the sorted list of valid actions to every observation (longer prompts, easier task)."""
        expert_thoughts: bool = True
        """Give every expert step a short ReAct thought written from what the agent has seen so far
        (:func:`~sand_builtins.environments.textworld_express_thoughts.expert_thought`); false: empty
        thoughts, as before this option existed (runs made then are reproduced with false)."""

    def __init__(self, params: Any = None):
        super().__init__(params)
        self._game_params = canonical_params(self.params.game_params)
        self._twx: Any = None
        self._loaded: tuple[str, str] | None = None
        self._seeds: dict[tuple[str, str, str], list[int]] = {}
        self._experts: dict[str, list[str]] = {}
        self._valid: dict[str, str] = {}

    # ------------------------------------------------------------------ JVM

    def _server(self) -> Any:
        """The TWX wrapper, starting its JVM on first use (~0.5 s) and reusing it after."""
        if self._twx is None:
            try:
                from textworld_express import TextWorldExpressEnv as _TWX
            except ImportError as exc:
                raise EnvironmentUnavailable(
                    "textworld_express needs the 'textworld-express' package and a Java runtime (>= 11): "
                    "pip install 'sand-framework[textworld]'"
                ) from exc
            try:
                # We count steps ourselves (max_steps), so TWX's own cap must never trigger first.
                self._twx = _TWX(envStepLimit=10**9)
            except Exception as exc:  # noqa: BLE001 - py4j/java launch failures
                raise EnvironmentUnavailable(
                    f"textworld_express could not start its JVM ({type(exc).__name__}: {exc}); is `java` on PATH?"
                ) from exc
        return self._twx

    def _load(self, game: str, game_params: str) -> Any:
        """Load a game generator only when it changes (a load costs ~0.1 s, a reset ~3 ms)."""
        twx = self._server()
        if self._loaded != (game, game_params):
            twx.load(game, game_params)  # raises ValueError naming unknown properties
            self._loaded = (game, game_params)
        return twx

    def close(self) -> None:
        """Shut the JVM down and reap it, so no java process outlives the instance. Idempotent."""
        twx, self._twx, self._loaded = self._twx, None, None
        self.episode = None
        if twx is None:
            return
        proc = getattr(twx._gateway, "java_process", None)
        try:
            twx.close()
        except Exception:  # noqa: BLE001 - a dead gateway is already closed
            pass
        twx.close = lambda: None  # TWX's __del__ calls close() again; make that a no-op
        reap_java(proc)

    def clone(self) -> "TextWorldExpressEnv":
        """A new instance (its own JVM, started lazily) with a copy of the params."""
        return type(self)(dataclasses.replace(self.params))

    # ---------------------------------------------------------------- tasks

    def task_id(self, fold: str, seed: int) -> str:
        """The id of ``seed`` in ``fold`` for this instance's game and params."""
        return str(TaskId(self.params.game, self._game_params, fold, int(seed)))

    def _fold_seeds(self, game: str, game_params: str, fold: str) -> list[int]:
        key = (game, game_params, fold)
        if key not in self._seeds:
            twx = self._load(game, game_params)
            getter = {"train": twx.getValidSeedsTrain, "dev": twx.getValidSeedsDev, "test": twx.getValidSeedsTest}
            self._seeds[key] = [int(s) for s in getter[fold]()]
        return self._seeds[key]

    def tasks(self, split: str) -> list[str]:
        p = self.params
        if split in ("train", "seen"):
            seeds = self._fold_seeds(p.game, self._game_params, "train")
            if p.n_train + p.n_seen > len(seeds):
                raise ValueError(
                    f"textworld_express: n_train + n_seen = {p.n_train + p.n_seen} exceeds the "
                    f"{len(seeds)} seeds of {p.game}'s train fold; lower environment.n_train or environment.n_seen"
                )
            chosen = seeds[: p.n_train] if split == "train" else seeds[len(seeds) - p.n_seen :]
            return [self.task_id("train", s) for s in chosen]
        if split == "unseen":
            seeds = self._fold_seeds(p.game, self._game_params, p.unseen_fold)
            return [self.task_id(p.unseen_fold, s) for s in seeds[: p.n_unseen]]
        raise ValueError(f"textworld_express: unknown split {split!r} (known: {', '.join(self.splits())})")

    def max_steps(self, task_id: str) -> int:
        TaskId.parse(task_id)
        return self.params.max_steps

    # ---------------------------------------------------------------- agent

    def instruction(self) -> str:
        game = self.params.game
        actions = list(_TEMPLATES.get(game, []))
        if "includeDoors=1" in self._game_params:
            actions.insert(1, "open door to <direction>")
        lines = "\n".join(f"- {a}" for a in actions + _COMMON)
        return (
            f"You are playing a text game ({game}). Read the task and each observation, then act.\n"
            "Every turn, reply in exactly this format:\n"
            "Thought: <think briefly about what to do next>\n"
            "Action: <one action>\n"
            f"Actions:\n{lines}\n"
            "Write names exactly as the game does. Invalid actions waste a step; "
            f"you have at most {self.params.max_steps} steps."
        )

    def _set_valid(self, valid_actions: Any) -> None:
        """Map normalized form -> TWX's spelling, so 'Move North.' runs as 'move north'."""
        self._valid = {self.normalize_action(a): str(a) for a in valid_actions}

    def _render(self, observation: str) -> str:
        text = _clean(observation)
        if self.params.show_valid_actions and self._valid:
            text += "\nValid actions: " + ", ".join(sorted(set(self._valid.values())))
        return text

    def _start(self, tid: TaskId, gold: bool = False) -> tuple[str, dict]:
        seeds = self._fold_seeds(tid.game, tid.game_params, tid.fold)
        if tid.seed not in set(seeds):
            # TWX would silently build a game from a seed outside the fold; that would leak folds.
            raise ValueError(f"bad task id {str(tid)!r}: seed {tid.seed} is not in {tid.game}'s {tid.fold} fold")
        twx = self._load(tid.game, tid.game_params)
        obs, infos = twx.reset(seed=tid.seed, gameFold=tid.fold, generateGoldPath=gold)
        return obs, infos

    def start(self, task_id: str) -> str:
        tid = TaskId.parse(task_id)
        obs, infos = self._start(tid)
        self._set_valid(infos["validActions"])
        return f"Task: {_clean(infos['taskDescription'])}\nObservation: {self._render(obs)}"

    def act(self, action: str) -> Outcome:
        canonical = self._valid.get(self.normalize_action(action)) if isinstance(action, str) else None
        if canonical is None:
            # Never forwarded: TWX would answer the same, and junk (huge, non-printable) never crosses py4j.
            return Outcome(self._render(UNKNOWN_ACTION), valid=False)
        obs, _, _, infos = self._twx.step(canonical)
        self._set_valid(infos["validActions"])
        reward = min(1.0, max(0.0, float(infos["score"])))
        success = bool(infos["tasksuccess"])
        return Outcome(self._render(obs), True, reward, success,
                       ends=success or bool(infos["taskfailure"]) or reward >= 1.0)

    # --------------------------------------------------------------- expert

    def expert_actions(self, task_id: str) -> list[str]:
        """The (shortened) gold path; an episode in progress is restored afterwards."""
        key = str(TaskId.parse(task_id))
        if key not in self._experts:
            with self.episode_kept():
                self._experts[key] = self._compute_expert(TaskId.parse(key))
        return list(self._experts[key])

    def expert_thought(self, task_id: str, task: str, history: list[Step], action: str) -> str:
        """A templated one-sentence reason for a gold action, from the task text and the steps so far."""
        if not self.params.expert_thoughts:
            return ""
        return twx_thoughts.expert_thought(TaskId.parse(task_id).game, task, history, action)

    def _compute_expert(self, tid: TaskId) -> list[str]:
        _, infos = self._start(tid, gold=True)
        gold = [str(a) for a in self._twx.getGoldActionSequence()]
        path = self._clean_gold(infos, gold, cut_cycles=self.params.shorten_expert)
        if path != gold and not self._succeeds(tid, path):
            return gold
        return path

    def _clean_gold(self, infos: dict, gold: list[str], cut_cycles: bool) -> list[str]:
        """Walk TWX's gold path, keeping only the actions that matter.

        * Actions TWX would answer with "Unknown action" are dropped: they are
          no-ops (cookingworld's gold path re-opens open cupboards) and this
          environment marks them invalid, so an expert must not contain them.
        * The path ends at task success (twc's gold path walks on afterwards,
          but the episode is over by then).
        * With ``cut_cycles``, cycles of pure navigation (move/look/inventory)
          that return to an identical state (room description, inventory,
          score) are cut, which also removes the leading ``look around``.
          Only navigation is cut because actions like ``read map`` change what
          the agent knows, not what it sees; an expert that never reads would
          teach guessing.
        """

        def state(i: dict) -> tuple:
            return (i["look"], i["inventory"], i["score"])

        states, path = [state(infos)], []
        valid = set(infos["validActions"])
        for action in gold:
            if action not in valid:
                continue
            _, _, _, infos = self._twx.step(action)
            valid = set(infos["validActions"])
            if infos["tasksuccess"]:
                path.append(action)
                break
            s = state(infos)
            idx = next((j for j in range(len(states) - 1, -1, -1) if states[j] == s), None)
            if cut_cycles and idx is not None and all(a.startswith(_NAV_PREFIXES) for a in path[idx:] + [action]):
                del states[idx + 1 :], path[idx:]
            else:
                states.append(s)
                path.append(action)
        return path

    def _succeeds(self, tid: TaskId, actions: list[str]) -> bool:
        self._start(tid)
        infos: dict = {}
        for action in actions:
            _, _, _, infos = self._twx.step(action)
        return bool(infos.get("tasksuccess"))


@hookimpl
def sand_register_environments(register):
    register(TextWorldExpressEnv)
