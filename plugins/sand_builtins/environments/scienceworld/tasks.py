"""ScienceWorld's tasks as ETO numbers them: ids, splits and step caps, from the files in ``data/sciworld/``.

Files only (no JVM): task lists and id checks work without the ``scienceworld`` package.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

_SPLIT_FILES = {"train": "train_indices.json", "seen": "dev_indices.json", "unseen": "test_indices.json"}


@functools.lru_cache(maxsize=None)
def _data_file(name: str) -> Any:
    ref = resources.files("sand_builtins.environments").joinpath("data", "sciworld", name)
    return json.loads(ref.read_text(encoding="utf-8"))


def taskname2id() -> dict[str, int]:
    """ETO's task name -> integer id map (29 names, id 5 unused)."""
    return dict(_data_file("taskname2id.json"))


@functools.lru_cache(maxsize=None)
def _id2taskname() -> dict[str, str]:
    return {str(v): k for k, v in _data_file("taskname2id.json").items()}


def split_pairs(split: str) -> list[tuple[str, int]]:
    """``(task_name, variation)`` pairs of a split, in ETO's file order."""
    if split not in _SPLIT_FILES:
        raise ValueError(f"scienceworld: unknown split {split!r} (known: {', '.join(_SPLIT_FILES)})")
    return [(str(n), int(v)) for n, v in _data_file(_SPLIT_FILES[split])]


def make_task_id(task_name: str, variation: int) -> str:
    ids = _data_file("taskname2id.json")
    if task_name not in ids:
        raise ValueError(f"scienceworld: task name {task_name!r} is not in ETO's taskname2id map")
    return f"{ids[task_name]}_{int(variation)}"


def parse_task_id(task_id: str) -> tuple[str, int]:
    """``"0_12"`` -> ``("task-1-boil", 12)``; ValueError saying what is wrong."""
    fmt = "expected '<task number>_<variation>' as in ETO, e.g. '0_12' (task-1-boil, variation 12)"
    if not isinstance(task_id, str):
        raise ValueError(f"bad task id {task_id!r}: not a string; {fmt}")
    head, sep, var = task_id.strip().partition("_")
    if not sep or not head.isdigit() or not var.isdigit():
        raise ValueError(f"bad task id {task_id!r}: {fmt}")
    name = _id2taskname().get(str(int(head)))
    if name is None:
        known = ", ".join(sorted(_id2taskname(), key=int))
        raise ValueError(f"bad task id {task_id!r}: unknown task number {head} (known: {known})")
    return name, int(var)


def eto_max_steps(task_name: str, default: int) -> int:
    """ETO's step cap for a task (``max_steps.json``); ``default`` for the tasks it has none for."""
    return int(_data_file("max_steps.json").get(task_name, default))
