"""The plugin registers its components through SAND's hooks, like any other plugin."""

from __future__ import annotations

import importlib.metadata as md

import pytest

import sand_example
from sand_framework.errors import RecipeError
from sand_framework.plugins import PluginSet


def _plugin_set() -> PluginSet:
    ps = PluginSet()
    ps.load_builtins()
    ps.register(sand_example, "example", sand_example.__version__, "module")
    return ps


def test_hooks_register_both_components():
    regs = _plugin_set().registries()
    assert regs["environment"].entries["light_switches"].plugin == "example"
    assert regs["detector"].entries["majority_margin"].plugin == "example"
    env = regs.build("environment", "light_switches", {"max_steps": 6})
    assert env.kind == "environment" and env.params.max_steps == 6


def test_components_rebuild_from_their_spec():
    regs = _plugin_set().registries()
    det = regs.build("detector", "majority_margin", {"threshold": 0.5})
    again = regs.build_spec(det.spec())
    assert type(again) is type(det) and again.params == det.params


def test_recipe_validation_reports_bad_params():
    from pathlib import Path

    from sand_framework.config import load_recipe, validate

    recipe = Path(__file__).resolve().parent.parent / "recipes" / "example.yaml"
    data, _ = load_recipe(str(recipe), ["detector.threshold=2", "environment.max_steps=2"])
    with pytest.raises(RecipeError) as err:
        validate(data, _plugin_set().registries())
    text = str(err.value)
    assert "detector[majority_margin]" in text and "threshold" in text
    assert "environment[light_switches]" in text and "max_steps" in text


def test_entry_point_when_installed():
    eps = [ep for ep in md.entry_points(group="sand") if ep.name == "example"]
    if not eps:
        pytest.skip("sand-example-plugin is not installed (running from the source tree)")
    assert eps[0].value == "sand_example"
    assert eps[0].dist.version == sand_example.__version__
