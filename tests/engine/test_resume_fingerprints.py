"""Stage fingerprints: a resumed run whose recipe, data file or plugins changed under a stage it holds is refused,
naming the stage and the difference; ``--redo-from`` discards that stage and the ones after it (only them); sweep
reuse compares the same fingerprints; runs made before fingerprints still resume.

The whole loop runs in-process on the real TextWorld-Express environment with the scripted policy of
tests/scripted.py and a trainer that writes a small weights folder (a few seconds per run); the same checks on a
real ``sand run`` subprocess (smoke recipe, tiny model) are in tests/engine/test_graceful_stop.py.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from scripted import ScriptedPolicy

from sand_framework.app.fingerprint import fingerprint, stage_inputs
from sand_framework.app.resume_check import ResumeCheck, check_resume, redo_from, versions_note
from sand_framework.app.reuse import reuse_stages
from sand_framework.components import PreferenceTrainer, Trainer
from sand_framework.config import load_recipe, validate
from sand_framework.engine.context import RunContext
from sand_framework.engine.pipeline import Pipeline
from sand_framework.errors import InputsChanged, RunDirError
from sand_framework.formats import read_sharegpt
from sand_framework.pairs import write_preference_pairs
from sand_framework.plugins import load_plugins
from sand_framework.store import RunDir, RunLayout
from sand_framework.types import PreferencePair, Step, Trajectory

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


class FilePreferenceTrainer(PreferenceTrainer):
    """Writes a weights folder whose content depends on the pairs it was trained on (no model)."""

    name = "trl_dpo"

    def train(self, request):
        final = Path(request.output_dir) / "final"
        final.mkdir(parents=True, exist_ok=True)
        seen = json.dumps([p.to_dict() for p in request.pairs], sort_keys=True) + str(request.seed)
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
    rd = RunDir(path) if (path / RunLayout.RECIPE).exists() else RunDir.create_at(path)
    (rd.path / RunLayout.RECIPE).write_text("{}")
    ctx = RunContext(recipe=recipe, run_dir=rd, plugins=ps, registries=regs)
    ctx.components.update(policy=ScriptedPolicy(), trainer=FileTrainer(), preference_trainer=FilePreferenceTrainer())
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
    assert set(fps["train/iter0"]["inputs"]) == {RunLayout.EXPERT_DATA}
    assert {RunLayout.EXPERT_DATA, "weights/iter0"} <= set(fps["synth/iter1"]["inputs"])
    assert {"iter1/deliberation.sharegpt.json", "weights/iter0"} <= set(fps["train/iter1"]["inputs"])
    assert set(fps["eval"]["inputs"]) == {"weights/iter0", "weights/iter1"}
    assert fps["eval"]["recipe"]["eval"]["limit"] == 1
    assert any(p.startswith("sand_builtins") for p in fps["train/iter0"]["plugins"])
    assert all(v == fps["expert"]["plugins"][p] for p, v in fps["train/iter0"]["plugins"].items()
               if p in fps["expert"]["plugins"])
    # the stage results (what metrics.json and reports read) are unchanged
    assert "fingerprint" not in json.dumps(json.loads((finished / RunLayout.STATE).read_text())["done"])
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
    assert not (rd.path / RunLayout.DISCARDED).exists() and not (rd.path / "iter1").exists()
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
    shutil.copy(finished / RunLayout.EXPERT_DATA, data)  # an expert file made by the environment's own expert
    overrides = ["data.source=sharegpt", f"data.path={data}"]
    rd, recipe = run(tmp_path / "run", plugins, overrides, stages=["expert"])
    assert rd.fingerprint("expert")["inputs"]["data.path"].startswith("sha256:")
    check_resume(recipe, rd, plugins[1], plugins[0])
    records = json.loads(data.read_text())
    data.write_text(json.dumps(records[:1]))
    with pytest.raises(InputsChanged, match=r"stage 'expert'.*data\.path: the file's content changed \(sha256 "):
        check_resume(recipe, rd, plugins[1], plugins[0])


def test_an_edited_pair_file_is_refused_naming_the_stage_and_the_file(finished, plugins, tmp_path):
    """The ``pairs_file`` method's file (``method.path``) is an input like ``data.path``: its content is in the
    fingerprint of every stage that reads the method, so editing it after synth/iter1 read it refuses the resume
    (exit 3) instead of keeping the pairs of the old file."""
    expert = read_sharegpt(finished / RunLayout.EXPERT_DATA, "textworld_express")
    pairs = [PreferencePair(Trajectory(t.task_id, t.env, t.instruction, t.task), t.steps,
                            [Step("I wander.", "look around", "")]) for t in expert]
    path = tmp_path / "pairs.jsonl"
    write_preference_pairs(path, pairs)
    rd, recipe = run(tmp_path / "run", plugins, ["method=pairs_file", f"method.path={path}"])
    assert rd.finished_stages() == STAGES and rd.stage_result("synth/iter1")["pairs"] == len(pairs)
    fps = rd.fingerprints()
    assert "method.path" not in fps["train/iter0"]["inputs"]  # behavior initialization does not read it
    assert all(fps[s]["inputs"]["method.path"].startswith("sha256:") for s in STAGES[2:])
    assert check_resume(recipe, rd, plugins[1], plugins[0]) == ResumeCheck()  # the same file: resumes
    write_preference_pairs(path, pairs[:1])  # one pair fewer: iteration 1 was trained on other pairs
    with pytest.raises(InputsChanged) as info:
        check_resume(recipe, rd, plugins[1], plugins[0])
    msg = str(info.value)
    assert info.value.exit_code == 3
    assert "since stage 'synth/iter1' was computed (finished)" in msg, msg
    assert "method.path: the file's content changed (sha256 " in msg and f"now) in {path}" in msg, msg
    assert "--redo-from synth/iter1`" in msg
    # a stage an older SAND fingerprinted without the file's digest: said, recorded, and checked from then on
    state = json.loads((rd.path / RunLayout.STATE).read_text())
    for stage in STAGES[2:]:
        del state["fingerprints"][stage]["inputs"]["method.path"]
    (rd.path / RunLayout.STATE).write_text(json.dumps(state))
    found = check_resume(recipe, rd, plugins[1], plugins[0])
    assert found.unrecorded_files == [f"{s}: method.path" for s in STAGES[2:]] and not found.older_format
    assert rd.fingerprint("synth/iter1")["inputs"]["method.path"].startswith("sha256:")
    assert check_resume(recipe, rd, plugins[1], plugins[0]) == ResumeCheck()
    write_preference_pairs(path, pairs)
    with pytest.raises(InputsChanged, match=r"stage 'synth/iter1'.*method\.path: the file's content changed"):
        check_resume(recipe, rd, plugins[1], plugins[0])


def test_a_new_plugin_version_is_said_with_the_stage_not_refused(finished, plugins, tmp_path):
    rd = copy_of(finished, tmp_path)
    state = json.loads((rd.path / RunLayout.STATE).read_text())
    plugin = next(iter(state["fingerprints"]["train/iter0"]["plugins"]))
    state["fingerprints"]["train/iter0"]["plugins"][plugin] = "0.0.1"
    (rd.path / RunLayout.STATE).write_text(json.dumps(state))
    found = check_resume(recipe_of(plugins), rd, plugins[1], plugins[0])
    assert found.new_versions and found.new_versions[0].startswith(f"train/iter0: plugin {plugin}: version 0.0.1 then")
    assert "--redo-from train/iter0" in versions_note(rd, found.new_versions)
    state["fingerprints"]["train/iter0"]["recipe"]["seed"] = 12345  # a recipe change beside it is still refused
    (rd.path / RunLayout.STATE).write_text(json.dumps(state))
    with pytest.raises(InputsChanged, match=r"stage 'train/iter0'.*seed"):
        check_resume(recipe_of(plugins), rd, plugins[1], plugins[0])


def test_changed_weights_of_a_finished_stage_are_refused_in_the_stage_that_read_them(finished, plugins, tmp_path):
    rd = copy_of(finished, tmp_path)
    (rd.path / "weights/iter0/final/adapter_model.safetensors").write_text("retrained elsewhere")
    with pytest.raises(InputsChanged, match=r"stage 'synth/iter1'.*weights/iter0: its files changed"):
        check_resume(recipe_of(plugins), rd, plugins[1], plugins[0])


def test_rebuild_weights_trains_the_start_again_and_keeps_the_results(finished, plugins, tmp_path):
    """An exported run (no weights): `--rebuild-weights` trains train/iter0 into its folder, the same weights on
    the same machine; later iterations' weights stay missing; every result and fingerprint is kept."""
    rd = copy_of(finished, tmp_path)
    original = (rd.path / "weights/iter0/final/adapter_model.safetensors").read_bytes()
    shutil.rmtree(rd.path / "weights")
    before = json.loads((rd.path / RunLayout.STATE).read_text())
    ps, regs = plugins
    recipe = recipe_of(plugins)
    ctx = RunContext(recipe=recipe, run_dir=rd, plugins=ps, registries=regs)
    ctx.components.update(policy=ScriptedPolicy(), trainer=FileTrainer(), preference_trainer=FilePreferenceTrainer())
    ctx._policy_ready, ctx.base_model_path = True, "scripted"
    pipeline = Pipeline(ctx, before_stage=lambda s: rd.record_fingerprint(s, fingerprint(recipe, rd, regs, ps, s)))
    try:
        assert pipeline.missing_weights() == ["train/iter0", "train/iter1"]
        assert pipeline.rebuild_weights() == ["train/iter0"]
        assert pipeline.missing_weights() == ["train/iter1"] and pipeline.rebuild_weights() == []
    finally:
        ctx.close()
    assert (rd.path / "weights/iter0/final/adapter_model.safetensors").read_bytes() == original
    after = json.loads((rd.path / RunLayout.STATE).read_text())
    assert after["fingerprints"] == before["fingerprints"]
    assert {k: v for k, v in after["done"]["train/iter0"].items() if k != "rebuilt"} == before["done"]["train/iter0"]
    assert {k: v for k, v in after["done"].items() if k != "train/iter0"} == \
        {k: v for k, v in before["done"].items() if k != "train/iter0"}


