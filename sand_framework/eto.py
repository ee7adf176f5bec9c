"""Task ids of ETO's expert trajectory files, mapped to the ids SAND's environments use.

ETO's public SFT set (``agent-eto/eto-sft-trajectory``: ``alfworld_sft.json``,
``sciworld_sft.json``, ``webshop_sft.json``) is ShareGPT JSON whose ``id`` is
ETO's own task id. These functions take plain data (ids, task texts, file
paths, split lists), so each environment plugin can call them from its
:meth:`~sand_framework.components.Environment.task_id_from_eto` without this
module importing any benchmark package.

WebShop
    ETO's id is the goal index (``"4116"``) -> ``webshop_4116``.
ScienceWorld
    ETO's id is ``f"{taskname2id[task_name]}_{variation}"`` (``"0_12"``), which
    is already the ``scienceworld`` environment's id; it is validated against
    ``taskname2id``.
ALFWorld
    ETO's ids are serial numbers (``alfworld_0`` ...) that do not identify a
    game, so the game is recovered from the trajectory itself, in order:

    1. a ``game_file`` field on the ETO record (some copies carry
       ``data/json_2.1.1/train/<task>/<trial>/game.tw-pddl``), normalized;
    2. otherwise the task text (turn 2) is matched against every game under
       ``$ALFWORLD_DATA/json_2.1.1``: the goal sentence ("Your task is to:
       ...") must equal the one embedded in the game's grammar, and the
       receptacles listed in the first observation ("you see a cabinet 1, a
       drawer 2, ...") must equal the game's receptacle objects, counted per
       type (the scene's fingerprint);
    3. several trials of one task folder can share goal and scene (they differ
       in where objects lie). Then ``verify(key)`` (supplied by the env: replay
       the actions on that game and compare observations) picks the first
       candidate that reproduces the trajectory; without ``verify`` the match
       is ambiguous and :class:`AmbiguousTask` lists the candidates.

    The result is the game's folder relative to ``$ALFWORLD_DATA``,
    ``json_2.1.1/<split>/<task>/<trial>`` (the ``path`` column of the shared
    data's ``manifest.jsonl``).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

ETO_FILES = {"alfworld": "alfworld_sft.json", "scienceworld": "sciworld_sft.json", "webshop": "webshop_sft.json"}
"""ETO's file name per SAND environment name."""


class AmbiguousTask(ValueError):
    """Several tasks match an ETO trajectory and nothing tells them apart."""

    def __init__(self, message: str, candidates: list[str]):
        super().__init__(message)
        self.candidates = candidates


# --------------------------------------------------------------------------- WebShop


def webshop_task_id(eto_id: Any) -> str:
    """``"4116"`` (or ``4116``, ``webshop_4116``) -> ``webshop_4116``."""
    s = str(eto_id).strip()
    s = s[len("webshop_"):] if s.startswith("webshop_") else s
    if not s.isdigit():
        raise ValueError(f"ETO WebShop id {eto_id!r} is not a goal index")
    return f"webshop_{int(s)}"


# --------------------------------------------------------------------------- ScienceWorld


def sciworld_task_id(eto_id: Any, taskname2id: dict[str, int]) -> str:
    """Validate ETO's ``<task number>_<variation>`` against ``taskname2id``; return it canonical."""
    s = str(eto_id).strip()
    m = re.fullmatch(r"(\d+)_(\d+)", s)
    if m is None:
        raise ValueError(f"ETO ScienceWorld id {eto_id!r} is not '<task number>_<variation>' (e.g. '0_12')")
    num = int(m.group(1))
    if num not in set(int(v) for v in taskname2id.values()):
        raise ValueError(f"ETO ScienceWorld id {eto_id!r}: task number {num} is not in taskname2id")
    return f"{num}_{int(m.group(2))}"


# --------------------------------------------------------------------------- ALFWorld

_GAME_KEY_RE = re.compile(r"(json_2\.1\.\d)/(train|valid_seen|valid_unseen|valid_train)/([^/]+)/([^/]+)")
_GOAL_RE = re.compile(r"Your task is to:\s*(.+)")
_RECEP_RE = re.compile(r"\b([a-z]+) (\d+)\b")
_GRAMMAR_TASK_RE = re.compile(r'"task"\s*:\s*\[\s*\{\s*"rhs"\s*:\s*"Your task is to:\s*([^"]*)"')
_PDDL_RECEP_RE = re.compile(r"^\s*([A-Za-z]+)_\S*\s+-\s+receptacle\s*$", re.MULTILINE)


