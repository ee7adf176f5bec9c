"""Readers and writers for the trajectory formats SAND exchanges with the world.

* ETO ShareGPT JSON: ``[{"id", "conversations": [{"from": "human"|"gpt", "value"}]}]``
  — turn 0 instruction, turn 1 ``OK``, turn 2 task, then ``Thought:/Action:``
  turns alternating with ``Observation:`` turns.
* Chat ``messages`` JSONL: one ``{"id", "messages": [{"role", "content"}]}`` per
  line, what TRL and ``datasets`` load directly.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from sand_framework.errors import SandError
from sand_framework.prompting import parse_turn, trajectory_chat
from sand_framework.store.files import atomic_write_text
from sand_framework.types import Step, Trajectory


class FormatError(SandError):
    """A trajectory file does not have the expected structure."""

    exit_code = 2


_ROLE = {"user": "human", "assistant": "gpt", "system": "system"}


def to_sharegpt(traj: Trajectory) -> dict[str, Any]:
    chat = trajectory_chat(traj)
    return {"id": traj.task_id, "conversations": [{"from": _ROLE[m["role"]], "value": m["content"]} for m in chat]}


def to_messages(traj: Trajectory) -> dict[str, Any]:
    return {"id": traj.task_id, "reward": traj.reward, "messages": trajectory_chat(traj)}


def from_conversation(conv_id: str, turns: list[dict[str, str]], env: str, where: str = "") -> Trajectory:
    """Rebuild a trajectory from alternating turns (ShareGPT or messages, normalized to role/content)."""
    if len(turns) < 3:
        raise FormatError(f"{where}: conversation {conv_id!r} has {len(turns)} turns; ETO layout needs >= 3")
    roles = [t["role"] for t in turns]
    if roles[0] != "user" or roles[1] != "assistant" or roles[2] != "user":
        raise FormatError(f"{where}: conversation {conv_id!r} must start user/assistant/user, got {roles[:3]}")
    steps: list[Step] = []
    for i in range(3, len(turns)):
        t = turns[i]
        if t["role"] == "assistant":
            parsed = parse_turn(t["content"])
            steps.append(Step(thought=parsed.thought, action=parsed.action))
        elif steps:
            obs = t["content"]
            steps[-1].observation = obs[len("Observation:"):].strip() if obs.startswith("Observation:") else obs
    return Trajectory(task_id=str(conv_id), env=env, instruction=turns[0]["content"], task=turns[2]["content"], steps=steps)


def _turns(raw: Any, key_from: str, key_val: str, where: str) -> list[dict[str, str]]:
    try:
        return [{"role": {"human": "user", "gpt": "assistant"}.get(t[key_from], t[key_from]), "content": str(t[key_val])}
                for t in raw]
    except (TypeError, KeyError) as exc:
        raise FormatError(f"{where}: malformed turn list ({exc})") from exc


def read_sharegpt(path: str | os.PathLike, env: str) -> list[Trajectory]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FormatError(f"{path}: not a readable ShareGPT JSON file ({exc})") from exc
    if not isinstance(data, list):
        raise FormatError(f"{path}: expected a JSON list of conversations, got {type(data).__name__}")
    out = []
    for i, item in enumerate(data):
        if not isinstance(item, dict) or "conversations" not in item:
            raise FormatError(f"{path}: item {i} has no 'conversations'")
        out.append(from_conversation(item.get("id", str(i)), _turns(item["conversations"], "from", "value", f"{path}[{i}]"),
                                     env, f"{path}[{i}]"))
    return out


def read_messages(path: str | os.PathLike, env: str) -> list[Trajectory]:
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                turns = _turns(item["messages"], "role", "content", f"{path}:{lineno}")
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise FormatError(f"{path}:{lineno}: not a messages record ({exc})") from exc
            out.append(from_conversation(item.get("id", str(lineno)), turns, env, f"{path}:{lineno}"))
    return out


def write_sharegpt(path: str | os.PathLike, trajectories: list[Trajectory]) -> None:
    atomic_write_text(path, json.dumps([to_sharegpt(t) for t in trajectories], indent=1, ensure_ascii=False) + "\n")


def write_messages(path: str | os.PathLike, trajectories: list[Trajectory]) -> None:
    atomic_write_text(path, "".join(json.dumps(to_messages(t), ensure_ascii=False) + "\n" for t in trajectories))


def trajectories_path(out: str | os.PathLike) -> Path:
    """``expert.json`` -> ``expert.trajectories.jsonl``: the full records written next to a ShareGPT file."""
    out = Path(out)
    return out.with_name(out.stem + ".trajectories.jsonl")


def write_trajectory_files(out: str | os.PathLike, trajs: list[Trajectory]) -> tuple[Path, Path]:
    """Write ``out`` (ETO-layout ShareGPT) and :func:`trajectories_path` (``Trajectory.to_dict()`` per line)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_sharegpt(out, trajs)
    side = trajectories_path(out)
    atomic_write_text(side, "".join(json.dumps(t.to_dict(), ensure_ascii=False) + "\n" for t in trajs))
    return out, side


def read_trajectories_jsonl(path: str | os.PathLike) -> list[Trajectory]:
    """Read a ``.trajectories.jsonl`` written by ``sand data``."""
    with open(path, encoding="utf-8") as f:
        return [Trajectory.from_dict(json.loads(line)) for line in f if line.strip()]