def test_a_rebuilt_start_lets_the_stages_after_it_resume_said_and_recorded(finished, plugins, tmp_path):
    """Trained again on another machine, the start's tensors may differ: the stages that read it are kept (said,
    and the digest they came from recorded), only when --rebuild-weights made it and nothing else changed."""
    rd = copy_of(finished, tmp_path)
    (rd.path / "weights/iter0/final/adapter_model.safetensors").write_text("the start, trained on another CPU")
    with pytest.raises(InputsChanged, match=r"stage 'synth/iter1'.*weights/iter0"):  # not said to be a rebuild
        check_resume(recipe_of(plugins), rd, plugins[1], plugins[0])
    rd.mark_done("train/iter0", {**rd.stage_result("train/iter0"), "rebuilt": {"seconds": 1.0}})
    with pytest.raises(InputsChanged, match=r"seed"):  # the start and the recipe changed: refused
        check_resume(recipe_of(plugins, ["run.seed=5"]), rd, plugins[1], plugins[0])
    then = rd.fingerprints()
    found = check_resume(recipe_of(plugins), rd, plugins[1], plugins[0])
    assert found.rebuilt_start == ["synth/iter1", "train/iter1", "eval"]
    now = rd.fingerprints()
    for stage in found.rebuilt_start:
        assert now[stage]["rebuilt_start"] == {"weights/iter0": then[stage]["inputs"]["weights/iter0"]}
        assert now[stage]["inputs"]["weights/iter0"] != then[stage]["inputs"]["weights/iter0"]
    assert now["train/iter0"] == then["train/iter0"]
    assert check_resume(recipe_of(plugins), rd, plugins[1], plugins[0]).rebuilt_start == []  # checked from now on
    assert rd.fingerprints() == now


