"""The ``alfworld`` environment: ALFWorld's text games on TextWorld's PDDL engine, with ETO's prompts."""

from __future__ import annotations

import dataclasses
import logging
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from annotated_types import Ge, Interval

from sand_builtins.environments.alfworld import games, text
from sand_builtins.environments.alfworld.engine import import_engine, translations_cached
from sand_framework.components.environment import MAX_EPISODE_STEPS
from sand_framework.components.text_environment import Outcome, TextEnvironment
from sand_framework.config.paramdoc import SpeedOnly
from sand_framework.types import Trajectory

log = logging.getLogger(__name__)


class AlfworldEnv(TextEnvironment["AlfworldEnv.Params"]):
    """ALFWorld household tasks in text (TextWorld PDDL engine), ETO-style prompts."""

    name = "alfworld"
    benchmark = "alfworld"
    requires = {"alfworld": "alfworld", "textworld": "alfworld", "fast_downward": "alfworld"}
    description = "ALFWorld text household tasks (train / valid_seen 140 / valid_unseen 134); success reward."

    @dataclass
    class Params:
        data_dir: str = ""
        """Folder laid out like $ALFWORLD_DATA (holds json_2.1.1/); empty = $ALFWORLD_DATA."""
        max_steps: Annotated[int, Interval(ge=1, le=MAX_EPISODE_STEPS)] = 30
        """Step cap per episode, invalid actions included (ETO/MPO use 30-40); at most 1000."""
        max_train: Annotated[int, Ge(0)] = 0
        """Use only the first max_train train games in sorted id order (0 = all)."""
        keep_initial_look: bool = False
        """Keep the handcoded expert's opening `look` (it repeats the first observation)."""
        cache_games: Annotated[int, Ge(0), SpeedOnly(
            "a memo of TextWorld's PDDL translation, a pure function (engine.TranslationCache): only how long a "
            "reset takes")] = 256
        """Games whose PDDL->SAS translation stays cached in this process (0 = no cache)."""

    def __init__(self, params: Any = None):
        super().__init__(params)
        self._root: Path | None = None
        self._engine: types.SimpleNamespace | None = None
        self._tasks: dict[str, list[str]] = {}
        self._expert_files: dict[str, dict[str, list[str]]] = {}
        """Split folder -> the stored expert actions of its games (read on first use)."""
        self._experts: dict[str, list[str]] = {}
        self._syntax: dict[str, str] = {}
        self._eto_index: Any = None
        self._tw: Any = None
        self._loaded: str | None = None
        self._commands: dict[str, str] = {}

    # ------------------------------------------------------------ set-up

    @property
    def data_dir(self) -> Path:
        if self._root is None:
            self._root = games.data_dir(self.params.data_dir)
        return self._root

    def _eng(self) -> types.SimpleNamespace:
        if self._engine is None:
            self._engine = import_engine()
        return self._engine

    def _game_dir(self, task_id: str) -> Path:
        return games.game_dir(self.data_dir, task_id)

    def _gamefile(self, task_id: str) -> str:
        return str(self._game_dir(task_id) / "game.tw-pddl")

    def close(self) -> None:
        tw, self._tw, self._loaded, self.episode = self._tw, None, None, None
        if tw is not None:
            try:
                tw.close()
            except Exception:  # noqa: BLE001 - nothing to release on a broken engine
                pass

    def clone(self) -> "AlfworldEnv":
        """A fresh instance with a copy of the params (it shares the process-wide translation cache)."""
        other = type(self)(dataclasses.replace(self.params))
        other._tasks = {k: list(v) for k, v in self._tasks.items()}
        other._expert_files = self._expert_files
        other._experts = dict(self._experts)
        other._syntax = dict(self._syntax)
        return other

    # ------------------------------------------------------------ tasks

    def task_id_from_eto(self, eto_id: str, trajectory: Trajectory | None = None) -> str:
        """Map an ETO record to its game: named game file, else goal + receptacles, else a replay check."""
        from sand_builtins.environments.alfworld import eto_ids
        from sand_framework.errors import ReplayMismatch

        if self._eto_index is None:
            self._eto_index = eto_ids.GameIndex.build(self.data_dir)

        def verify(key: str) -> bool:
            try:
                results = self.replay(key.split("/", 1)[1], trajectory.actions)
            except (ReplayMismatch, ValueError):
                return False
            return bool(results) and results[-1].success  # the expert's actions win on this game

        record = (trajectory.meta.get("eto") if trajectory is not None else None) or {}
        key = eto_ids.eto_game(trajectory.task if trajectory is not None else "", self._eto_index,
                               eto_record=record, verify=verify if trajectory is not None else None)
        return key.split("/", 1)[1]  # drop the json_2.1.1/ prefix: task ids are <split>/<task>/<trial>

    def tasks(self, split: str) -> list[str]:
        if split not in games.SPLIT_DIRS:
            raise ValueError(f"alfworld: unknown split {split!r} (known: {', '.join(games.SPLIT_DIRS)})")
        if split not in self._tasks:
            ids = games.playable_games(self.data_dir, games.SPLIT_DIRS[split])
            if split == "train" and self.params.max_train:
                ids = ids[: self.params.max_train]
            self._tasks[split] = ids
        return list(self._tasks[split])

    def max_steps(self, task_id: str) -> int:
        self._game_dir(task_id)
        return self.params.max_steps

    # ------------------------------------------------------------ syntax

    def put_syntax(self, task_id: str | None = None) -> str:
        """``"put"`` (``put X in/on Y``, 2.1.1 games) or ``"move"`` (``move X to Y``, 2.1.2 games).

        Read from the grammar embedded in the game file of ``task_id`` (default:
        the current task, else the first game of any split).
        """
        task_id = task_id or (self.episode.task_id if self.episode is not None else None)
        if task_id is None:
            for split in ("seen", "unseen", "train"):
                ids = self.tasks(split)
                if ids:
                    task_id = ids[0]
                    break
            else:
                raise ValueError(f"alfworld: no games under {self.data_dir}")
        if task_id not in self._syntax:
            self._syntax[task_id] = games.placing_syntax(self._game_dir(task_id) / "game.tw-pddl")
        return self._syntax[task_id]

    def describe(self) -> dict[str, Any]:
        """Data folder, put/move syntax of the games, split sizes and cache state (for logs and ``sand env``)."""
        info: dict[str, Any] = {"env": self.name, "data_dir": str(self.data_dir), "put_syntax": self.put_syntax(),
                                "max_steps": self.params.max_steps}
        info["splits"] = {s: len(self.tasks(s)) for s in games.SPLIT_DIRS}
        return info

    def to_game_syntax(self, action: str, syntax: str | None = None) -> str:
        """Rewrite a placing command to ``syntax`` (default: the current game's); other actions unchanged."""
        return text.to_syntax(action, syntax or self.put_syntax())

    # ------------------------------------------------------------ agent

    def instruction(self) -> str:
        try:
            put = self.put_syntax()
        except Exception:  # noqa: BLE001 - no data yet: show the syntax of the games SAND's papers used
            put = "put"
        return text.instruction(put, self.params.max_steps)

    def resolve_action(self, action: str) -> str | None:
        """The admissible engine command ``action`` stands for in the current state (None: not admissible)."""
        return self._commands.get(self.normalize_action(action)) if isinstance(action, str) else None

    @property
    def admissible_commands(self) -> list[str]:
        """The engine's admissible commands in the current state (sorted)."""
        return sorted(set(self._commands.values()))

    def _load(self, task_id: str) -> Any:
        """The TextWorld env holding ``task_id``'s game (re-loaded only when the game changes)."""
        eng = self._eng()
        gamefile = self._gamefile(task_id)
        if self._tw is None:
            infos = eng.textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
            with translations_cached(self.params.cache_games):
                self._tw = eng.textworld.start(
                    gamefile, request_infos=infos, wrappers=[eng.AlfredDemangler(shuffle=False), eng.AlfredInfos]
                )
            self._loaded = gamefile
        elif self._loaded != gamefile:
            with translations_cached(self.params.cache_games):
                self._tw.load(gamefile)
            self._loaded = gamefile
        return self._tw

    def start(self, task_id: str) -> str:
        tw = self._load(task_id)
        with translations_cached(self.params.cache_games):
            state = tw.reset()
        self._commands = text.command_table(state["admissible_commands"], self.normalize_action)
        return text.task_text(state["feedback"])

    def act(self, action: str) -> Outcome:
        command = self.resolve_action(action)
        if command is None:
            # Not admissible: the engine would answer exactly this without changing its state.
            return Outcome(text.NOTHING_HAPPENS, valid=False)
        state, _, _ = self._tw.step(command)
        self._commands = text.command_table(state["admissible_commands"], self.normalize_action)
        won = bool(state["won"])
        return Outcome(text.process_observation(state["feedback"]), True, 1.0 if won else 0.0, won, ends=won)

    # ------------------------------------------------------------ expert

    def expert_actions(self, task_id: str) -> list[str]:
        """The expert's actions in this game's syntax (stored file first, else the live handcoded expert); none
        (an empty list, warned) for a game the handcoded expert cannot solve, whose trajectory the expert stage then
        drops as unsuccessful instead of ending the stage."""
        syntax = self.put_syntax(task_id)
        if task_id not in self._experts:
            actions = self._stored_expert(task_id)
            if actions is None:
                actions = self._handcoded_expert(task_id)
            if not self.params.keep_initial_look and len(actions) > 1 and actions[0].strip() == "look":
                actions = actions[1:]
            self._experts[task_id] = actions
        return [self.to_game_syntax(a, syntax) for a in self._experts[task_id]]

    def _stored_expert(self, task_id: str) -> list[str] | None:
        split_dir = task_id.split("/", 1)[0]
        if split_dir not in self._expert_files:
            self._expert_files[split_dir] = games.stored_experts(self.data_dir, split_dir)
        actions = self._expert_files[split_dir].get(task_id)
        return list(actions) if actions else None

    def _handcoded_expert(self, task_id: str) -> list[str]:
        """Run ALFWorld's handcoded expert (0.3.5 ``put`` syntax) in a private engine; return its actions."""
        gamefile = self._gamefile(task_id)
        eng = self._eng()
        from sand_builtins.environments.alfworld.expert import EXPERT_CAP, handcoded_expert_actions

        def start(path: str, expert: Any) -> Any:
            infos = eng.textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile", "expert_plan"])
            return eng.textworld.start(path, request_infos=infos,
                                       wrappers=[eng.AlfredDemangler(shuffle=False), eng.AlfredInfos, expert])

        with translations_cached(self.params.cache_games):
            actions = handcoded_expert_actions(start, gamefile)
        if actions is None:  # no gold path: the expert stage drops the empty, unsuccessful trajectory
            log.warning("alfworld: the handcoded expert did not solve %r in %d steps; the game has no expert "
                        "trajectory", task_id, EXPERT_CAP)
            return []
        return actions
