"""ALFWorld (text mode, TextWorld engine) as a SAND environment.

Install with ``pip install 'sand-framework[alfworld]'`` (alfworld 0.4.2; it
compiles two dependencies, ~100 s, needs gcc and cmake). The game files come
from ``alfworld-download`` or any folder laid out like ``$ALFWORLD_DATA``
(``json_2.1.1/{train,valid_seen,valid_unseen}/<task>/<trial>/game.tw-pddl``);
set ``ALFWORLD_DATA`` or the ``data_dir`` parameter. This module imports
without alfworld; using the environment without it raises
:class:`~sand_framework.errors.EnvironmentUnavailable`.

Task ids
    ``<split dir>/<task>/<trial>``, e.g.
    ``valid_seen/look_at_obj_in_light-AlarmClock-None-DeskLamp-323/trial_T20190909_044715_250790``:
    the game's path below ``json_2.1.1``, so an id means the same game on any
    machine (ALFWorld's own listing is ``os.walk`` order, which is not portable).

Splits (ETO/MPO protocol, which SAND follows)
    ``train``  ``json_2.1.1/train``; ``seen`` ``valid_seen`` (140 games, ETO's
    "test-seen"/dev); ``unseen`` ``valid_unseen`` (134, ETO's "test-unseen").
    Only *playable* games are listed, by ALFWorld's own rule: the path holds
    neither ``movable`` nor ``Sliced``, ``traj_data.json``'s task type is one of
    the six, ``game.tw-pddl`` exists and says ``"solvable": true``.

Text
    :meth:`reset` returns what ETO shows: the room description and
    ``Your task is to: ...`` (TextWorld's banner dropped). "You arrive at loc N. "
    is stripped from observations like ETO's ``process_ob``.

Actions
    The 2.1.1 game files (up to alfworld 0.3.x, and ETO's copies) place objects
    with ``put X in/on Y``; the 2.1.2 files of alfworld >= 0.4 use ``move X to Y``.
    Both spellings (and ``put X in Y`` / ``put X on Y``) are accepted and
    rewritten to what the loaded game's grammar expects (:attr:`AlfworldEnv.put_syntax`,
    :meth:`AlfworldEnv.describe`). An action that is not admissible gets the
    engine's own ``Nothing happens.``, marked ``valid=False``, and still costs a step.

Reward
    Success, 0 or 1; the episode ends on success or after ``max_steps`` steps
    (default 30; ETO and MPO use 30-40).

Expert
    ``<data>/expert_trajs/<split dir>.jsonl`` when it lists the game (the
    handcoded expert's actions, verified to replay to success), else ALFWorld's
    handcoded TextWorld expert run live with the ``put X in/on Y`` command of
    alfworld 0.3.5 (0.4.x's expert emits ``move X to Y``, which the 2.1.1 games
    reject). Both are rewritten to the game's syntax; the expert's opening
    ``look`` (it repeats the first observation) is dropped unless
    ``keep_initial_look``.

Speed
    A fresh TextWorld PDDL reset translates PDDL to SAS in Python twice
    (1.7-3 s per reset on a loaded 2-core machine). The translation and the
    parsed game logic are cached per game file (process-wide LRU), so a second
    reset of a game costs a fraction of that. Branching is reset + replay (the
    planner state lives in C; deepcopy fails).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import random
import re
import sys
import threading
import types
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sand_framework import hookimpl
from sand_framework.components import Environment
from sand_framework.errors import EnvironmentUnavailable
from sand_framework.types import StepResult

INSTALL_HINT = "pip install 'sand-framework[alfworld]'"
DATA_HINT = (
    "download the game files with `alfworld-download` (they go to ~/.cache/alfworld) and set "
    "ALFWORLD_DATA to that folder, or set the environment's data_dir parameter / ALFWORLD_DATA to a "
    "folder laid out like it (json_2.1.1/{train,valid_seen,valid_unseen}/...)"
)
SPLIT_DIRS = {"train": "train", "seen": "valid_seen", "unseen": "valid_unseen"}
TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
NOTHING_HAPPENS = "Nothing happens."
"""The engine's reply to an action that is not admissible."""
EPISODE_OVER = "The episode is over."

_ARRIVE_RE = re.compile(r"^You arrive at loc \d+\. ")
_TEMPLATE_RE = re.compile(r'template\s*::\s*"([^"]*)"')
_PUT_RE = re.compile(r"^put (?P<o>.+?) (?:in/on|in|on|into|onto) (?P<r>.+)$")
_MOVE_RE = re.compile(r"^move (?P<o>.+?) to (?P<r>.+)$")
_EXPERT_CAP = 150