def export_stopped_after_synthesis(path: Path, plugins, overrides) -> RunDir:
    """A run of ``overrides`` stopped after its synthesis (train/iter1 started, not finished) and exported without
    weights, as `sand sweep --export` leaves it, with train/iter1's fingerprint as SAND 0.3.0 recorded it (the
    SFT start's weights among its inputs whatever run.train_from said)."""
    rd, _ = run(path, plugins, overrides)
    state = json.loads((rd.path / RunLayout.STATE).read_text())
    for stage in ("train/iter1", "eval"):
        del state["done"][stage]
    del state["fingerprints"]["eval"]
    state["fingerprints"]["train/iter1"]["inputs"].setdefault(
        "weights/iter0", state["fingerprints"]["synth/iter1"]["inputs"]["weights/iter0"])
    (rd.path / RunLayout.STATE).write_text(json.dumps(state))
    for folder in ("weights", "eval"):
        shutil.rmtree(rd.path / folder, ignore_errors=True)
    (rd.path / RunLayout.EXPORTED_WEIGHTS).write_text(json.dumps({"weights/iter0": "tensors:the-start"}))
    return rd


def needs_the_start(rd: RunDir, overrides) -> bool:
    """What `sand sweep --status` says of the run, its recipe stored as `sand run` stores it."""
    import yaml

    from sand_framework.config import load_recipe
    from sand_framework.sweep.runner import needs_the_start as sweep_needs_the_start

    (rd.path / RunLayout.RECIPE).write_text(yaml.safe_dump(load_recipe("smoke", [*OVERRIDES, *overrides])[0]))
    return sweep_needs_the_start(rd.path)


