"""Which ALFWorld game an ETO trajectory was recorded on (``sand data import-eto --env alfworld``).

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
data's ``manifest.jsonl``). Files only: no engine is needed.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable


class AmbiguousTask(ValueError):
    """Several games match an ETO trajectory and nothing tells them apart."""

    def __init__(self, message: str, candidates: list[str]):
        super().__init__(message)
        self.candidates = candidates


_GAME_KEY_RE = re.compile(r"(json_2\.1\.\d)/(train|valid_seen|valid_unseen|valid_train)/([^/]+)/([^/]+)")
_GOAL_RE = re.compile(r"Your task is to:\s*(.+)")
_RECEP_RE = re.compile(r"\b([a-z]+) (\d+)\b")
_GRAMMAR_TASK_RE = re.compile(r'"task"\s*:\s*\[\s*\{\s*"rhs"\s*:\s*"Your task is to:\s*([^"]*)"')
_PDDL_RECEP_RE = re.compile(r"^\s*([A-Za-z]+)_\S*\s+-\s+receptacle\s*$", re.MULTILINE)


def game_key(path: str) -> str:
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


def task_text_features(task_text: str) -> tuple[str, Counter]:
    """(normalized goal sentence, receptacle count per type) from ETO's turn 2 / the env's task text."""
    goal_m = _GOAL_RE.search(task_text)
    if goal_m is None:
        raise ValueError("ALFWorld task text has no 'Your task is to: ...' sentence")
    scene = task_text[: goal_m.start()]
    seen_part = scene.split("you see", 1)[1] if "you see" in scene else scene
    names = {(t, int(n)) for t, n in _RECEP_RE.findall(seen_part.lower())}
    return _norm_goal(goal_m.group(1)), Counter(t for t, _ in names)


@dataclass
class Game:
    key: str
    goal: str
    receptacles: Counter = field(default_factory=Counter)


def read_game(game_file: str | os.PathLike, key: str | None = None) -> Game:
    """Goal sentence and receptacle fingerprint of one ``game.tw-pddl``."""
    data = json.loads(Path(game_file).read_text(encoding="utf-8"))
    m = _GRAMMAR_TASK_RE.search(data.get("grammar", ""))
    goal = _norm_goal(m.group(1)) if m else ""
    receps = Counter(t.lower() for t in _PDDL_RECEP_RE.findall(data.get("pddl_problem", "")))
    return Game(key or game_key(str(Path(game_file).parent)), goal, receps)


class GameIndex:
    """Every game under an ``$ALFWORLD_DATA`` folder, by goal sentence (built once, ~1 ms per game)."""

    def __init__(self, games: Iterable[Game]):
        self.games = {g.key: g for g in games}
        self.by_goal: dict[str, list[Game]] = {}
        for g in self.games.values():
            self.by_goal.setdefault(g.goal, []).append(g)

    @classmethod
    def build(cls, data_root: str | os.PathLike | None = None, splits: Iterable[str] | None = None) -> "GameIndex":
        root = Path(data_root or os.environ.get("ALFWORLD_DATA", ""))
        if not str(root) or not root.is_dir():
            raise ValueError(f"ALFWorld data folder {str(root)!r} not found; set $ALFWORLD_DATA")
        games = []
        for split_dir in sorted(root.glob("json_2.1.*/*")):
            if splits is not None and split_dir.name not in set(splits):
                continue
            for game_file in sorted(split_dir.glob("*/*/game.tw-pddl")):
                rel = game_file.parent.relative_to(root).as_posix()
                games.append(read_game(game_file, key=rel))
        return cls(games)

    def candidates(self, task_text: str) -> list[str]:
        goal, receps = task_text_features(task_text)
        return sorted(g.key for g in self.by_goal.get(goal, []) if g.receptacles == receps)


def eto_game(task_text: str, index: GameIndex | None = None, eto_record: dict | None = None,
                     verify: Callable[[str], bool] | None = None) -> str:
    """The game (``json_2.1.1/<split>/<task>/<trial>``) an ETO ALFWorld trajectory was recorded on.

    See the module docstring for the order of evidence. ``verify`` is called
    on each candidate only when more than one remains.
    """
    record = eto_record or {}
    if record.get("game_file"):
        key = game_key(record["game_file"])
        if index is not None and index.games and key not in index.games:
            raise ValueError(f"ETO record names game {key!r}, which is not under the ALFWorld data folder")
        return key
    if index is None:
        raise ValueError("ETO ALFWorld record has no game_file; matching it by task text needs the games "
                         "($ALFWORLD_DATA)")
    cands = index.candidates(task_text)
    if not cands:
        goal, _ = task_text_features(task_text)
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
