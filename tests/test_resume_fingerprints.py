"""Stage fingerprints: a resumed run whose recipe, data file or plugins changed under a stage it holds is refused,
naming the stage and the difference; ``--redo-from`` discards that stage and the ones after it (only them); sweep
reuse compares the same fingerprints; runs made before fingerprints still resume.

The whole loop runs in-process on the real TextWorld-Express environment with the scripted policy of
tests/scripted.py and a trainer that writes a small weights folder (a few seconds per run); the same checks on a
real ``sand run`` subprocess (smoke recipe, tiny model) are in tests/test_graceful_stop.py.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from scripted import ScriptedPolicy

from sand_framework.app.fingerprint import ResumeCheck, check_resume, fingerprint, redo_from, stage_inputs, versions_note
from sand_framework.app.reuse import reuse_stages
from sand_framework.components import Trainer
from sand_framework.config import load_recipe, validate
from sand_framework.engine.context import RunContext
from sand_framework.engine.pipeline import Pipeline
from sand_framework.errors import InputsChanged, RunDirError
from sand_framework.plugins import load_plugins
from sand_framework.store import RunDir, RunLayout as L

OVERRIDES = ["data.limit=2", "run.synthesis_batch=2", "environment.n_train=4", "environment.n_seen=1",
             "environment.n_unseen=1", "sampler.n=2", "critic=no_rollout_critic", "eval.limit=1",
             "eval.splits=[unseen]"]
STAGES = ["expert", "train/iter0", "synth/iter1", "train/iter1", "eval"]


class FileTrainer(Trainer):
    """Writes a weights folder whose content depends on what it was trained on (no model: a unit test)."""

    name = "trl_sft"  # stands in for the recipe's trainer, so the fingerprint names its plugin

    def train(self, request):
        final = Path(request.output_dir) / "final"
        final.mkdir(parents=True, exist_ok=True)
        seen = json.dumps([t.to_dict() for t in request.trajectories], sort_keys=True) + str(request.seed)
        (final / "adapter_model.safetensors").write_text(hashlib.sha256(seen.encode()).hexdigest())
        return str(final)


@pytest.fixture(scope="module")
def plugins():
    ps = load_plugins()
    return ps, ps.registries()


def recipe_of(plugins, overrides=()):
    data, _ = load_recipe("smoke", [*OVERRIDES, *overrides])
    return validate(data, plugins[1])


def run(path: Path, plugins, overrides=(), recipe=None, stages=None):
    """The loop as ``sand run`` runs it (fingerprints recorded as each stage starts); ``stages``: only the expert
    stage (``["expert"]``) instead of the whole loop."""
    ps, regs = plugins
    recipe = recipe or recipe_of(plugins, overrides)
    rd = RunDir(path) if (path / L.RECIPE).exists() else RunDir.create_at(path)
    (rd.path / L.RECIPE).write_text("{}")
    ctx = RunContext(recipe=recipe, run_dir=rd, plugins=ps, registries=regs)
    ctx.components.update(policy=ScriptedPolicy(), trainer=FileTrainer())
    ctx._policy_ready = True
    ctx.base_model_path = "scripted"
    p = Pipeline(ctx, before_stage=lambda s: rd.record_fingerprint(s, fingerprint(recipe, rd, regs, ps, s)))
    try:
        p.expert() if stages == ["expert"] else p.run()
    finally:
        ctx.close()
    return rd, recipe


@pytest.fixture(scope="module")
def finished(tmp_path_factory, plugins):
    path = tmp_path_factory.mktemp("fp") / "run"
    run(path, plugins)
    return path


def copy_of(finished: Path, tmp_path: Path) -> RunDir:
    shutil.copytree(finished, tmp_path / "copy")
    return RunDir(tmp_path / "copy")


def test_every_stage_records_what_it_was_computed_from(finished, plugins):
    rd = RunDir(finished)
    fps = rd.fingerprints()
    assert list(fps) == STAGES and rd.finished_stages() == STAGES
    assert fps["expert"]["recipe"]["environment"]["name"] == "textworld_express"
    assert set(fps["train/iter0"]["inputs"]) == {L.EXPERT_DATA}
    assert {L.EXPERT_DATA, "weights/iter0"} <= set(fps["synth/iter1"]["inputs"])
    assert {"iter1/deliberation.sharegpt.json", "weights/iter0"} <= set(fps["train/iter1"]["inputs"])
    assert set(fps["eval"]["inputs"]) == {"weights/iter0", "weights/iter1"}
    assert fps["eval"]["recipe"]["eval"]["limit"] == 1
    assert any(p.startswith("sand_builtins") for p in fps["train/iter0"]["plugins"])
    assert all(v == fps["expert"]["plugins"][p] for p, v in fps["train/iter0"]["plugins"].items()
               if p in fps["expert"]["plugins"])
    # the stage results (what metrics.json and reports read) are unchanged
    assert "fingerprint" not in json.dumps(json.loads((finished / L.STATE).read_text())["done"])
    recipe = recipe_of(plugins)
    assert check_resume(recipe, rd, plugins[1], plugins[0]) == ResumeCheck()  # same recipe, same files: resumes


@pytest.mark.parametrize("override, stage, needle", [
    ("environment.game_params=numLocations=6,numDistractorItems=0,includeDoors=0", "expert", "numLocations=6"),
    ("trainer.learning_rate=0.1", "train/iter0", "trainer.learning_rate: 0.0005 then, 0.1 now"),
    ("critic.max_new_tokens=7", "synth/iter1", "critic.max_new_tokens: 24 then, 7 now"),
    ("eval.limit=2", "eval", "eval.limit: 1 then, 2 now"),
])
def test_an_edited_recipe_is_refused_naming_the_first_stage_it_changes(finished, plugins, override, stage, needle):
    rd = RunDir(finished)
    with pytest.raises(InputsChanged) as info:
        check_resume(recipe_of(plugins, [override]), rd, plugins[1], plugins[0])
    msg = str(info.value)
    assert f"since stage {stage!r} was computed" in msg and needle in msg, msg
    assert f"--redo-from {stage}`" in msg and "mix two experiments" in msg
    later = STAGES[STAGES.index(stage):]
    assert f"discard {', '.join(later)} and" in msg
    assert info.value.exit_code == 3


def test_redo_from_discards_that_stage_and_the_later_ones_only_then_continues(finished, plugins, tmp_path):
    rd = copy_of(finished, tmp_path)
    recipe = recipe_of(plugins, ["critic.max_new_tokens=7"])
    kept = {p: p.read_bytes() for p in [*(rd.path / "expert").rglob("*"), *(rd.path / "weights/iter0").rglob("*")]
            if p.is_file()}
    stages, removed = redo_from(recipe, rd, "synth/iter1")
    assert stages == STAGES[2:]
    assert set(removed) == {"iter1", "weights/iter1", "eval", "metrics.json"}
    assert rd.finished_stages() == STAGES[:2] and list(rd.fingerprints()) == STAGES[:2]
    assert not (rd.path / L.DISCARDED).exists() and not (rd.path / "iter1").exists()
    assert {p: p.read_bytes() for p in kept} == kept  # the stages before it are untouched
    check_resume(recipe, rd, plugins[1], plugins[0])  # what is left matches the edited recipe
    run(rd.path, plugins, recipe=recipe)
    assert rd.finished_stages() == STAGES
    assert rd.fingerprint("synth/iter1")["recipe"]["critic"]["max_new_tokens"] == 7
    assert check_resume(recipe, rd, plugins[1], plugins[0]) == ResumeCheck()
    with pytest.raises(RunDirError, match=r"--redo-from 'synth/iter3': not a stage of this run; its stages are "
                                          r"expert, train/iter0, synth/iter1, train/iter1, eval"):
        redo_from(recipe, rd, "synth/iter3")


def test_an_edited_data_file_is_refused(finished, plugins, tmp_path):
    data = tmp_path / "expert.json"
    shutil.copy(finished / L.EXPERT_DATA, data)  # an expert file made by the environment's own expert
    overrides = ["data.source=sharegpt", f"data.path={data}"]
    rd, recipe = run(tmp_path / "run", plugins, overrides, stages=["expert"])
    assert rd.fingerprint("expert")["inputs"]["data.path"].startswith("sha256:")
    check_resume(recipe, rd, plugins[1], plugins[0])
    records = json.loads(data.read_text())
    data.write_text(json.dumps(records[:1]))
    with pytest.raises(InputsChanged, match=r"stage 'expert'.*data\.path: the file's content changed \(sha256 "):
        check_resume(recipe, rd, plugins[1], plugins[0])


def test_a_new_plugin_version_is_said_with_the_stage_not_refused(finished, plugins, tmp_path):
    rd = copy_of(finished, tmp_path)
    state = json.loads((rd.path / L.STATE).read_text())
    plugin = next(iter(state["fingerprints"]["train/iter0"]["plugins"]))
    state["fingerprints"]["train/iter0"]["plugins"][plugin] = "0.0.1"
    (rd.path / L.STATE).write_text(json.dumps(state))
    found = check_resume(recipe_of(plugins), rd, plugins[1], plugins[0])
    assert found.new_versions and found.new_versions[0].startswith(f"train/iter0: plugin {plugin}: version 0.0.1 then")
    assert "--redo-from train/iter0" in versions_note(rd, found.new_versions)
    state["fingerprints"]["train/iter0"]["recipe"]["seed"] = 12345  # a recipe change beside it is still refused
    (rd.path / L.STATE).write_text(json.dumps(state))
    with pytest.raises(InputsChanged, match=r"stage 'train/iter0'.*seed"):
        check_resume(recipe_of(plugins), rd, plugins[1], plugins[0])


def test_changed_weights_of_a_finished_stage_are_refused_in_the_stage_that_read_them(finished, plugins, tmp_path):
    rd = copy_of(finished, tmp_path)
    (rd.path / "weights/iter0/final/adapter_model.safetensors").write_text("retrained elsewhere")
    with pytest.raises(InputsChanged, match=r"stage 'synth/iter1'.*weights/iter0: its files changed"):
        check_resume(recipe_of(plugins), rd, plugins[1], plugins[0])


def test_a_run_made_before_fingerprints_resumes_says_so_once_and_is_checked_from_then_on(finished, plugins,
                                                                                       tmp_path):
    rd = copy_of(finished, tmp_path)
    state = json.loads((rd.path / L.STATE).read_text())
    del state["fingerprints"]
    (rd.path / L.STATE).write_text(json.dumps(state))
    recipe = recipe_of(plugins)
    assert check_resume(recipe, rd, plugins[1], plugins[0]).unknown == STAGES  # unknown: said, then recorded
    assert list(rd.fingerprints()) == STAGES and rd.finished_stages() == STAGES
    assert check_resume(recipe, rd, plugins[1], plugins[0]) == ResumeCheck()  # said once
    with pytest.raises(InputsChanged, match="'train/iter0'"):
        check_resume(recipe_of(plugins, ["trainer.learning_rate=0.1"]), rd, plugins[1], plugins[0])


def test_a_refused_resume_records_nothing_for_the_unknown_stages(finished, plugins, tmp_path):
    rd = copy_of(finished, tmp_path)
    state = json.loads((rd.path / L.STATE).read_text())
    for stage in ("expert", "train/iter0"):
        del state["fingerprints"][stage]
    (rd.path / L.STATE).write_text(json.dumps(state))
    with pytest.raises(InputsChanged, match="'synth/iter1'"):
        check_resume(recipe_of(plugins, ["critic.max_new_tokens=7"]), rd, plugins[1], plugins[0])
    assert "expert" not in rd.fingerprints()  # an edited recipe is never baked into an unknown stage


def test_sweep_reuse_compares_fingerprints(finished, plugins, tmp_path):
    ps, regs = plugins
    recipe = recipe_of(plugins)
    source_recipe = recipe
    target = RunDir.create_at(tmp_path / "arm")
    # a stage is not adopted before the stages it was computed from
    with pytest.raises(RunDirError, match=r"cannot reuse 'train/iter0'.*expert/expert\.sharegpt\.json.*missing "
                                          r"here.*list them before it"):
        reuse_stages(target, recipe, finished, source_recipe, ["train/iter0"], ps, regs)
    assert reuse_stages(target, recipe, finished, source_recipe, ["expert", "train/iter0"], ps, regs) == \
        ["expert", "train/iter0"]
    assert target.fingerprint("train/iter0") == RunDir(finished).fingerprint("train/iter0")
    assert check_resume(recipe, target, regs, ps) == ResumeCheck()
    # a source whose data file was edited after its expert stage read it: that stage is not adopted
    data = tmp_path / "expert.json"
    shutil.copy(finished / L.EXPERT_DATA, data)
    overrides = ["data.source=sharegpt", f"data.path={data}"]
    source, file_recipe = run(tmp_path / "file-source", plugins, overrides, stages=["expert"])
    data.write_text(json.dumps(json.loads(data.read_text())[:1]))
    with pytest.raises(RunDirError, match=r"cannot reuse 'expert'.*data\.path: the file's content changed \(sha256 "
                                          r"\w+ there, sha256 \w+ here\)"):
        reuse_stages(RunDir.create_at(tmp_path / "arm2"), file_recipe, source.path, file_recipe, ["expert"], ps, regs)


def test_sweep_reuse_of_a_stage_made_by_other_plugin_versions_is_said_not_refused(finished, plugins, tmp_path,
                                                                                   caplog):
    ps, regs = plugins
    recipe = recipe_of(plugins)
    source = copy_of(finished, tmp_path)
    state = json.loads((source.path / L.STATE).read_text())
    plugin = next(iter(state["fingerprints"]["expert"]["plugins"]))
    state["fingerprints"]["expert"]["plugins"][plugin] = "0.0.1"
    (source.path / L.STATE).write_text(json.dumps(state))
    with caplog.at_level("WARNING", logger="sand_framework.app.reuse"):
        assert reuse_stages(RunDir.create_at(tmp_path / "arm"), recipe, source.path, recipe, ["expert"], ps,
                            regs) == ["expert"]
    assert f"plugin {plugin}: version 0.0.1 there" in caplog.text


def test_stage_inputs_is_the_one_definition_reuse_imports():
    from sand_framework.app import reuse

    assert reuse.stage_inputs is stage_inputs