def alfworld_game_key(path: str) -> str:
    """Any spelling of a game's location -> ``json_2.1.1/<split>/<task>/<trial>``.

    Accepts ETO's ``data/json_2.1.1/train/.../game.tw-pddl``, absolute paths
    and the key itself; raises ValueError for anything else.
    """
    m = _GAME_KEY_RE.search(str(path).replace(os.sep, "/"))
    if m is None:
        raise ValueError(f"{path!r} is not an ALFWorld game path (expected .../json_2.1.1/<split>/<task>/<trial>)")
    return "/".join(m.groups())


def _norm_goal(goal: str) -> str:
    return " ".join(goal.strip().lower().split()).rstrip(".")


def alfworld_task_text_features(task_text: str) -> tuple[str, Counter]:
    """(normalized goal sentence, receptacle count per type) from ETO's turn 2 / the env's task text."""
    goal_m = _GOAL_RE.search(task_text)
    if goal_m is None:
        raise ValueError("ALFWorld task text has no 'Your task is to: ...' sentence")
    scene = task_text[: goal_m.start()]
    seen_part = scene.split("you see", 1)[1] if "you see" in scene else scene
    names = {(t, int(n)) for t, n in _RECEP_RE.findall(seen_part.lower())}
    return _norm_goal(goal_m.group(1)), Counter(t for t, _ in names)


@dataclass
class AlfworldGame:
    key: str
    goal: str
    receptacles: Counter = field(default_factory=Counter)


def read_alfworld_game(game_file: str | os.PathLike, key: str | None = None) -> AlfworldGame:
    """Goal sentence and receptacle fingerprint of one ``game.tw-pddl``."""
    data = json.loads(Path(game_file).read_text(encoding="utf-8"))
    m = _GRAMMAR_TASK_RE.search(data.get("grammar", ""))
    goal = _norm_goal(m.group(1)) if m else ""
    receps = Counter(t.lower() for t in _PDDL_RECEP_RE.findall(data.get("pddl_problem", "")))
    return AlfworldGame(key or alfworld_game_key(str(Path(game_file).parent)), goal, receps)


class AlfworldGameIndex:
    """Every game under an ``$ALFWORLD_DATA`` folder, by goal sentence (built once, ~1 ms per game)."""

    def __init__(self, games: Iterable[AlfworldGame]):
        self.games = {g.key: g for g in games}
        self.by_goal: dict[str, list[AlfworldGame]] = {}
        for g in self.games.values():
            self.by_goal.setdefault(g.goal, []).append(g)

    @classmethod
    def build(cls, data_root: str | os.PathLike | None = None, splits: Iterable[str] | None = None) -> "AlfworldGameIndex":
        root = Path(data_root or os.environ.get("ALFWORLD_DATA", ""))
        if not str(root) or not root.is_dir():
            raise ValueError(f"ALFWorld data folder {str(root)!r} not found; set $ALFWORLD_DATA")
        games = []
        for split_dir in sorted(root.glob("json_2.1.*/*")):
            if splits is not None and split_dir.name not in set(splits):
                continue
            for game_file in sorted(split_dir.glob("*/*/game.tw-pddl")):
                rel = game_file.parent.relative_to(root).as_posix()
                games.append(read_alfworld_game(game_file, key=rel))
        return cls(games)

    def candidates(self, task_text: str) -> list[str]:
        goal, receps = alfworld_task_text_features(task_text)
        return sorted(g.key for g in self.by_goal.get(goal, []) if g.receptacles == receps)


