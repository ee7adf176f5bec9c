"""Recipes: extends, overrides, slot replacement, and all-problems-at-once validation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sand_framework.config import load_recipe, validate
from sand_framework.config.load import merge
from sand_framework.errors import RecipeError

REPO = Path(__file__).resolve().parent.parent


def test_bundled_recipes_validate(registries):
    for path in sorted(p for p in (REPO / "recipes").rglob("*.yaml") if not p.name.startswith("_")):
        data, _ = load_recipe(str(path))
        validate(data, registries, str(path))


def test_extends_and_overrides(registries):
    data, _ = load_recipe("smoke", ["sampler.n=2", "eval.splits=[unseen]", "run.seed=3"])
    r = validate(data, registries)
    assert r.slots["sampler"][1].n == 2 and r.eval.splits == ["unseen"] and r.run.seed == 3
    assert r.model.base == "tiny-random"  # from smoke, over quickstart
    assert r.slots["sampler"][1].temperature == 1.0  # inherited from quickstart


def test_swapping_a_slot_name_replaces_the_node(registries):
    data, _ = load_recipe("smoke", ["detector=entropy"])
    assert data["detector"] == {"name": "entropy"}
    data, _ = load_recipe("quickstart", ["critic.name=no_rollout_critic"])
    assert data["critic"] == {"name": "no_rollout_critic"}  # max_new_tokens from rollout_critic dropped
    assert validate(data, registries).slots["critic"][0] == "no_rollout_critic"


def test_merge_keeps_node_when_name_unchanged():
    assert merge({"sampler": {"name": "a", "n": 5}}, {"sampler": {"name": "a", "temperature": 0.5}}) == {
        "sampler": {"name": "a", "n": 5, "temperature": 0.5}}


def test_all_problems_reported_at_once(tmp_path, registries):
    bad = tmp_path / "bad.yaml"
    bad.write_text("extends: smoke\nrunn: {}\nsampler: {name: self_consistensy}\n"
                   "detector: {name: set_size, min_distinct: two}\neval: {limit: many}\n"
                   "trainer: {learnin_rate: 0.1}\n")
    data, _ = load_recipe(str(bad))
    with pytest.raises(RecipeError) as exc:
        validate(data, registries)
    text = str(exc.value)
    assert len(exc.value.problems) == 5
    for needle in ["did you mean 'run'", "did you mean 'self_consistency'", "min_distinct: expected an integer",
                   "eval.limit", "did you mean 'learning_rate'"]:
        assert needle in text


def test_param_validation_from_post_init(registries):
    data, _ = load_recipe("smoke", ["detector=entropy", "detector.threshold=-1"])
    with pytest.raises(RecipeError, match="threshold must be >= 0"):
        validate(data, registries)


def test_cli_exit_code_2_without_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("extends: smoke\nsampler: {name: nope}\nrun: {seed: abc}\n")
    proc = subprocess.run([sys.executable, "-m", "sand_framework.cli.main", "validate", str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "2 problem(s)" in proc.stderr and "unknown sampler 'nope'" in proc.stderr


def test_unknown_recipe_and_bad_override():
    with pytest.raises(RecipeError, match="bundled recipes"):
        load_recipe("no-such-recipe")
    with pytest.raises(RecipeError, match="key=value"):
        load_recipe("smoke", ["sampler.n"])


def test_unsafe_yaml_is_rejected(tmp_path):
    bad = tmp_path / "evil.yaml"
    bad.write_text("run: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(RecipeError, match="invalid YAML"):
        load_recipe(str(bad))


def test_extends_cycle(tmp_path):
    (tmp_path / "a.yaml").write_text("extends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    with pytest.raises(RecipeError, match="cycle"):
        load_recipe(str(tmp_path / "a.yaml"))