def _data_dir(configured: str) -> Path:
    raw = configured or os.environ.get("ALFWORLD_DATA", "")
    if not raw:
        raise EnvironmentUnavailable(f"alfworld: no game data configured; {DATA_HINT}")
    path = Path(os.path.expandvars(os.path.expanduser(raw)))
    if not (path / "json_2.1.1").is_dir():
        raise EnvironmentUnavailable(f"alfworld: {str(path)!r} has no json_2.1.1 folder of game files; {DATA_HINT}")
    return path


def _import_engine() -> types.SimpleNamespace:
    """alfworld's wrappers and TextWorld, imported on first use."""
    try:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
    except ImportError as exc:
        raise EnvironmentUnavailable(
            f"alfworld: the 'alfworld' package is not installed ({exc}); {INSTALL_HINT}"
        ) from exc
    return types.SimpleNamespace(textworld=textworld, AlfredDemangler=AlfredDemangler, AlfredInfos=AlfredInfos)


# ---------------------------------------------------------------- translation cache


class _TranslationCache:
    """Memoizes ``fast_downward.pddl2sas`` by (domain, problem, options): a pure, costly function.

    TextWorld's ``PddlState`` calls it twice per reset through the module global
    ``fast_downward`` of ``textworld.envs.pddl.logic``; this proxy replaces that
    global once per process and forwards everything else unchanged.
    """

    def __init__(self, module: Any, size: int):
        self._module = module
        self._size = size
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple, Any] = OrderedDict()
        self.hits = self.misses = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def pddl2sas(self, domain: str, problem: str, *args: Any, **kwargs: Any) -> Any:
        key = (domain, problem, args, tuple(sorted(kwargs.items())))
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                self.hits += 1
                return self._entries[key]
        value = self._module.pddl2sas(domain, problem, *args, **kwargs)
        with self._lock:
            self.misses += 1
            self._entries[key] = value
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return value


_CACHE_LOCK = threading.Lock()


def _install_translation_cache(size: int) -> _TranslationCache | None:
    if size <= 0:
        return None
    with _CACHE_LOCK:
        logic = importlib.import_module("textworld.envs.pddl.logic")
        current = logic.fast_downward
        if isinstance(current, _TranslationCache):
            current._size = max(current._size, 2 * size)
            return current
        proxy = _TranslationCache(current, 2 * size)  # two translations per game (plain + optimized)
        logic.fast_downward = proxy
        return proxy


# ---------------------------------------------------------------- expert (0.3.5 syntax)

_EXPERT_MODULES: dict[str, Any] = {}


def _put_syntax_expert_class() -> type:
    """alfworld's ``HandCodedTWAgent`` with the 0.3.5 placing command ``put X in/on Y``.

    alfworld 0.4.x's expert emits ``move X to Y`` (the 2.1.2 grammar); on 2.1.1
    games that is never admissible. The two expert modules are re-executed from
    their installed source under private names with the command string swapped;
    nothing in the installed package is changed.
    """
    if "tw" in _EXPERT_MODULES:
        return _EXPERT_MODULES["tw"].HandCodedTWAgent
    import importlib.util

    base_name, tw_name = "alfworld.agents.expert.handcoded_expert", "alfworld.agents.expert.handcoded_expert_tw"
    private_base, private_tw = "_sand_alfworld_expert035", "_sand_alfworld_expert035_tw"
    for name, private in ((base_name, private_base), (tw_name, private_tw)):
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise EnvironmentUnavailable(f"alfworld: cannot find {name}; {INSTALL_HINT}")
        source = Path(spec.origin).read_text()
        source = source.replace('"move {} to {}"', '"put {} in/on {}"').replace("'move {} to {}'", "'put {} in/on {}'")
        source = source.replace(base_name, private_base)
        module = types.ModuleType(private)
        module.__file__ = spec.origin
        sys.modules[private] = module
        exec(compile(source, spec.origin, "exec"), module.__dict__)  # noqa: S102 - installed package source
        _EXPERT_MODULES["base" if name == base_name else "tw"] = module
    return _EXPERT_MODULES["tw"].HandCodedTWAgent


# ---------------------------------------------------------------- environment


