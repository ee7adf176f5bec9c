"""Validate here, run there: `sand validate` tells a wrong recipe (exit 2) from a machine that cannot run it (exit 4).

What this machine lacks (a component's package, a data file or local model folder that is not here, GPUs) is
listed as such; ``--for-another-machine`` makes only recipe problems fail, and ``sand sweep --plan`` sorts and
fails the same way.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
import yaml
from click.testing import CliRunner

from sand_framework.cli.main import main

ALFWORLD = "recipes/paper/alfworld.yaml"
ABSENT = "/nonexistent/sand-validate-test/alfworld_sft.sharegpt.json"


def validate(*args: str):
    return CliRunner().invoke(main, ["validate", *args])


@pytest.fixture
def no_vllm(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))


def test_the_paper_recipe_validates_for_another_machine_and_lists_what_this_one_lacks(no_vllm):
    result = validate(ALFWORLD, f"data.path={ABSENT}", "--for-another-machine")
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"ok: {ALFWORLD} (environment=alfworld, policy=vllm")
    assert "not ready here: this machine lacks 2 thing(s) to run it" in result.output
    assert f"data.path: expert file {ABSENT!r} not found on this machine" in result.output
    assert "policy: 'vllm' needs the package 'vllm'" in result.output


def test_the_paper_recipe_as_is_validates_for_another_machine():
    """The done-criterion of issue 24, item 6, word for word: whatever this machine has."""
    result = validate(ALFWORLD, "--for-another-machine")
    assert result.exit_code == 0, result.output
    assert "problem(s)" not in result.output


def test_without_the_flag_what_the_machine_lacks_is_exit_4_and_said_to_be_no_recipe_problem(no_vllm):
    result = validate(ALFWORLD, f"data.path={ABSENT}")
    assert result.exit_code == 4, result.output
    assert f"error: 2 thing(s) this machine lacks to run {ALFWORLD} (not a recipe problem):" in result.output
    assert "--for-another-machine checks only the recipe" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("override, needle", [
    ("sampler.n=0", "sampler[self_consistency].n: must be >= 1, got 0"),
    ("detector=no_such_detector", "no_such_detector"),
])
def test_a_real_recipe_error_still_fails_with_the_flag(no_vllm, override, needle):
    result = validate(ALFWORLD, f"data.path={ABSENT}", override, "--for-another-machine")
    assert result.exit_code == 2, result.output
    assert needle in result.output


def test_with_both_kinds_the_recipe_problem_decides_and_the_machine_is_listed_apart(no_vllm, tmp_path):
    empty = tmp_path / "empty.sharegpt.json"
    empty.write_text("[]")
    result = validate(ALFWORLD, f"data.path={empty}")
    assert result.exit_code == 2, result.output
    assert "holds no trajectories" in result.output
    assert "this machine also lacks 1 thing(s) to run it (not recipe problems)" in result.output
    assert result.output.index("also lacks") < result.output.index("problem(s) in")


def test_a_data_file_that_is_here_but_empty_is_a_recipe_problem_even_for_another_machine(tmp_path):
    empty = tmp_path / "empty.sharegpt.json"
    empty.write_text("[]")
    result = validate("smoke", "data.source=sharegpt", f"data.path={empty}", "--for-another-machine")
    assert result.exit_code == 2, result.output
    assert "holds no trajectories" in result.output


def test_a_missing_local_model_folder_is_the_machine(tmp_path):
    result = validate("smoke", f"model.base={tmp_path / 'no-model'}")
    assert result.exit_code == 4, result.output
    assert "model.base:" in result.output and "no such model folder" in result.output
    assert validate("smoke", f"model.base={tmp_path / 'no-model'}", "--for-another-machine").exit_code == 0


def test_the_findings_are_sorted_by_kind(no_vllm, registries):
    from sand_framework.config import load_recipe, validate as validate_recipe
    from sand_framework.config.preflight import check

    recipe = validate_recipe(load_recipe(ALFWORLD, [f"data.path={ABSENT}"])[0], registries)
    found = check(recipe, registries)
    assert found.recipe == []
    assert [p.split(":")[0] for p in found.machine] == ["data.path", "policy"]


# ---------------------------------------------------------------------------------------- sand sweep --plan


def sweep_file(tmp_path, arms):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "output_dir": str(tmp_path / "out"), "seeds": [0], "arms": arms}))
    return str(path)


def test_sweep_plan_agrees_with_validate(tmp_path, no_vllm):
    path = sweep_file(tmp_path, [{"name": "paper", "recipe": "paper/alfworld", "overrides": [f"data.path={ABSENT}"]},
                                 {"name": "smoke", "recipe": "smoke"}])
    here = CliRunner().invoke(main, ["sweep", path, "--plan"])
    assert here.exit_code == 4, here.output
    assert "arm paper seed 0: policy: 'vllm' needs the package 'vllm'" in here.output
    assert "arm smoke" not in here.output
    there = CliRunner().invoke(main, ["sweep", path, "--plan", "--for-another-machine"])
    assert there.exit_code == 0, there.output
    runs = json.loads(there.stdout)  # JSON only on stdout; the note is on stderr
    assert [r["arm"] for r in runs] == ["paper", "smoke"]
    assert "not ready here: this machine lacks 2 thing(s) to run the arms" in there.stderr
    assert not (tmp_path / "out").exists()


def test_sweep_plan_still_fails_a_recipe_error_with_the_flag(tmp_path, no_vllm):
    path = sweep_file(tmp_path, [{"name": "paper", "recipe": "paper/alfworld",
                                  "overrides": [f"data.path={ABSENT}", "sampler.n=0"]}])
    result = CliRunner().invoke(main, ["sweep", path, "--plan", "--for-another-machine"])
    assert result.exit_code == 2, result.output
    assert "arm paper seed 0: sampler[self_consistency].n: must be >= 1" in result.output


def test_the_flag_goes_with_plan(tmp_path):
    path = sweep_file(tmp_path, [{"name": "smoke", "recipe": "smoke"}])
    result = CliRunner().invoke(main, ["sweep", path, "--for-another-machine"])
    assert result.exit_code == 2 and "--for-another-machine goes with --plan" in result.output


def test_a_data_file_of_another_environments_task_ids_is_a_recipe_problem(tmp_path):
    """Before, such a file validated and the run trained on it for hours, to fail at the first rollout's reset."""
    from bad_inputs import FOREIGN_IDS

    data = tmp_path / "sciworld.sharegpt.json"
    data.write_text(FOREIGN_IDS)
    result = validate("smoke", "data.source=sharegpt", f"data.path={data}", "--for-another-machine")
    assert result.exit_code == 2, result.output
    assert "data.path: 2 of the file's 2 task id(s) are not 'textworld_express' tasks: '0_12' (bad task id" \
        in result.output
    own = tmp_path / "own.sharegpt.json"  # the same file with this environment's ids validates
    own.write_text(FOREIGN_IDS.replace('"0_12"', '"twc:numLocations=2:train:1"')
                   .replace('"0_13"', '"twc:numLocations=2:train:2"'))
    assert validate("smoke", "data.source=sharegpt", f"data.path={own}", "--for-another-machine").exit_code == 0
