"""Reusing finished stages of one run in another (the arms of an experiment share their SFT start).

An ablation and its SAND run differ only after behavior initialization, so
they can start from the very same expert data and SFT weights: that saves the
most expensive stage per arm and removes one source of variance between arms.
An arm that runs another arm's recipe for more iterations (SAND iteration 2)
likewise adopts its finished iterations and computes only the new one.
A stage may be reused only when every recipe setting it depends on is equal;
otherwise the arms would silently compare different starting points. What a stage depends on is
:func:`~sand_framework.app.fingerprint.stage_inputs` (importable from here too): one definition for reuse and
for ``--resume``, which checks a run's stages against the same fingerprints.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from sand_framework.config import Recipe
from sand_framework.app.fingerprint import (changes, comparable, differences, fingerprint, stage_inputs,
                                            version_changes)
from sand_framework.errors import RunDirError
from sand_framework.plugins import PluginSet, load_plugins
from sand_framework.registry import Registries
from sand_framework.store import RunDir, RunLayout

log = logging.getLogger(__name__)

REUSABLE = "expert, train/iter<K> and synth/iter<K>"


def _parse(stage: str) -> tuple[str, int]:
    """``expert`` -> (expert, 0); ``train/iterK`` (K >= 0) and ``synth/iterK`` (K >= 1) -> (kind, K)."""
    parsed = RunLayout.parse_stage(stage)
    if parsed is None or parsed[0] == RunLayout.EVAL:
        raise RunDirError(f"stage {stage!r} cannot be reused; reusable stages: {REUSABLE}")
    return parsed


def _differences(a: Any, b: Any, where: str = "") -> list[str]:
    return differences(a, b, where, labels=("there", "here"))


def reuse_stages(target: RunDir, recipe: Recipe, source_dir: str | Path, source_recipe: Recipe,
                 stages: list[str], plugins: PluginSet | None = None, registries: Registries | None = None
                 ) -> list[str]:
    """Adopt ``stages`` from the run at ``source_dir`` into ``target``; refuse if their inputs differ.

    The source stage's fingerprint (what it was computed from: recipe sections, input file digests, plugin
    versions; :mod:`~sand_framework.app.fingerprint`) must equal the one the stage would have in ``target``
    now: a stage is never adopted from a run whose data file or plugins differed, nor before the stages it
    was computed from (list those first). A source run made before fingerprints is compared on the recipe
    settings only; a fingerprint an older SAND recorded in format 1 is compared on what the current format
    records (:func:`~sand_framework.app.fingerprint.comparable`) and adopted rewritten in it.
    ``plugins``/``registries``: the target's (default: the installed plugins).
    Returns the stages adopted (ones already done in ``target`` are left alone).
    """
    if plugins is None or registries is None:
        plugins = load_plugins()
        registries = plugins.registries()
    source = RunDir.open_existing(source_dir)
    adopted = []
    for stage in stages:
        if target.stage_done(stage):
            continue
        _parse(stage)
        recorded = source.fingerprint(stage)
        now = fingerprint(recipe, target, registries, plugins, stage)
        then = comparable(recorded, recipe, stage, now) if isinstance(recorded, dict) else None
        if then is None:  # no fingerprint (or one this SAND cannot read): the recipe settings only
            diffs = _differences(stage_inputs(recipe, stage), stage_inputs(source_recipe, stage))
        else:
            versions = version_changes(then, now, labels=("there", "here"))
            diffs = [d for d in changes(then, now, labels=("there", "here")) if d not in versions]
            if versions and not diffs:  # as on resume: said, not refused (see resume_check.check_resume)
                log.warning("reusing %r from %s, computed with other plugin versions: %s", stage, source.path,
                            "; ".join(versions))
        if diffs:
            missing = [d for d in diffs if "missing here" in d]
            hint = (" Reuse the stages it was computed from too (list them before it in reuse_stages)."
                    if missing else " Make the recipes agree on these settings, or drop the reuse.")
            raise RunDirError(f"cannot reuse {stage!r} from {source.path}: its inputs differ ("
                              + "; ".join(diffs) + ")." + hint)
        # The source's record in the current format (a version-1 one rewritten, keeping the plugin versions it
        # saw), or, without one, what the stage reads here (its inputs are earlier stages', already here).
        record = now if then is None else then if then is recorded else {**now, "plugins": then["plugins"]}
        target.adopt(source, stage, RunLayout.stage_folders(stage), record)
        adopted.append(stage)
    return adopted
