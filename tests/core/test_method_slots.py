"""A method declares the slots it uses, and that set is what a recipe must fill, what a run builds and what its
stages' fingerprints cover (issue 38, item 1).

A baseline's recipe used to carry SAND's detector, sampler, critic and synthesizer, unused, because validation
demanded every slot. Now validation demands the slots every run has and the method's ``uses``; a recipe's other
slots are checked, then left out with a note, so an old recipe (one written with every slot, as every stored run's
``recipe.yaml`` is) keeps its meaning: the same fingerprints, recorded before the change, compare equal after it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sand_framework.app.fingerprint import comparable, recipe_inputs
from sand_framework.app.runner import prepare
from sand_framework.components.declared import EVERY_RUN, SYNTHESIS_SLOTS, required_slots
from sand_framework.config import load_recipe, validate
from sand_framework.errors import RecipeError
from sand_framework.engine.context import RunContext
from sand_framework.errors import ComponentError
from sand_framework.store import RunDir
from sand_framework.store import RunLayout

ROOT = Path(__file__).resolve().parents[2]
SAND_ONLY = ("detector", "sampler", "critic", "synthesizer")


def test_a_baseline_recipe_names_only_the_slots_its_method_uses(registries):
    for ref in ("baselines/eto", "baselines/ipr", "baselines/rft", "baselines/paper/alfworld-eto"):
        data, path = load_recipe(ref)
        assert not set(SAND_ONLY) & set(data), f"{ref} names slots its method does not use"
        recipe = validate(data, registries, str(path))
        assert set(recipe.slots) == set(required_slots(recipe.classes["method"], recipe.run.iterations))
        assert "executor" in recipe.slots and not recipe.notes


def test_a_slot_the_method_does_not_use_is_checked_then_left_out_with_a_note(registries):
    with_sand = load_recipe("baselines/eto", ["detector.name=set_size", "critic.name=rollout_critic"])[0]
    recipe = validate(with_sand, registries)
    assert "detector" not in recipe.slots and "detector" not in recipe.raw
    assert recipe.notes == ["method 'eto' does not use detector, critic: checked, then left out of the run (its "
                            "slots: environment, policy, executor, method, trainer, preference_trainer, evaluator)"]
    plain = validate(load_recipe("baselines/eto")[0], registries)
    assert all(recipe_inputs(recipe, s) == recipe_inputs(plain, s) for s in RunLayout.stages(1))
    with pytest.raises(RecipeError, match=r"detector\[set_size\]\.nope: unknown key"):  # left out, but checked first
        validate(load_recipe("baselines/eto", ["detector.name=set_size", "detector.nope=1"])[0], registries)


def test_a_slot_the_method_uses_is_required_naming_the_method(registries):
    data = load_recipe("repro2/sand")[0]
    del data["detector"]
    with pytest.raises(RecipeError, match=r"detector: missing component slot \(method 'sand' uses it"):
        validate(data, registries)
    bon = load_recipe("baselines/bon-judge")[0]  # iterations 0: the method never runs, so needs none of its slots
    assert "sampler" not in validate(bon, registries).slots
    with pytest.raises(RecipeError, match=r"sampler: missing component slot \(method 'sand' uses it"):
        validate(load_recipe("baselines/bon-judge", ["run.iterations=1"])[0], registries)
    assert set(required_slots(None)) == set(EVERY_RUN) | set(SYNTHESIS_SLOTS)  # unknown method: every slot


def test_a_run_refuses_a_component_outside_its_methods_slots(registries, tmp_path):
    recipe, plugins, regs = prepare(load_recipe("baselines/eto")[0])
    ctx = RunContext(recipe=recipe, run_dir=RunDir(tmp_path), plugins=plugins, registries=regs)
    with pytest.raises(ComponentError, match=r"method 'eto' does not use that slot \(its slots: environment, "):
        ctx.component("sampler")


def test_every_exported_run_reopened_today_has_the_fingerprints_it_recorded():
    """Each exported run's ``recipe.yaml`` was written with every slot (SAND's in a baseline's too); reopened
    now, its unused slots are left out, and every stage's recorded fingerprint still equals today's. (v1's export,
    ``table1-cpu``, predates ``method.explore_tasks``: its method stages record no such setting, so they differ
    for that reason, not this one.)"""
    import json

    runs = sorted(p.parent for p in (ROOT / "docs" / "results" / "table1-cpu-v2").glob("*/seed*/recipe.yaml"))
    assert runs
    for run in runs:
        recipe = prepare(yaml.safe_load((run / RunLayout.RECIPE).read_text()))[0]
        recorded = json.loads((run / "state.json").read_text())["fingerprints"]
        for stage, then in recorded.items():
            now = {"recipe": recipe_inputs(recipe, stage), "inputs": then.get("inputs", {}),
                   "plugins": then.get("plugins", {})}
            assert comparable(then, recipe, stage, now)["recipe"] == now["recipe"], f"{run}: {stage}"


def test_a_stored_baseline_run_with_sands_slots_reopens_without_them_and_the_same_start():
    """v1's ETO run stored a recipe with every slot; reopened now it leaves SAND's out, saying so, and its SFT
    start's recorded fingerprints (which no setting added since touches) still equal today's."""
    import json

    run = ROOT / "docs" / "results" / "table1-cpu" / "eto" / "seed0"
    stored = yaml.safe_load((run / RunLayout.RECIPE).read_text())
    assert set(SAND_ONLY) <= set(stored)
    recipe = prepare(stored)[0]
    assert not set(SAND_ONLY) & set(recipe.slots)
    assert any(n.startswith("method 'eto' does not use detector, sampler, critic, synthesizer") for n in recipe.notes)
    recorded = json.loads((run / "state.json").read_text())["fingerprints"]
    for stage in ("expert", "train/iter0"):
        now = {"recipe": recipe_inputs(recipe, stage), "inputs": {}, "plugins": {}}
        assert comparable(recorded[stage], recipe, stage, now)["recipe"] == now["recipe"], stage


def test_docs_recipes_states_the_slots_each_built_in_method_uses(registries):
    import re

    text = " ".join((ROOT / "docs" / "recipes.md").read_text().split())
    start = text.index("A recipe fills the slots its method uses")
    said = text[start:text.index("```", start)]
    every = re.search(r"those every run has \(([^)]*)\)", said).group(1)
    assert re.findall(r"`(\w+)`", every) == list(EVERY_RUN)
    uses = re.search(r"the method's `uses` \((.*?)\); with", said).group(1)
    for part in uses.split("; "):
        names, slots = part.split(": ")
        for name in re.findall(r"SAND|RFT|ETO|IPR|`pairs_file`", names):
            method = registries["method"].get(name.strip("`").lower())
            assert tuple(re.findall(r"`(\w+)`", slots)) == tuple(method.uses), name


def test_the_note_of_a_run_that_never_runs_its_method_says_why(registries):
    recipe = validate(load_recipe("baselines/bon-judge", ["detector.name=set_size"])[0], registries)
    assert recipe.notes[0].startswith("run.iterations is 0, so the method never runs and the run does not use "
                                      "detector, executor: checked, then left out")
