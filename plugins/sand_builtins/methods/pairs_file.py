"""``pairs_file``: train the preference trainer on pairs read from a file instead of exploring.

For pairs made elsewhere (ETO's ``construct_preference.py`` output, a TRL
preference JSONL file, another run's ``iterK/pairs.jsonl``, or
``sand data import-pairs`` output): each iteration's units are the pairs of
the file whose task is that unit's trajectory, so they are stored, resumed
and summed like any method's. A pair belongs to a trajectory when its id
(mapped through ``Environment.task_id_from_eto`` for ETO files) is the
trajectory's task id, or, for a pair without an ``id``, when its prompt's task
text is the trajectory's. Pairs of tasks outside the iteration's input are
not trained on (counted in the stage summary; ``unmatched: error`` refuses
them). Nothing is sampled: the stage costs no model call.

The file is read when the recipe is validated (``sand validate``, ``sand
run``, ``--resume``): a missing, malformed or empty file stops the run with
exit 2 before any stage.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sand_framework import hookimpl
from sand_framework.components import IterationData, Method, MethodTools
from sand_framework.errors import SandError
from sand_framework.pairs import read_preference_pairs
from sand_framework.types import PreferencePair, Trajectory

log = logging.getLogger(__name__)


class UnmatchedPairsError(SandError):
    """Pairs of the file name tasks that are not among the iteration's trajectories (``unmatched: error``)."""

    exit_code = 2


class PairsFileMethod(Method["PairsFileMethod.Params"]):
    """Preference pairs read from a file (TRL JSONL or ETO's pair JSON), matched to the iteration's tasks."""

    name = "pairs_file"
    description = "train on preference pairs read from a file (TRL JSONL or ETO's construct_preference.py output)"
    produces = "preference"
    uses = ()
    """No other slot: the pairs come from the file (its content is in every unit, ``file_sha256``, and in the
    stages' fingerprints: :meth:`input_files`)."""

    @dataclass
    class Params:
        path: str = ""
        """The pair file: TRL conversational preference JSON lines (``sand data import-pairs`` output, a run's
        ``iterK/pairs.jsonl``) or ETO's ``construct_preference.py`` JSON list. Required."""
        format: Literal["auto", "trl", "eto"] = "auto"
        """``trl``, ``eto``, or ``auto`` (a file opening with ``[`` is ETO's)."""
        reference: Literal["init", "sft", "base"] = "init"
        """The DPO reference: ``init`` (the weights this iteration starts from: ETO), ``sft`` (the behavior-
        initialization weights: IPR) or ``base`` (the base model)."""
        unmatched: Literal["drop", "error"] = "drop"
        """Pairs whose task is not among the iteration's trajectories: ``drop`` them (counted in the stage
        summary as ``unmatched_pairs``), or ``error`` (stop the stage, naming some)."""

        def validate(self) -> list[str]:
            if not self.path:
                return ["path: the pair file to train on is required (`sand data import-pairs FILE --env ENV -o "
                        "OUT` makes one from ETO's or TRL's pair files)"]
            if not Path(self.path).is_file():
                return [f"path: pair file {self.path!r} not found (or not a regular file)"]
            try:
                read_preference_pairs(self.path, "", self.format)
            except SandError as exc:
                return [f"path: {exc}; check it with `sand data check-pairs {self.path}`"]
            return []

    @classmethod
    def input_files(cls, params: "PairsFileMethod.Params") -> dict[str, str]:
        """The pair file: the stages are computed from its content, so editing it refuses a resume."""
        return {"path": params.path} if params.path else {}

    def _pairs(self, tools: MethodTools) -> tuple[list[PreferencePair], str]:
        cache = tools.shared.get("pairs_file")
        if cache is None:
            env = tools.env
            found = read_preference_pairs(self.params.path, env.name, self.params.format,
                                          map_eto_id=env.task_id_from_eto)
            cache = tools.shared["pairs_file"] = (found.pairs, _digest(self.params.path))
        return cache

    def build(self, trajectories: list[Trajectory], tools: MethodTools, seed: int) -> list[dict[str, Any]]:
        pairs, digest = self._pairs(tools)
        units = []
        for traj in trajectories:
            mine = [(i, p) for i, p in enumerate(pairs) if _belongs(p, traj)]
            units.append({"pairs": [p.to_dict() for _, p in mine], "indices": [i for i, _ in mine],
                          "file_pairs": len(pairs), "file_sha256": digest,
                          "stats": {"pairs": len(mine)}})
        return units

    def assemble(self, units: list[dict[str, Any]], trajectories: list[Trajectory]) -> IterationData:
        """Every matched pair once, in file order; the reference the recipe chose."""
        seen: dict[int, PreferencePair] = {}
        for unit in units:
            for i, raw in zip(unit.get("indices", []), unit.get("pairs", [])):
                seen.setdefault(i, PreferencePair.from_dict(raw))
        total = max((u.get("file_pairs", 0) for u in units), default=0)
        unmatched = total - len(seen)
        if unmatched:
            msg = (f"pairs_file: {unmatched} of the {total} pairs in {self.params.path} name tasks that are not "
                   "among this iteration's trajectories")
            if self.params.unmatched == "error":
                raise UnmatchedPairsError(f"{msg}; match data.* to the file's tasks (ETO files: import the expert "
                                          "data with `sand data import-eto`), or set method.unmatched: drop")
            log.warning("%s; they are not trained on", msg)
        return IterationData(next_expert=list(trajectories), pairs=[seen[i] for i in sorted(seen)],
                             reference=self.params.reference)

    def summarize(self, units: list[dict[str, Any]]) -> dict[str, Any]:
        total = super().summarize(units)
        matched = {i for u in units for i in u.get("indices", [])}
        total["pairs"] = len(matched)
        total["unmatched_pairs"] = max((u.get("file_pairs", 0) for u in units), default=0) - len(matched)
        return total


def _belongs(pair: PreferencePair, traj: Trajectory) -> bool:
    """By task id; a pair whose record had no id, by its prompt's task text."""
    if pair.meta.get("id_given", True):
        return pair.prompt.task_id == traj.task_id
    return pair.prompt.task.strip() == traj.task.strip()


def _digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@hookimpl
def sand_register_methods(register):
    register(PairsFileMethod)
