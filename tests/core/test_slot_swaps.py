"""Swapping a component (``slot=name`` on the command line, ``slot: {name: ...}`` under ``extends:``) keeps the
slot's settings the new component declares, drops the rest, and says so.

Issue 26: ``sand run paper/alfworld executor=process_pool executor.workers=32`` (docs/gpu.md) used to reset the
executor to process_pool's defaults: ``max_new_tokens`` 64 (refused: below the synthesis budget), ``expert_switch``
false against the paper's ALFWorld setting, ``max_parallel`` 8 for 32 workers.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from sand_framework.app.runner import prepare
from sand_framework.cli.main import main
from sand_framework.config import load_recipe, validate
from sand_framework.config.load import INHERITED, merge, parse_overrides, settle_swaps

GPU_COMMAND = ["trainer.launch.num_processes=8", "trainer.launch.config=fsdp", "policy.tensor_parallel_size=1",
               "executor=process_pool", "executor.workers=32"]


def test_the_documented_gpu_command_keeps_the_paper_executor_settings(registries):
    data, path = load_recipe("paper/alfworld", GPU_COMMAND)
    recipe = validate(data, registries, str(path))
    name, params = recipe.slots["executor"]
    assert name == "process_pool" and params.workers == 32
    assert (params.max_new_tokens, params.max_parallel, params.expert_switch, params.temperature) == (512, 64, True, 1.0)


def test_a_swap_drops_what_the_new_component_does_not_declare_and_notes_both(registries):
    data, path = load_recipe("quickstart", ["sampler=none"], settle=False)
    assert data["sampler"][INHERITED]["from"] == "self_consistency"
    settled, notes = settle_swaps(data, registries)
    assert settled["sampler"] == {"name": "none"} and INHERITED not in str(settled)
    assert notes == ["sampler: self_consistency -> none drops the slot's n, temperature, max_new_tokens "
                     "(not parameters of none)"]
    recipe, _, _ = prepare(data, [], str(path))
    assert recipe.notes == notes and recipe.raw["sampler"] == {"name": "none"}  # what the run directory stores
    sampler_notes = notes
    data, _ = load_recipe("paper/alfworld", ["executor=process_pool"], settle=False)
    _, notes = settle_swaps(data, registries)
    assert notes == ["executor: in_process -> process_pool keeps the slot's temperature=1.0, max_new_tokens=512, "
                     "max_parallel=64, rollout_mode='async', max_concurrency=64, expert_switch=True"]
    shown = (Path(__file__).resolve().parents[2] / "docs" / "recipes.md").read_text()
    for note in notes + sampler_notes:  # docs/recipes.md shows both notes as a user sees them
        assert f"note: {note}\n" in shown


def test_extends_swaps_the_same_way_as_the_command_line(registries, tmp_path):
    child = tmp_path / "pool.yaml"
    child.write_text("extends: paper/alfworld\nexecutor: {name: process_pool, workers: 32}\n")
    from_file, _ = load_recipe(str(child), registries=registries)
    from_cli, _ = load_recipe("paper/alfworld", ["executor=process_pool", "executor.workers=32"], registries=registries)
    assert from_file["executor"] == from_cli["executor"]
    assert from_file["executor"]["max_new_tokens"] == 512 and from_file["executor"]["expert_switch"] is True


def test_settings_given_with_the_swap_or_later_are_not_reported_as_inherited(registries):
    data, _ = load_recipe("paper/alfworld", ["executor=process_pool", "executor.max_new_tokens=600"], settle=False)
    assert "max_new_tokens" not in data["executor"][INHERITED]["keys"]
    data = merge(merge({"critic": {"name": "rollout_critic", "temperature": 0.0, "max_new_tokens": 128}},
                       {"critic": {"name": "no_rollout_critic"}}), {"critic": {"max_new_tokens": 64}})
    assert data["critic"][INHERITED] == {"from": "rollout_critic", "keys": ["temperature"]}
    settled, notes = settle_swaps(data, registries)
    assert settled["critic"] == {"name": "no_rollout_critic", "temperature": 0.0, "max_new_tokens": 64}
    assert notes == ["critic: rollout_critic -> no_rollout_critic keeps the slot's temperature=0.0"]


def test_a_chain_of_swaps_names_the_first_component_and_back_to_the_same_name_is_a_plain_merge(registries):
    data = merge(merge({"sampler": {"name": "self_consistency", "n": 3, "temperature": 0.7}},
                       {"sampler": {"name": "imagined"}}), parse_overrides(["sampler=none"]))
    assert data["sampler"][INHERITED]["from"] == "self_consistency"
    assert settle_swaps(data, registries)[0]["sampler"] == {"name": "none"}
    same = merge({"sampler": {"name": "imagined", "n": 3}}, {"sampler": {"name": "imagined", "temperature": 0.5}})
    assert same == {"sampler": {"name": "imagined", "n": 3, "temperature": 0.5}}


def test_a_swap_to_an_unknown_component_reports_only_the_name(registries):
    from sand_framework.errors import RecipeError

    data, _ = load_recipe("paper/alfworld", ["executor=process_pol"], registries=registries)
    assert data["executor"] == {"name": "process_pol"}
    try:
        validate(data, registries)
    except RecipeError as exc:
        assert len(exc.problems) == 1 and "did you mean 'process_pool'" in exc.problems[0]
    else:
        raise AssertionError("an unknown executor validated")


def test_sand_config_and_validate_show_the_note(tmp_path):
    result = CliRunner().invoke(main, ["config", "quickstart", "sampler=none"])
    assert result.exit_code == 0, result.output
    assert "note: sampler: self_consistency -> none drops the slot's n" in result.output
    shown = yaml.safe_load(result.stdout[result.stdout.index("run:"):])
    assert shown["sampler"] == {"name": "none"}
    result = CliRunner().invoke(main, ["validate", "quickstart", "critic=no_rollout_critic"])
    assert result.exit_code == 0, result.output
    assert "note: critic: rollout_critic -> no_rollout_critic keeps the slot's max_new_tokens=40" in result.output


def test_the_wo_sas_ablations_pin_the_imagined_sampler_decoding(registries):
    """The swap would carry the agent sampler's temperature 1.0 into the one-reply imagined sampler; the ablation
    recipes state the imagined sampler's greedy decoding (what they ran with before swaps kept settings)."""
    for ref in ["repro/wo-sas", "repro/gpu/wo-sas", "ablations/quickstart-wo-sas", "ablations/alfworld-wo-sas",
                "ablations/sciworld-wo-sas"]:
        data, path = load_recipe(ref, registries=registries)
        name, params = validate(data, registries, str(path)).slots["sampler"]
        assert name == "imagined" and params.temperature == 0.0, ref
        assert params.max_new_tokens in (96, 256), ref
