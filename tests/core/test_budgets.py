"""Generation budgets must fit what the agent is trained to write (``sand validate``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sand_framework.config import load_recipe, validate
from sand_framework.errors import RecipeError


def test_a_sampling_budget_shorter_than_the_trained_thought_is_refused(registries):
    data, _ = load_recipe("quickstart", ["sampler.max_new_tokens=32", "synthesizer.max_new_tokens=64"])
    with pytest.raises(RecipeError) as err:
        validate(data, registries)
    problems = err.value.problems
    assert len(problems) == 1 and problems[0].startswith("sampler.max_new_tokens=32 is shorter")
    assert "synthesizer.max_new_tokens=64" in problems[0] and "Fix: sampler.max_new_tokens=96" in problems[0]


def test_every_agent_budget_is_checked_and_all_problems_come_at_once(registries):
    data, _ = load_recipe("quickstart", ["sampler.max_new_tokens=20", "executor.max_new_tokens=21",
                                         "evaluator.max_new_tokens=22"])
    with pytest.raises(RecipeError) as err:
        validate(data, registries)
    assert [p.split("=")[0] for p in err.value.problems] == [
        "sampler.max_new_tokens", "executor.max_new_tokens", "evaluator.max_new_tokens"]


def test_no_deliberation_training_no_budget_constraint(registries):
    data, _ = load_recipe("quickstart", ["run.iterations=0", "sampler.max_new_tokens=8"])
    validate(data, registries)


def test_base_model_samplers_are_not_agent_budgets(registries):
    """w/o SAS: the base model imagines candidates, the agent writes nothing there."""
    data, _ = load_recipe("quickstart", ["sampler=imagined", "sampler.max_new_tokens=8"])
    validate(data, registries)


def test_cli_reports_the_conflict_with_exit_2():
    proc = subprocess.run([sys.executable, "-m", "sand_framework.cli.main", "validate", "quickstart",
                           "evaluator.max_new_tokens=64"], capture_output=True, text=True)
    assert proc.returncode == 2 and "evaluator.max_new_tokens=64 is shorter" in proc.stderr
    assert "Traceback" not in proc.stderr
