"""TextWorld-Express task ids: ``<game>:<game_params>:<fold>:<seed>``, parsed and written back canonically.

A task id carries everything needed to rebuild the game (see
:mod:`sand_builtins.environments.textworld_express`), so it is parsed strictly:
a malformed one is refused with what is wrong and the expected shape.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

Game = Literal["coin", "cookingworld", "twc", "mapreader", "arithmetic", "sorting", "simonsays", "peckingorder"]
"""The TextWorld-Express games (the ``game`` parameter's choices)."""
GAMES: tuple[str, ...] = get_args(Game)
FOLDS = ("train", "dev", "test")
_PARAM_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*=[A-Za-z0-9_.\-]+$")


@dataclass(frozen=True)
class TaskId:
    """A parsed task id; ``str(TaskId.parse(s)) == s`` for every canonical id."""

    game: str
    game_params: str
    fold: str
    seed: int

    def __str__(self) -> str:
        return f"{self.game}:{self.game_params}:{self.fold}:{self.seed}"

    @classmethod
    def parse(cls, task_id: str) -> "TaskId":
        """Parse ``game:params:fold:seed``; raise ValueError saying what is wrong."""
        fmt = "expected '<game>:<k=v,...>:<train|dev|test>:<seed>', e.g. 'coin:numLocations=4:train:17'"
        if not isinstance(task_id, str):
            raise ValueError(f"bad task id {task_id!r}: not a string; {fmt}")
        parts = task_id.strip().split(":")
        if len(parts) != 4:
            raise ValueError(f"bad task id {task_id!r}: has {len(parts)} ':'-separated fields, not 4; {fmt}")
        game, params, fold, seed = (p.strip() for p in parts)
        if game not in GAMES:
            raise ValueError(f"bad task id {task_id!r}: unknown game {game!r} (known: {', '.join(GAMES)})")
        if fold not in FOLDS:
            raise ValueError(f"bad task id {task_id!r}: unknown fold {fold!r} (known: {', '.join(FOLDS)})")
        if not seed.isdigit():
            raise ValueError(f"bad task id {task_id!r}: seed {seed!r} is not a non-negative integer")
        return cls(game, canonical_params(params, task_id), fold, int(seed))


def canonical_params(params: str, where: str = "") -> str:
    """``"a=1, b=2"`` -> ``"a=1,b=2"``; raise ValueError on anything not ``key=value``."""
    items = [p.strip() for p in params.split(",")] if params.strip() else []
    for item in items:
        if not _PARAM_RE.match(item):
            raise ValueError(
                f"bad game params {params!r}{f' in task id {where!r}' if where else ''}: "
                f"{item!r} is not 'key=value' (expected e.g. 'numLocations=4,includeDoors=0')"
            )
    return ",".join(items)
