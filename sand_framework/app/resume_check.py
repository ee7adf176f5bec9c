"""The resume check: a run directory's recorded stage fingerprints against the ones its recipe gives now.

``sand run --resume`` compares every finished (or started) stage's fingerprint
(:mod:`sand_framework.app.fingerprint`) with the one the run would compute now and refuses, naming the stage and
the difference, when they differ: an edited ``recipe.yaml``, an edited data file or an upgraded plugin would
otherwise mix two experiments in one run. ``--redo-from STAGE`` discards that stage and the ones after it. A stage
recorded by an older SAND has no fingerprint: it is "unknown", said once, and recorded from then on. A fingerprint
SAND 0.2.0 recorded (format ``"v": 1``) is compared on what the current format records, said once, and rewritten
in the current format. What cannot be compared is said, not refused: this module also writes those notes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sand_framework.app.digests import MISSING
from sand_framework.app.fingerprint import (VERSION, changes, comparable, declared_files, differences, fingerprint,
                                            version_changes, weights_read)
from sand_framework.config import Recipe
from sand_framework.errors import InputsChanged, RunDirError, WeightsAbsent
from sand_framework.plugins import PluginSet
from sand_framework.registry import Registries
from sand_framework.store import RunDir, RunLayout, read_json



def recorded_stages(rd: RunDir) -> list[str]:
    """Stages the run has a trace of in ``state.json`` (finished, or started with a fingerprint), in run order."""
    names = set(rd.finished_stages()) | set(rd.fingerprints())
    return sorted((s for s in names if RunLayout.parse_stage(s) is not None), key=RunLayout.stage_rank)


def stages_from(recipe: Recipe, rd: RunDir, stage: str) -> list[str]:
    """``stage`` and every stage after it that the run holds or will compute (recipe, state.json, folders)."""
    rank = RunLayout.stage_rank(stage)
    found = (set(RunLayout.stages(recipe.run.iterations)) | set(recorded_stages(rd))
             | set(RunLayout.stages_on_disk(rd.path)))
    return sorted((s for s in found if RunLayout.stage_rank(s) >= rank), key=RunLayout.stage_rank)


@dataclass
class ResumeCheck:
    """What :func:`check_resume` found that the user must be told (it refuses everything else)."""

    unknown: list[str] = field(default_factory=list)
    """Stages an older SAND finished without a fingerprint (recorded now)."""
    new_versions: list[str] = field(default_factory=list)
    """``STAGE: plugin P: version A then, B now`` for plugins upgraded since a stage was computed."""
    older_format: list[str] = field(default_factory=list)
    """Stages whose fingerprint an older SAND recorded in format 1: checked on what the current format records,
    then recorded in the current format."""
    unreadable: list[str] = field(default_factory=list)
    """Stages whose fingerprint is in a format this SAND cannot read (a newer SAND's): unchecked, recorded now."""
    unrecorded_files: list[str] = field(default_factory=list)
    """``STAGE: SLOT.PARAM`` for the files a component declares (``Component.input_files``) whose content an
    older SAND did not digest when it computed the stage: unchecked, recorded now (later edits are refused)."""
    rebuilt_start: list[str] = field(default_factory=list)
    """Stages computed (or started) from the SFT start as first trained, whose only changed input is that start,
    trained again since by ``--rebuild-weights``: kept, and continued from the rebuild; the digest they were
    computed from is kept in their fingerprint (``rebuilt_start``)."""


def check_resume(recipe: Recipe, rd: RunDir, registries: Registries, plugins: PluginSet,
                 only: list[str] | None = None) -> ResumeCheck:
    """Refuse (:class:`InputsChanged`, exit 3) a run whose recipe or data changed under a stage it holds,
    naming the first such stage, what differs and the ``--redo-from`` command; otherwise record the
    fingerprints missing from stages an older SAND finished (and rewrite the ones an older SAND recorded in an
    older format, once checked: :func:`comparable`), and report those stages and the plugins whose version
    changed since a stage was computed.

    A new plugin version is said, not refused: every upgrade (SAND's own built-ins included) would otherwise
    strand every finished run, while most releases do not change what a stage computed. The message names
    the stage and the ``--redo-from`` command for the user who decides it does. ``only``: check these stages
    and no others (``--rebuild-weights`` computes the SFT start and nothing after it)."""
    memo: dict[str, str] = {}
    recorded = rd.fingerprints()
    found = ResumeCheck()
    record: dict[str, dict[str, Any]] = {}
    for stage in recorded_stages(rd):
        if only is not None and stage not in only:
            continue
        now = fingerprint(recipe, rd, registries, plugins, stage, memo)
        then = recorded.get(stage)
        if then is None:
            found.unknown.append(stage)
            record[stage] = now
            continue
        then = comparable(then, recipe, stage, now) if isinstance(then, dict) else None
        if then is None:
            found.unreadable.append(stage)
            record[stage] = now
            continue
        unrecorded = [key for key in declared_files(recipe, stage)
                      if key in now.get("inputs", {}) and key not in (then.get("inputs") or {})]
        if unrecorded:  # digested since the SAND that computed the stage: compared on everything else
            then = {**then, "inputs": {**(then.get("inputs") or {}), **{k: now["inputs"][k] for k in unrecorded}}}
        versions = version_changes(then, now)
        absent = _exported_and_absent(rd, stage, then, now)
        diffs = [d for d in changes(then, {**now, "inputs": {**now.get("inputs", {}), **absent}}) if d not in versions]
        if diffs and _only_the_rebuilt_start(rd, then, now):
            found.rebuilt_start.append(stage)
            first = then.get("rebuilt_start") or {RunLayout.weights(0): then["inputs"][RunLayout.weights(0)]}
            record[stage] = {**now, "plugins": then["plugins"], "rebuilt_start": first}
            continue
        if diffs:
            raise InputsChanged(stale_message(recipe, rd, stage, diffs))
        found.new_versions += [f"{stage}: {v}" for v in versions]
        found.unrecorded_files += [f"{stage}: {key}" for key in unrecorded]
        if then is not recorded[stage]:  # an older format or a file not digested then, checked: the current
            if recorded[stage].get("v") != VERSION:  # format, keeping the plugin versions it saw
                found.older_format.append(stage)
            record[stage] = {**now, "plugins": then["plugins"], "inputs": {**now.get("inputs", {}), **absent}}
    if only is None:
        _refuse_stages_that_need_absent_weights(recipe, rd)
    for stage, now in record.items():
        rd.record_fingerprint(stage, now)
    return found


def _exported_and_absent(rd: RunDir, stage: str, then: dict[str, Any], now: dict[str, Any]) -> dict[str, str]:
    """Weights folder -> the digest recorded then, for the weights a finished ``stage`` read that an export left
    out (``sand sweep --export`` names them in ``exported_weights.json``): absent, not changed, so the stage's output
    stands; a stage still to compute that reads them is refused (:func:`_refuse_stages_that_need_absent_weights`)."""
    if not rd.stage_done(stage):
        return {}
    exported_file = rd.path / RunLayout.EXPORTED_WEIGHTS
    exported = read_json(exported_file, {}) if exported_file.is_file() else {}
    exported = exported if isinstance(exported, dict) else {}
    recorded = then.get("inputs") or {}
    return {key: recorded[key] for key, digest in (now.get("inputs") or {}).items()
            if digest == MISSING and key in exported and recorded.get(key, MISSING) != MISSING}


def _refuse_stages_that_need_absent_weights(recipe: Recipe, rd: RunDir) -> None:
    """Refuse (:class:`WeightsAbsent`) a resume whose next stages read weights that are not here: a run exported
    without weights computes what is left only if none of it reads them (an arm retrained from the base model
    after its synthesis finished needs no SFT start)."""
    for stage, absent in stages_needing_absent_weights(recipe, rd):
        raise WeightsAbsent(absent_weights_message(rd, stage, absent))


def stages_needing_absent_weights(recipe: Recipe, rd: RunDir) -> list[tuple[str, list[str]]]:
    """(stage, training stages whose weights it reads and are not here) for every stage the run has still to
    compute that reads absent weights, in run order."""
    done = set(rd.finished_stages())
    out = []
    for stage in RunLayout.stages(recipe.run.iterations):
        absent = [RunLayout.train_stage(j) for j in weights_read(recipe, stage)
                  if rd.weights_missing(RunLayout.train_stage(j))]
        if stage not in done and absent:
            out.append((stage, absent))
    return out


def absent_weights_message(rd: RunDir, stage: str, absent: list[str]) -> str:
    folders = ", ".join(RunLayout.weights(RunLayout.parse_stage(s)[1]) for s in absent)
    if absent == [RunLayout.train_stage(0)]:
        return (f"{rd.path}: stage {stage!r} reads the SFT start's weights, which are not here ({folders}: a run "
                f"exported without weights, `sand sweep --export`). Train them again, keeping every result, with "
                f"`sand run --resume {rd.path} --rebuild-weights`, then resume")
    return (f"{rd.path}: stage {stage!r} reads weights that are not here ({folders}: a run exported without "
            f"weights). Compute them again with `sand run --resume {rd.path} --redo-from {absent[-1]}`")


def _only_the_rebuilt_start(rd: RunDir, then: dict[str, Any], now: dict[str, Any]) -> bool:
    """``then`` and ``now`` differ in the SFT start's weights alone, and ``--rebuild-weights`` trained that start
    again (its ``train/iter0`` result says so): the same recipe, data and seed computed both."""
    key = RunLayout.weights(0)
    a_in, b_in = dict(then.get("inputs") or {}), dict(now.get("inputs") or {})
    if key not in a_in or a_in.get(key) == b_in.get(key) or b_in.get(key) in (None, MISSING):
        return False
    a_in.pop(key), b_in.pop(key)
    result = rd.stage_result(RunLayout.train_stage(0)) if rd.stage_done(RunLayout.train_stage(0)) else None
    return (a_in == b_in and not differences(now.get("recipe", {}), then.get("recipe", {}))
            and isinstance(result, dict) and bool(result.get("rebuilt")))


def rebuilt_start_note(rd: RunDir, stages: list[str]) -> str:
    return (f"{', '.join(stages)} were computed or started from the SFT start as first trained; they are kept "
            f"and continue from its rebuild (--rebuild-weights: the same recipe, data and seed, tensors that may "
            f"differ in floating-point rounding on another machine); the digest they came from is kept in "
            f"{rd.path / RunLayout.STATE} (fingerprints.STAGE.rebuilt_start)")


def versions_note(rd: RunDir, new_versions: list[str]) -> str:
    first = new_versions[0].split(":")[0]
    return (f"plugins changed version since stages of this run were computed ({'; '.join(new_versions)}); the "
            f"finished stages are kept. If the new versions compute them differently, redo them: "
            f"`sand run --resume {rd.path} --redo-from {first}`")


def stale_message(recipe: Recipe, rd: RunDir, stage: str, diffs: list[str]) -> str:
    later = stages_from(recipe, rd, stage)
    state = "finished" if rd.stage_done(stage) else "started"
    if rd.weights_missing(RunLayout.train_stage(0)) and all(d.startswith("weights/") for d in diffs):
        return (f"{rd.path}: stage {stage!r} ({state}) was computed from the SFT start's weights, which are not "
                f"here ({RunLayout.weights(0)}: a run exported without weights, `sand sweep --export`). Train them "
                f"again, keeping every result, with `sand run --resume {rd.path} --rebuild-weights`, then resume")
    return (f"{rd.path}: the recipe or inputs changed since stage {stage!r} was computed ({state}): "
            + "; ".join(diffs) + ". Resuming would mix two experiments in one run. Undo the change (the run's "
            f"recipe is {rd.path / RunLayout.RECIPE}), or discard {', '.join(later)} and compute them from the current "
            f"inputs: `sand run --resume {rd.path} --redo-from {stage}`")


def unknown_note(stages: list[str]) -> str:
    return (f"{len(stages)} stage(s) of this run ({', '.join(stages)}) were finished by an older SAND that recorded "
            "no fingerprint, so whether the recipe or inputs changed under them cannot be checked; their "
            "fingerprints are recorded now, and later changes will be refused")


def older_format_note(stages: list[str]) -> str:
    return (f"{len(stages)} stage(s) of this run ({', '.join(stages)}) were fingerprinted by an older SAND in format "
            f"v1, which also recorded settings that cannot change results (the ones marked speed only in `sand "
            f"components`) and synthesis slots the method never calls; they were checked on the rest and are "
            f"recorded in format v{VERSION} now")


def unrecorded_files_note(entries: list[str]) -> str:
    stages = sorted({e.split(": ")[0] for e in entries}, key=RunLayout.stage_rank)
    files = sorted({e.split(": ", 1)[1] for e in entries})
    return (f"{len(stages)} stage(s) of this run ({', '.join(stages)}) were computed by an older SAND that did not "
            f"record the content of {', '.join(files)}, so whether that file changed since cannot be checked (if it "
            f"did, redo them: `--redo-from {stages[0]}`); its digest is recorded now, and later edits will be "
            "refused")


def unreadable_note(stages: list[str]) -> str:
    return (f"{len(stages)} stage(s) of this run ({', '.join(stages)}) have a fingerprint in a format this SAND "
            f"cannot read (a newer SAND's?), so whether the recipe or inputs changed under them cannot be checked; "
            f"their fingerprints are recorded now in format v{VERSION}, and later changes will be refused")


def redo_from(recipe: Recipe, rd: RunDir, stage: str) -> tuple[list[str], list[str]]:
    """Discard ``stage`` and every stage after it (their folders, files and ``state.json`` entries; nothing
    else); returns (stages discarded, paths removed)."""
    valid = RunLayout.stages(recipe.run.iterations)
    if RunLayout.parse_stage(stage) is None or (stage not in valid and stage not in recorded_stages(rd)):
        raise RunDirError(f"--redo-from {stage!r}: not a stage of this run; its stages are {', '.join(valid)}")
    stages = stages_from(recipe, rd, stage)
    return stages, rd.discard(stages)
