"""Reusing finished stages of one run in another (the arms of an experiment share their SFT start).

An ablation and its SAND run differ only after behavior initialization, so
they can start from the very same expert data and SFT weights: that saves the
most expensive stage per arm and removes one source of variance between arms.
An arm that runs another arm's recipe for more iterations (SAND iteration 2)
likewise adopts its finished iterations and computes only the new one.
A stage may be reused only when every recipe setting it depends on is equal;
otherwise the arms would silently compare different starting points.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from sand_framework.components.declared import SYNTHESIS_SLOTS
from sand_framework.config import Recipe
from sand_framework.errors import RunDirError
from sand_framework.store import RunDir, RunLayout

REUSABLE = "expert, train/iter<K> and synth/iter<K>"


def _parse(stage: str) -> tuple[str, int]:
    """``expert`` -> (expert, 0); ``train/iterK`` (K >= 0) and ``synth/iterK`` (K >= 1) -> (kind, K)."""
    parsed = RunLayout.parse_stage(stage)
    if parsed is None or parsed[0] == RunLayout.EVAL:
        raise RunDirError(f"stage {stage!r} cannot be reused; reusable stages: {REUSABLE}")
    return parsed


def stage_inputs(recipe: Recipe, stage: str) -> dict[str, Any]:
    """The resolved recipe settings a stage's output depends on.

    A stage depends on everything before it: iteration K's synthesis samples from iteration K-1's weights,
    so reusing it requires the same SFT start, the same earlier iterations and the same synthesis slots.
    ``run.train_from`` first matters for iteration 1's training: an arm that retrains from the base model
    can still adopt iteration 1's synthesis."""
    kind, k = _parse(stage)
    slot = lambda name: {"name": recipe.slots[name][0], **dataclasses.asdict(recipe.slots[name][1])}  # noqa: E731
    inputs: dict[str, Any] = {"environment": slot("environment"), "data": dataclasses.asdict(recipe.data)}
    if kind == "expert":
        return inputs
    run = recipe.run
    trained = k + 1 if kind == "train" else k  # training stages 0..trained-1 came before this stage's output
    inputs.update(model=dataclasses.asdict(recipe.model), trainer=slot("trainer"), seed=run.seed,
                  epochs=[run.epochs[min(i, len(run.epochs) - 1)] for i in range(trained)])
    if kind == "synth" or k >= 1:
        inputs.update({s: slot(s) for s in SYNTHESIS_SLOTS}, run={"synthesis_batch": run.synthesis_batch})
        inputs["method"] = slot("method")
        if kind == "train":  # a preference method's iterations train with this slot
            inputs["preference_trainer"] = slot("preference_trainer")
        if trained >= 2:  # train_from decides where iteration 1's training starts, so nothing before it
            inputs["run"]["train_from"] = run.train_from
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
        target.adopt(source, stage, RunLayout.stage_folders(stage))
        adopted.append(stage)
    return adopted