def test_an_exported_run_whose_next_stages_read_no_start_resumes_without_it(plugins, tmp_path):
    """An arm retrained from the base model needs its SFT start only to synthesize: stopped after that and
    exported, it trains and evaluates `final` without the start (no --rebuild-weights); the finished stages that
    read the start keep their record. One that continues the start is refused, naming --rebuild-weights."""
    from sand_framework.errors import WeightsAbsent

    base = ["run.train_from=base", "eval.models=[final]"]
    rd = export_stopped_after_synthesis(tmp_path / "base", plugins, base)
    recipe = recipe_of(plugins, base)
    then = rd.fingerprints()
    assert not needs_the_start(rd, base)  # `sand sweep --status` names no rebuild for it
    assert check_resume(recipe, rd, plugins[1], plugins[0]) == ResumeCheck()
    assert rd.fingerprint("synth/iter1") == then["synth/iter1"]  # read the start: kept as recorded
    assert "weights/iter0" not in rd.fingerprint("train/iter1")["inputs"]  # never read it: recorded without
    run(rd.path, plugins, base)
    assert rd.finished_stages() == STAGES and not (rd.path / "weights/iter0").exists()
    assert (rd.path / "weights/iter1/final").is_dir()
    assert list(rd.units(RunLayout.eval_units("final", "unseen")).values())
    assert check_resume(recipe, rd, plugins[1], plugins[0]) == ResumeCheck()

    previous = ["eval.models=[final]"]  # iteration 1 continues the SFT start
    rd = export_stopped_after_synthesis(tmp_path / "previous", plugins, previous)
    assert needs_the_start(rd, previous)
    with pytest.raises(InputsChanged, match=r"'train/iter1'.*--rebuild-weights"):
        check_resume(recipe_of(plugins, previous), rd, plugins[1], plugins[0])
    rd = export_stopped_after_synthesis(tmp_path / "sft-eval", plugins, base[:1])  # evaluates the start too
    with pytest.raises(WeightsAbsent, match=r"stage 'eval' reads the SFT start's weights.*--rebuild-weights"):
        check_resume(recipe_of(plugins, base[:1]), rd, plugins[1], plugins[0])


def test_weights_read_is_what_each_stage_loads(plugins):
    from sand_framework.app.fingerprint import weights_read

    stages = ["expert", "train/iter0", "synth/iter1", "train/iter1", "eval"]
    read = lambda *o: [weights_read(recipe_of(plugins, o), s) for s in stages]  # noqa: E731
    assert read() == [[], [], [0], [0], [0, 1]]
    assert read("run.train_from=base", "eval.models=[final]") == [[], [], [0], [], [1]]
    assert read("run.train_from=base", "method=eto", "eval.models=[base]") == [[], [], [0], [0], []]