class AlfworldEnv(Environment):
    """ALFWorld household tasks in text (TextWorld PDDL engine), ETO-style prompts."""

    name = "alfworld"
    description = "ALFWorld text household tasks (train / valid_seen 140 / valid_unseen 134); success reward."

    @dataclass
    class Params:
        data_dir: str = ""
        """Folder laid out like $ALFWORLD_DATA (holds json_2.1.1/); empty = $ALFWORLD_DATA."""
        max_steps: int = 30
        """Step cap per episode, invalid actions included (ETO/MPO use 30-40)."""
        max_train: int = 0
        """Use only the first max_train train games in sorted id order (0 = all)."""
        keep_initial_look: bool = False
        """Keep the handcoded expert's opening `look` (it repeats the first observation)."""
        cache_games: int = 256
        """Games whose PDDL->SAS translation stays cached in this process (0 = no cache)."""

    def __init__(self, params: Any = None):
        super().__init__(params)
        p = self.params
        if p.max_steps < 1:
            raise ValueError(f"alfworld: max_steps must be >= 1, not {p.max_steps}")
        if p.max_train < 0:
            raise ValueError(f"alfworld: max_train must be >= 0, not {p.max_train}")
        self._root: Path | None = None
        self._engine: types.SimpleNamespace | None = None
        self._tasks: dict[str, list[str]] = {}
        self._expert_files: dict[str, dict[str, list[str]]] = {}
        self._experts: dict[str, list[str]] = {}
        self._syntax: dict[str, str] = {}
        self._tw: Any = None
        self._loaded: str | None = None
        self._task: str | None = None
        self._history: list[str] = []
        self._reset_episode_state()

    # ------------------------------------------------------------ set-up

    @property
    def data_dir(self) -> Path:
        if self._root is None:
            self._root = _data_dir(self.params.data_dir)
        return self._root

    def _eng(self) -> types.SimpleNamespace:
        if self._engine is None:
            self._engine = _import_engine()
            _install_translation_cache(self.params.cache_games)
        return self._engine

    def _game_dir(self, task_id: str) -> Path:
        if not isinstance(task_id, str) or task_id.count("/") != 2:
            raise ValueError(f"alfworld: bad task id {task_id!r}; expected '<split dir>/<task>/<trial>', "
                             "e.g. 'valid_seen/pick_and_place_simple-Book-None-Desk-310/trial_T20190908_...'")
        split_dir = task_id.split("/", 1)[0]
        if split_dir not in SPLIT_DIRS.values():
            raise ValueError(f"alfworld: bad task id {task_id!r}: {split_dir!r} is not one of "
                             f"{', '.join(SPLIT_DIRS.values())}")
        path = self.data_dir / "json_2.1.1" / task_id
        if not (path / "game.tw-pddl").is_file():
            raise ValueError(f"alfworld: no game file for task {task_id!r} under {self.data_dir / 'json_2.1.1'}")
        return path

    def close(self) -> None:
        tw, self._tw, self._loaded, self._task = self._tw, None, None, None
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

    def task_id_from_eto(self, eto_id, trajectory=None) -> str:
        """Map an ETO record to its game: named game file, else goal + receptacles, else a replay check."""
        from sand_framework import eto
        from sand_framework.errors import ReplayMismatch

        if getattr(self, "_eto_index", None) is None:
            self._eto_index = eto.AlfworldGameIndex.build(self.data_dir)

        def verify(key: str) -> bool:
            try:
                results = self.replay(key.split("/", 1)[1], trajectory.actions)
            except (ReplayMismatch, ValueError):
                return False
            return bool(results) and results[-1].success  # the expert's actions win on this game

        record = (trajectory.meta.get("eto") if trajectory is not None else None) or {}
        key = eto.alfworld_task_id(trajectory.task if trajectory is not None else "", self._eto_index,
                                   eto_record=record, verify=verify if trajectory is not None else None)
        return key.split("/", 1)[1]  # drop the json_2.1.1/ prefix: task ids are <split>/<task>/<trial>

    def tasks(self, split: str) -> list[str]:
        if split not in SPLIT_DIRS:
            raise ValueError(f"alfworld: unknown split {split!r} (known: {', '.join(SPLIT_DIRS)})")
        if split not in self._tasks:
            ids = playable_games(self.data_dir, SPLIT_DIRS[split])
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
        task_id = task_id or self._task
        if task_id is None:
            for split in ("seen", "unseen", "train"):
                ids = self.tasks(split)
                if ids:
                    task_id = ids[0]
                    break
            else:
                raise ValueError(f"alfworld: no games under {self.data_dir}")
        if task_id not in self._syntax:
            data = json.loads((self._game_dir(task_id) / "game.tw-pddl").read_text())
            templates = _TEMPLATE_RE.findall(data.get("grammar", ""))
            self._syntax[task_id] = "move" if any(t.startswith("move ") for t in templates) else "put"
        return self._syntax[task_id]

    def describe(self) -> dict[str, Any]:
        """Data folder, put/move syntax of the games, split sizes and cache state (for logs and ``sand env``)."""
        info: dict[str, Any] = {"env": self.name, "data_dir": str(self.data_dir), "put_syntax": self.put_syntax(),
                                "max_steps": self.params.max_steps}
        info["splits"] = {s: len(self.tasks(s)) for s in SPLIT_DIRS}
        return info

    def to_game_syntax(self, action: str, syntax: str | None = None) -> str:
        """Rewrite a placing command to ``syntax`` (default: the current game's); other actions unchanged."""
        syntax = syntax or self.put_syntax()
        a = " ".join(str(action).strip().split())
        low = a.lower().rstrip(".")
        m = _PUT_RE.match(low) or _MOVE_RE.match(low)
        if not m:
            return a
        return f"put {m['o']} in/on {m['r']}" if syntax == "put" else f"move {m['o']} to {m['r']}"

    # ------------------------------------------------------------ agent

    def instruction(self) -> str:
        try:
            put = self.put_syntax()
        except Exception:  # noqa: BLE001 - no data yet: show the syntax of the games SAND's papers used
            put = "put"
        place = "put {obj} in/on {recep}" if put == "put" else "move {obj} to {recep}"
        actions = [
            "go to {recep}", "take {obj} from {recep}", place, "open {recep}", "close {recep}",
            "use {lamp}", "clean {obj} with {recep}", "heat {obj} with {recep}", "cool {obj} with {recep}",
            "examine {obj or recep}", "inventory", "look",
        ]
        listing = "\n".join(f"{i}. {a}" for i, a in enumerate(actions, 1))
        return (
            "Interact with a household to solve a task. Imagine you are an intelligent agent in a household "
            "environment and your target is to perform actions to complete the task goal. At the beginning of "
            "your interactions, you will be given a detailed description of the current environment and your "
            "goal to accomplish.\n"
            "For each of your turns, you will be given the observation of the last turn. You should first think "
            "about the current condition and plan for your future actions, and then output your action in this "
            "turn. Your output must strictly follow this format:\n"
            "Thought: your thoughts.\n"
            "Action: your next action\n\n"
            f"The available actions are:\n{listing}\n"
            "where {obj} and {recep} are objects and receptacles as the observations name them "
            "(e.g. apple 1, countertop 2).\n"
            'If the environment outputs "Nothing happens.", your previous action was invalid and you should '
            f"try something else. You have at most {self.params.max_steps} actions."
        )

    def _reset_episode_state(self) -> None:
        self._steps = 0
        self._done = False
        self._success = False
        self._commands: dict[str, str] = {}

    def _set_admissible(self, commands: list[str]) -> None:
        """Map every accepted spelling (normalized) to the engine's admissible command."""
        table: dict[str, str] = {}
        for cmd in commands:
            cmd = str(cmd)
            table[self.normalize_action(cmd)] = cmd
            low = cmd.lower()
            m = _PUT_RE.match(low) or _MOVE_RE.match(low)
            if m:
                o, r = m["o"], m["r"]
                for alias in (f"put {o} in/on {r}", f"put {o} in {r}", f"put {o} on {r}", f"move {o} to {r}"):
                    table.setdefault(self.normalize_action(alias), cmd)
        self._commands = table

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
        gamefile = str(self._game_dir(task_id) / "game.tw-pddl")
        if self._tw is None:
            infos = eng.textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
            self._tw = eng.textworld.start(
                gamefile, request_infos=infos, wrappers=[eng.AlfredDemangler(shuffle=False), eng.AlfredInfos]
            )
            self._loaded = gamefile
        elif self._loaded != gamefile:
            self._tw.load(gamefile)
            self._loaded = gamefile
        return self._tw

    def reset(self, task_id: str) -> str:
        tw = self._load(task_id)
        state = tw.reset()
        self._task, self._history = task_id, []
        self._reset_episode_state()
        self._set_admissible(state["admissible_commands"])
        return task_text(state["feedback"])

    def step(self, action: str) -> StepResult:
        if self._task is None:
            raise RuntimeError("alfworld: step() before reset()")
        if self._done:
            return StepResult(EPISODE_OVER, 1.0 if self._success else 0.0, True, self._success, valid=False)
        self._history.append(action)
        self._steps += 1
        command = self.resolve_action(action)
        if command is None:
            # Not admissible: the engine would answer exactly this without changing its state.
            obs, valid = NOTHING_HAPPENS, False
        else:
            state, _, _ = self._tw.step(command)
            obs, valid = process_observation(state["feedback"]), True
            self._set_admissible(state["admissible_commands"])
            self._success = bool(state["won"])
            self._done = self._success
        if self._steps >= self.params.max_steps:
            self._done = True
        return StepResult(obs, 1.0 if self._success else 0.0, self._done, self._success, valid)

    # ------------------------------------------------------------ expert

    def expert_actions(self, task_id: str) -> list[str]:
        """The expert's actions in this game's syntax (stored file first, else the live handcoded expert)."""
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
            table: dict[str, list[str]] = {}
            path = self.data_dir / "expert_trajs" / f"{split_dir}.jsonl"
            if path.is_file():
                for line in path.read_text().splitlines():
                    if line.strip():
                        rec = json.loads(line)
                        if rec.get("won", True):
                            game = str(rec["game"])
                            game = game.split("json_2.1.1/", 1)[-1]
                            table[game] = [str(a) for a in rec["actions"]]
            self._expert_files[split_dir] = table
        actions = self._expert_files[split_dir].get(task_id)
        return list(actions) if actions else None

    def _handcoded_expert(self, task_id: str) -> list[str]:
        """Run ALFWorld's handcoded expert (0.3.5 ``put`` syntax) in a private engine; return its actions."""
        self._game_dir(task_id)
        eng = self._eng()
        agent_cls = _put_syntax_expert_class()
        from alfworld.agents.environment import alfred_tw_env as tw_env

        gamefile = str(self._game_dir(task_id) / "game.tw-pddl")
        infos = eng.textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile", "expert_plan"])
        original = tw_env.HandCodedTWAgent
        rng = random.getstate()
        tw_env.HandCodedTWAgent = agent_cls
        try:
            expert = tw_env.AlfredExpert(expert_type="handcoded")  # by keyword: the first positional is env
            env = eng.textworld.start(gamefile, request_infos=infos,
                                      wrappers=[eng.AlfredDemangler(shuffle=False), eng.AlfredInfos, expert])
            random.seed(0)  # the expert breaks ties at random
            state = env.reset()
            actions: list[str] = []
            while len(actions) < _EXPERT_CAP and not state["won"]:
                action = state["extra.expert_plan"][0]
                actions.append(action)
                state, _, _ = env.step(action)
            env.close()
        finally:
            tw_env.HandCodedTWAgent = original
            random.setstate(rng)
        if not state["won"]:
            raise RuntimeError(f"alfworld: the handcoded expert did not solve {task_id!r} in {_EXPERT_CAP} steps")
        return actions


