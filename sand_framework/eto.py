"""ETO's expert trajectory files (``sand data import-eto``), read into trajectories with SAND's task ids.

ETO's public SFT set (``agent-eto/eto-sft-trajectory``: ``alfworld_sft.json``,
``sciworld_sft.json``, ``webshop_sft.json``) is ShareGPT JSON whose ``id`` is
ETO's own task id. What an id means is the benchmark's business, so each
record's id goes through the environment's
:meth:`~sand_framework.components.Environment.task_id_from_eto` (WebShop's
goal index, ScienceWorld's ``<task>_<variation>``, ALFWorld's serial number
matched to a game file); this module knows no benchmark.
"""

from __future__ import annotations

import os
from typing import Any


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
    from sand_framework.rollout import replay_outcome
    from sand_framework.errors import ReplayMismatch, SandError
    from sand_framework.formats import FormatError, _turns, from_conversation, non_finite, read_conversations, record_id

    data = read_conversations(path)
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