def test_a_run_made_before_fingerprints_resumes_says_so_once_and_is_checked_from_then_on(finished, plugins,
                                                                                       tmp_path):
    rd = copy_of(finished, tmp_path)
    state = json.loads((rd.path / RunLayout.STATE).read_text())
    del state["fingerprints"]
    (rd.path / RunLayout.STATE).write_text(json.dumps(state))
    recipe = recipe_of(plugins)
    assert check_resume(recipe, rd, plugins[1], plugins[0]).unknown == STAGES  # unknown: said, then recorded
    assert list(rd.fingerprints()) == STAGES and rd.finished_stages() == STAGES
    assert check_resume(recipe, rd, plugins[1], plugins[0]) == ResumeCheck()  # said once
    with pytest.raises(InputsChanged, match="'train/iter0'"):
        check_resume(recipe_of(plugins, ["trainer.learning_rate=0.1"]), rd, plugins[1], plugins[0])


def test_a_refused_resume_records_nothing_for_the_unknown_stages(finished, plugins, tmp_path):
    rd = copy_of(finished, tmp_path)
    state = json.loads((rd.path / RunLayout.STATE).read_text())
    for stage in ("expert", "train/iter0"):
        del state["fingerprints"][stage]
    (rd.path / RunLayout.STATE).write_text(json.dumps(state))
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
    shutil.copy(finished / RunLayout.EXPERT_DATA, data)
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
    state = json.loads((source.path / RunLayout.STATE).read_text())
    plugin = next(iter(state["fingerprints"]["expert"]["plugins"]))
    state["fingerprints"]["expert"]["plugins"][plugin] = "0.0.1"
    (source.path / RunLayout.STATE).write_text(json.dumps(state))
    with caplog.at_level("WARNING", logger="sand_framework.app.reuse"):
        assert reuse_stages(RunDir.create_at(tmp_path / "arm"), recipe, source.path, recipe, ["expert"], ps,
                            regs) == ["expert"]
    assert f"plugin {plugin}: version 0.0.1 there" in caplog.text


def test_stage_inputs_is_the_one_definition_reuse_imports():
    from sand_framework.app import reuse

    assert reuse.stage_inputs is stage_inputs


# -- settings that cannot change results, format 2 and version-1 records --------------------------------------------


@pytest.mark.parametrize("speed, result, stage", [
    ("policy.threads=3", "policy.top_k=5", "synth/iter1"),
    ("trainer.threads=3", "trainer.learning_rate=0.1", "train/iter0"),
    ("trainer.report_to=tensorboard", "trainer.lora_r=8", "train/iter0"),
    ("trainer.logging_steps=1", "trainer.warmup_ratio=0.5", "train/iter0"),
    ("trainer.save_steps=7", "trainer.max_steps=3", "train/iter0"),
    ("trainer.save_total_limit=5", "trainer.max_length=512", "train/iter0"),
    ("trainer.keep_checkpoints=true", "trainer.weight_decay=0.1", "train/iter0"),
    ("executor.max_concurrency=4", "executor.max_rollout_steps=1", "synth/iter1"),
    ("executor.max_parallel=3", "executor.verify_replay=false", "synth/iter1"),
    ("executor.rollout_mode=async", "executor.temperature=0.5", "synth/iter1"),
    ("evaluator.rollout_mode=async", "evaluator.max_new_tokens=60", "eval"),
    ("evaluator.max_concurrency=2", "evaluator.max_steps=3", "eval"),
    ("eval.batch_size=1", "eval.limit=2", "eval"),
])
def test_a_speed_only_edit_resumes_and_a_result_edit_beside_it_is_refused(finished, plugins, speed, result, stage):
    """Moving a run to a machine with more cores (threads), turning on asynchronous rollouts, logging more often:
    none of it can change what a finished stage computed, so none of it blocks the resume (the settings are
    marked SpeedOnly and left out of the fingerprints); the result-affecting setting next to each still does."""
    rd = RunDir(finished)
    before = json.loads((finished / RunLayout.STATE).read_text())
    assert check_resume(recipe_of(plugins, [speed]), rd, plugins[1], plugins[0]) == ResumeCheck()
    assert json.loads((finished / RunLayout.STATE).read_text()) == before  # nothing re-recorded
    with pytest.raises(InputsChanged) as info:
        check_resume(recipe_of(plugins, [speed, result]), rd, plugins[1], plugins[0])
    key = result.split("=")[0]
    assert f"since stage {stage!r} was computed" in str(info.value) and f"{key}: " in str(info.value)
    assert speed.split("=")[0] not in str(info.value)


