"""ALFWorld's game files on disk: the data folder, the playable games of a split, and facts read from them.

Everything here reads files only (no engine), so task lists, id checks and
the stored expert work without the ``alfworld`` package.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from sand_framework.errors import EnvironmentUnavailable

DATA_HINT = (
    "download the game files with `alfworld-download` (they go to ~/.cache/alfworld) and set "
    "ALFWORLD_DATA to that folder, or set the environment's data_dir parameter / ALFWORLD_DATA to a "
    "folder laid out like it (json_2.1.1/{train,valid_seen,valid_unseen}/...)"
)
SPLIT_DIRS = {"train": "train", "seen": "valid_seen", "unseen": "valid_unseen"}
"""SAND split -> folder under ``json_2.1.1``."""
TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)

_TEMPLATE_RE = re.compile(r'template\s*::\s*"([^"]*)"')


def data_dir(configured: str) -> Path:
    """The game data folder (``configured`` or ``$ALFWORLD_DATA``); EnvironmentUnavailable saying how to get it."""
    raw = configured or os.environ.get("ALFWORLD_DATA", "")
    if not raw:
        raise EnvironmentUnavailable(f"alfworld: no game data configured; {DATA_HINT}")
    path = Path(os.path.expandvars(os.path.expanduser(raw)))
    if not (path / "json_2.1.1").is_dir():
        raise EnvironmentUnavailable(f"alfworld: {str(path)!r} has no json_2.1.1 folder of game files; {DATA_HINT}")
    return path


def game_dir(root: Path, task_id: str) -> Path:
    """The folder of task ``<split dir>/<task>/<trial>``; ValueError saying what is wrong with the id."""
    if not isinstance(task_id, str) or task_id.count("/") != 2:
        raise ValueError(f"alfworld: bad task id {task_id!r}; expected '<split dir>/<task>/<trial>', "
                         "e.g. 'valid_seen/pick_and_place_simple-Book-None-Desk-310/trial_T20190908_...'")
    split_dir = task_id.split("/", 1)[0]
    if split_dir not in SPLIT_DIRS.values():
        raise ValueError(f"alfworld: bad task id {task_id!r}: {split_dir!r} is not one of "
                         f"{', '.join(SPLIT_DIRS.values())}")
    path = root / "json_2.1.1" / task_id
    if not (path / "game.tw-pddl").is_file():
        raise ValueError(f"alfworld: no game file for task {task_id!r} under {root / 'json_2.1.1'}")
    return path


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


def placing_syntax(game_file: Path) -> str:
    """``"move"`` when the game's grammar places objects with ``move X to Y`` (2.1.2 files), else ``"put"``."""
    data = json.loads(game_file.read_text())
    templates = _TEMPLATE_RE.findall(data.get("grammar", ""))
    return "move" if any(t.startswith("move ") for t in templates) else "put"


def stored_experts(root: Path, split_dir: str) -> dict[str, list[str]]:
    """Task id -> the handcoded expert's winning actions from ``expert_trajs/<split dir>.jsonl`` (empty if none)."""
    table: dict[str, list[str]] = {}
    path = root / "expert_trajs" / f"{split_dir}.jsonl"
    if path.is_file():
        for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if line.strip():
                try:
                    rec = json.loads(line)
                    if rec.get("won", True):
                        game = str(rec["game"]).split("json_2.1.1/", 1)[-1]
                        table[game] = [str(a) for a in rec["actions"]]
                except (json.JSONDecodeError, AttributeError, KeyError, TypeError) as exc:
                    raise EnvironmentUnavailable(
                        f"alfworld: {path}:{lineno} is not an expert record ({type(exc).__name__}: {str(exc)[:120]}):"
                        " the game data is damaged. Download it again (`alfworld-download`), or delete that file:"
                        " the handcoded expert then solves each game live") from None
    return table
