"""Reusing finished stages of one run in another (the arms of an experiment share their SFT start).

An ablation and its SAND run differ only after behavior initialization, so
they can start from the very same expert data and SFT weights: that saves the
most expensive stage per arm and removes one source of variance between arms.
A stage may be reused only when every recipe setting it depends on is equal;
otherwise the arms would silently compare different starting points.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from sand_framework.config import Recipe
from sand_framework.errors import RunDirError
from sand_framework.store import RunDir

STAGE_FOLDERS: dict[str, list[str]] = {
    "expert": ["expert"],
    "train/iter0": ["weights/iter0"],
}
"""Stages that can be reused, with the run-directory folders that hold their output."""


def stage_inputs(recipe: Recipe, stage: str) -> dict[str, Any]:
    """The resolved recipe settings a stage's output depends on."""
    slot = lambda kind: {"name": recipe.slots[kind][0], **dataclasses.asdict(recipe.slots[kind][1])}  # noqa: E731
    inputs: dict[str, Any] = {"environment": slot("environment"), "data": dataclasses.asdict(recipe.data)}
    if stage == "train/iter0":
        inputs.update(model=dataclasses.asdict(recipe.model), trainer=slot("trainer"), seed=recipe.run.seed,
                      epochs=recipe.run.epochs[0])
    elif stage != "expert":
        raise RunDirError(f"stage {stage!r} cannot be reused; reusable stages: {sorted(STAGE_FOLDERS)}")
    return inputs


def _differences(a: Any, b: Any, where: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in _differences(a.get(k), b.get(k), f"{where}.{k}".lstrip("."))]
    return [] if a == b else [f"{where}: {b!r} there, {a!r} here"]


def reuse_stages(target: RunDir, recipe: Recipe, source_dir: str | Path, source_recipe: Recipe,
                 stages: list[str]) -> list[str]:
    """Adopt ``stages`` from the run at ``source_dir`` into ``target``; refuse if their inputs differ.

    Returns the stages adopted (ones already done in ``target`` are left alone).
    """
    source = RunDir.open_existing(source_dir)
    adopted = []
    for stage in stages:
        if target.stage_done(stage):
            continue
        diffs = _differences(stage_inputs(recipe, stage), stage_inputs(source_recipe, stage))
        if diffs:
            raise RunDirError(f"cannot reuse {stage!r} from {source.path}: its inputs differ ("
                              + "; ".join(diffs) + "). Make the recipes agree on these settings, or drop the reuse.")
        target.adopt(source, stage, STAGE_FOLDERS[stage])
        adopted.append(stage)
    return adopted