def test_a_setting_marked_speed_only_since_a_stage_was_fingerprinted_resumes(finished, plugins, tmp_path):
    """A format-2 record made before ``executor.max_parallel`` was marked speed only holds it: it is set aside like
    a format-1 record's speed-only settings (no note: nothing else changed) and the record rewritten without it,
    while a result edit beside it is still refused."""
    rd = copy_of(finished, tmp_path)
    state = json.loads((rd.path / RunLayout.STATE).read_text())
    for stage in STAGES[2:]:
        state["fingerprints"][stage]["recipe"]["executor"]["max_parallel"] = 8
    (rd.path / RunLayout.STATE).write_text(json.dumps(state))
    assert check_resume(recipe_of(plugins, ["executor.max_parallel=3"]), rd, plugins[1], plugins[0]) == ResumeCheck()
    assert "max_parallel" not in rd.fingerprint("synth/iter1")["recipe"]["executor"]
    (rd.path / RunLayout.STATE).write_text(json.dumps(state))
    with pytest.raises(InputsChanged, match=r"stage 'synth/iter1'.*executor\.verify_replay: True then, False now"):
        check_resume(recipe_of(plugins, ["executor.verify_replay=false"]), rd, plugins[1], plugins[0])


def test_every_speed_only_setting_is_left_out_of_every_stage(plugins):
    """Each built-in component's SpeedOnly fields (and the recipe sections'): changing one changes no stage's
    fingerprint; the fields left are exactly the unmarked ones."""
    import copy

    from sand_framework.config.paramdoc import speed_only_fields
    from sand_framework.config.schema import SECTIONS

    ps, regs = plugins
    base = recipe_of(plugins, ["run.iterations=2"])
    stages = RunLayout.stages(2)
    marked = 0
    for kind in ("environment", "policy", "executor", "trainer", "preference_trainer", "evaluator"):
        for name in regs[kind].names():
            cls = regs[kind].entries[name].cls
            fields = speed_only_fields(cls.Params)
            if not fields:
                continue
            recipe = copy.copy(base)
            recipe.slots = {**base.slots, kind: (name, cls.Params())}
            for field_name in fields:
                params = copy.copy(recipe.slots[kind][1])
                object.__setattr__(params, field_name, "changed")
                edited = copy.copy(recipe)
                edited.slots = {**recipe.slots, kind: (name, params)}
                for stage in stages:
                    assert stage_inputs(edited, stage) == stage_inputs(recipe, stage), (kind, name, field_name, stage)
                marked += 1
            seen = stage_inputs(recipe, "eval")[kind if kind != "preference_trainer" else "trainer"]
            if kind != "preference_trainer":
                assert not set(fields) & set(seen) and seen["name"] == name
    assert marked >= 30
    for section, cls in SECTIONS.items():
        for field_name in speed_only_fields(cls):
            edited = copy.copy(base)
            part = copy.copy(getattr(base, section))
            object.__setattr__(part, field_name, "changed")
            setattr(edited, section, part)
            assert all(stage_inputs(edited, s) == stage_inputs(base, s) for s in stages), (section, field_name)
    assert speed_only_fields(SECTIONS["eval"]) .keys() == {"batch_size"}
    assert "batch_size" not in stage_inputs(base, "eval")["eval"] and "limit" in stage_inputs(base, "eval")["eval"]


def as_version_1(rd: RunDir, recipe) -> dict:
    """``rd``'s fingerprints rewritten as SAND 0.2.0 recorded them: format 1, every setting of every section and
    slot (``_stage_inputs(..., 1)``, the 0.2.0 definition, kept to read such records)."""
    from sand_framework.app.fingerprint import _plain, _stage_inputs

    state = json.loads((rd.path / RunLayout.STATE).read_text())
    for stage, fp in state["fingerprints"].items():
        state["fingerprints"][stage] = {**fp, "v": 1, "recipe": _plain(_stage_inputs(recipe, stage, 1))}
    (rd.path / RunLayout.STATE).write_text(json.dumps(state))
    return state