# ---------------------------------------------------------------- helpers


def playable_games(root: Path, split_dir: str) -> list[str]:
    """Sorted ids of the playable games of one split folder (ALFWorld's own filter, in portable order)."""
    base = root / "json_2.1.1" / split_dir
    if not base.is_dir():
        return []
    out = []
    for task_dir in sorted(base.iterdir()):
        if "movable" in task_dir.name or "Sliced" in task_dir.name or not task_dir.is_dir():
            continue
        for trial in sorted(task_dir.iterdir()):
            game, traj = trial / "game.tw-pddl", trial / "traj_data.json"
            if not (game.is_file() and traj.is_file()):
                continue
            try:
                if json.loads(traj.read_text()).get("task_type") not in TASK_TYPES:
                    continue
                if json.loads(game.read_text()).get("solvable") is not True:
                    continue
            except (OSError, ValueError):
                continue
            out.append(f"{split_dir}/{task_dir.name}/{trial.name}")
    return out


def task_text(feedback: str) -> str:
    """ETO's task text: TextWorld's welcome banner dropped, room description and ``Your task is to: ...``."""
    text = str(feedback).strip()
    if text.startswith("-="):
        parts = text.split("\n\n")
        text = "\n".join(p.strip() for p in parts[1:] if p.strip())
    return text


def process_observation(feedback: str) -> str:
    """ETO's ``process_ob``: drop "You arrive at loc N. " (2.1.1 games name locations by number)."""
    text = str(feedback).strip()
    return _ARRIVE_RE.sub("", text, count=1)


@hookimpl
def sand_register_environments(register):
    register(AlfworldEnv)