def alfworld_task_id(task_text: str, index: AlfworldGameIndex | None = None, eto_record: dict | None = None,
                     verify: Callable[[str], bool] | None = None) -> str:
    """The game (``json_2.1.1/<split>/<task>/<trial>``) an ETO ALFWorld trajectory was recorded on.

    See the module docstring for the order of evidence. ``verify`` is called
    on each candidate only when more than one remains.
    """
    record = eto_record or {}
    if record.get("game_file"):
        key = alfworld_game_key(record["game_file"])
        if index is not None and index.games and key not in index.games:
            raise ValueError(f"ETO record names game {key!r}, which is not under the ALFWorld data folder")
        return key
    if index is None:
        raise ValueError("ETO ALFWorld record has no game_file; matching it by task text needs the games "
                         "($ALFWORLD_DATA)")
    cands = index.candidates(task_text)
    if not cands:
        goal, _ = alfworld_task_text_features(task_text)
        raise ValueError(f"no ALFWorld game has goal {goal!r} and this scene's receptacles")
    if len(cands) == 1:
        return cands[0]
    if verify is not None:
        for key in cands:
            if verify(key):
                return key
        raise ValueError(f"none of the {len(cands)} games matching the task text reproduces the trajectory")
    raise AmbiguousTask(f"{len(cands)} ALFWorld games match this task text: {', '.join(cands[:5])}"
                        f"{' ...' if len(cands) > 5 else ''}", cands)


# --------------------------------------------------------------------------- import


def import_eto(path: str | os.PathLike, env: Any, limit: int | None = None, verify: bool = False
               ) -> tuple[list[Any], list[str]]:
    """ETO ShareGPT records -> trajectories with ``env``'s task ids. Returns (kept, problems).

    Each record's id goes through ``env.task_id_from_eto(id, trajectory)``;
    the trajectory's ``meta["eto"]`` holds ETO's id and any extra record
    fields (``game_file``, ``reward``, ...). A record whose id cannot be
    mapped, or whose task id was already imported (ETO's WebShop file lists
    4116 twice), is skipped and reported. With ``verify`` each trajectory is
    replayed in the environment, must reproduce its observations, and gets
    the replay's reward and success.
    """
    from sand_framework.engine.expert import replay_outcome
    from sand_framework.errors import ReplayMismatch, SandError
    from sand_framework.formats import FormatError, _turns, from_conversation, loads, non_finite, record_id

    try:
        data = loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise FormatError(f"{path}: not a readable ShareGPT JSON file ({str(exc)[:200]})") from None
    if not isinstance(data, list):
        raise FormatError(f"{path}: expected a JSON list of conversations, got {type(data).__name__}")
    kept: list[Any] = []
    problems: list[str] = []
    done: set[str] = set()
    for i, item in enumerate(data[:limit] if limit is not None else data):
        where = f"{path}[{i}]"
        # A malformed record is skipped and listed like an unmappable one, never imported half-right.
        if not isinstance(item, dict) or "conversations" not in item:
            problems.append(f"{where}: no 'conversations', skipped")
            continue
        if non_finite(item):
            problems.append(f"{where}: contains NaN or Infinity (not JSON), skipped")
            continue
        try:
            eto_id = record_id(item.get("id"), str(i), where)
            traj = from_conversation(eto_id, _turns(item["conversations"], "from", "value", where), env.name, where)
        except FormatError as exc:
            problems.append(f"{exc}, skipped")
            continue
        traj.meta["eto"] = {"id": eto_id, **{k: v for k, v in item.items() if k not in ("id", "conversations")}}
        if isinstance(item.get("reward"), (int, float)) and not isinstance(item.get("reward"), bool):
            traj.reward = float(item["reward"])
            traj.success = traj.reward >= 1.0
        try:
            traj.task_id = env.task_id_from_eto(eto_id, traj)
        except ValueError as exc:
            problems.append(f"{where} (ETO id {eto_id!r}): {exc}")
            continue
        if traj.task_id in done:
            problems.append(f"{where} (ETO id {eto_id!r}): duplicate of task {traj.task_id!r}, skipped")
            continue
        if verify:
            try:
                traj.reward, traj.success = replay_outcome(env, traj)
            except ReplayMismatch as exc:
                problems.append(f"{where} ({traj.task_id}): {exc}"[:400])
                continue
            except SandError:
                raise  # the environment itself is unavailable: stop, don't skip every record
            except Exception as exc:  # noqa: BLE001 - an environment error on this one task
                problems.append(f"{where} ({traj.task_id}): replay failed: {exc}"[:400])
                continue
        done.add(traj.task_id)
        kept.append(traj)
    return kept, problems


__all__ = [
    "ETO_FILES", "AlfworldGame", "AlfworldGameIndex", "AmbiguousTask", "alfworld_game_key", "alfworld_task_id",
    "alfworld_task_text_features", "import_eto", "read_alfworld_game", "sciworld_task_id", "webshop_task_id",
]