def test_a_version_1_run_resumes_with_a_note_checked_and_rewritten_in_version_2(finished, plugins, tmp_path):
    from sand_framework.app.fingerprint import VERSION
    from sand_framework.app.resume_check import older_format_note

    rd = copy_of(finished, tmp_path)
    recipe = recipe_of(plugins)
    v1 = as_version_1(rd, recipe)
    assert v1["fingerprints"]["synth/iter1"]["recipe"]["trainer"]["threads"] == 1  # format 1 held every setting
    # A result-affecting edit since a version-1 record is refused, and nothing is rewritten ...
    with pytest.raises(InputsChanged, match=r"'train/iter0'.*trainer\.learning_rate: 0\.0005 then, 0\.1 now"):
        check_resume(recipe_of(plugins, ["trainer.learning_rate=0.1"]), rd, plugins[1], plugins[0])
    assert json.loads((rd.path / RunLayout.STATE).read_text()) == v1
    # ... a speed-only one is not: the stages are named once and recorded in format 2
    edited = recipe_of(plugins, ["policy.threads=8", "executor.max_concurrency=3"])
    found = check_resume(edited, rd, plugins[1], plugins[0])
    assert found.older_format == STAGES and not found.unknown and not found.new_versions
    assert VERSION == 2 and {fp["v"] for fp in rd.fingerprints().values()} == {2}
    assert rd.fingerprint("eval") == fingerprint(edited, rd, plugins[1], plugins[0], "eval")
    assert "threads" not in rd.fingerprint("synth/iter1")["recipe"]["policy"]
    note = older_format_note(found.older_format)
    assert "expert, train/iter0, synth/iter1, train/iter1, eval" in note and "format v1" in note and "v2" in note
    assert check_resume(edited, rd, plugins[1], plugins[0]) == ResumeCheck()  # said once
    with pytest.raises(InputsChanged, match="'train/iter0'"):  # and checked from then on
        check_resume(recipe_of(plugins, ["trainer.learning_rate=0.1"]), rd, plugins[1], plugins[0])


def test_a_version_1_record_keeps_its_plugin_versions_and_an_unreadable_one_is_recorded_anew(finished, plugins,
                                                                                          tmp_path):
    from sand_framework.app.resume_check import unreadable_note

    rd = copy_of(finished, tmp_path)
    recipe = recipe_of(plugins)
    state = as_version_1(rd, recipe)
    plugin = next(iter(state["fingerprints"]["train/iter0"]["plugins"]))
    state["fingerprints"]["train/iter0"]["plugins"][plugin] = "0.0.1"
    state["fingerprints"]["expert"]["v"] = 99  # a newer SAND's format
    (rd.path / RunLayout.STATE).write_text(json.dumps(state))
    found = check_resume(recipe, rd, plugins[1], plugins[0])
    assert found.unreadable == ["expert"] and found.older_format == STAGES[1:]
    assert found.new_versions == [f"train/iter0: plugin {plugin}: version 0.0.1 then, "
                                  f"{rd.fingerprint('synth/iter1')['plugins'][plugin]} now"]
    assert rd.fingerprint("train/iter0")["plugins"][plugin] == "0.0.1"  # still said on the next resume
    assert check_resume(recipe, rd, plugins[1], plugins[0]).new_versions == found.new_versions
    assert "expert" in unreadable_note(found.unreadable)


def test_sweep_reuse_reads_a_version_1_source_and_records_version_2(finished, plugins, tmp_path):
    ps, regs = plugins
    source = copy_of(finished, tmp_path)
    as_version_1(source, recipe_of(plugins))
    arm = recipe_of(plugins, ["policy.threads=4"])  # a speed-only difference between the arms
    stages = ["expert", "train/iter0", "synth/iter1"]
    with pytest.raises(RunDirError, match=r"cannot reuse 'synth/iter1'.*sampler\.n: 2 there, 3 here"):
        reuse_stages(RunDir.create_at(tmp_path / "other"), recipe_of(plugins, ["policy.threads=4", "sampler.n=3"]),
                     source.path, recipe_of(plugins), stages, ps, regs)
    target = RunDir.create_at(tmp_path / "arm")
    assert reuse_stages(target, arm, source.path, recipe_of(plugins), stages, ps, regs) == stages
    assert all(target.fingerprint(s) == fingerprint(arm, target, regs, ps, s) for s in stages)
    assert check_resume(arm, target, regs, ps) == ResumeCheck()
