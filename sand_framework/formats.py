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


class _NonFinite:
    """Stands for ``NaN``/``Infinity``, which Python's json accepts but JSON does not: no string, no number."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def loads(text: str) -> Any:
    """``json.loads`` that keeps ``NaN``/``Infinity`` out of the data (they become :class:`_NonFinite` markers,
    which every check below rejects) instead of turning them into floats that ``str()`` makes task ids."""
    return json.loads(text, parse_constant=_NonFinite)


def non_finite(value: Any) -> bool:
    """Does ``value`` contain NaN/Infinity anywhere?"""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, _NonFinite):
            return True
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


def record_id(raw: Any, default: str, where: str) -> str:
    """A record's ``id`` as a string: strings and integers only (not booleans, floats or NaN)."""
    if isinstance(raw, str) and raw.strip():
        return raw
    if isinstance(raw, int) and not isinstance(raw, bool):
        return str(raw)
    if raw is None:
        return default
    raise FormatError(f"{where}: id {raw!r} is not a string or an integer")


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
            if not parsed.valid:
                raise FormatError(f"{where}: conversation {conv_id!r}, turn {i}: no usable 'Action: ...' line "
                                  f"in {t['content'][:80]!r}; an expert turn must end with its action")
            steps.append(Step(thought=parsed.thought, action=parsed.action))
        elif steps:
            obs = t["content"]
            steps[-1].observation = obs[len("Observation:"):].strip() if obs.startswith("Observation:") else obs
    return Trajectory(task_id=str(conv_id), env=env, instruction=turns[0]["content"], task=turns[2]["content"], steps=steps)


def _turns(raw: Any, key_from: str, key_val: str, where: str) -> list[dict[str, str]]:
    if not isinstance(raw, list):
        raise FormatError(f"{where}: the turns are not a list")
    out = []
    for i, t in enumerate(raw):
        if not isinstance(t, dict) or not isinstance(t.get(key_from), str) or not isinstance(t.get(key_val), str):
            got = {k: t.get(k) for k in (key_from, key_val)} if isinstance(t, dict) else t
            raise FormatError(f"{where}: turn {i} needs string {key_from!r} and {key_val!r}, got {got!r}"[:300])
        out.append({"role": {"human": "user", "gpt": "assistant"}.get(t[key_from], t[key_from]),
                    "content": t[key_val]})
    return out


def read_conversations(path: str | os.PathLike) -> list[Any]:
    """The top-level list of a ShareGPT JSON file (ours or ETO's), or a :class:`FormatError` naming the file."""
    try:
        data = loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise FormatError(f"{path}: not a readable ShareGPT JSON file ({str(exc)[:200]})") from None
    if not isinstance(data, list):
        raise FormatError(f"{path}: expected a JSON list of conversations, got {type(data).__name__}")
    return data


def read_sharegpt(path: str | os.PathLike, env: str) -> list[Trajectory]:
    data = read_conversations(path)
    out = []
    for i, item in enumerate(data):
        if not isinstance(item, dict) or "conversations" not in item:
            raise FormatError(f"{path}: item {i} has no 'conversations'")
        where = f"{path}[{i}]"
        if non_finite(item):
            raise FormatError(f"{where}: contains NaN or Infinity, which is not JSON; fix or remove the record")
        out.append(from_conversation(record_id(item.get("id"), str(i), where),
                                     _turns(item["conversations"], "from", "value", where), env, where))
    return out


def read_messages(path: str | os.PathLike, env: str) -> list[Trajectory]:
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise FormatError(f"{path}: not a readable messages JSONL file ({str(exc)[:200]})") from None
    out = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = loads(line)
            turns = _turns(item["messages"], "role", "content", f"{path}:{lineno}")
        except (json.JSONDecodeError, KeyError, TypeError, RecursionError) as exc:
            raise FormatError(f"{path}:{lineno}: not a messages record ({str(exc)[:200]})") from None
        if non_finite(item):
            raise FormatError(f"{path}:{lineno}: contains NaN or Infinity, which is not JSON; fix or remove it")
        out.append(from_conversation(record_id(item.get("id"), str(lineno), f"{path}:{lineno}"), turns, env,
                                     f"{path}:{lineno}"))
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
