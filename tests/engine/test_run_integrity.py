"""Run-directory integrity: damaged units anywhere are redone (never dropped), a stage is never recorded done on
empty input, and the files a run reads back are checked.

The pipeline runs in-process on the real TextWorld-Express environment with the scripted policy of
tests/scripted.py (a few seconds); test_pipeline.py and test_fault_injection.py run the same stages with real models.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scripted import ScriptedPolicy

from sand_framework.config import load_recipe, validate
from sand_framework.engine.context import RunContext
from sand_framework.engine.pipeline import Pipeline
from sand_framework.errors import EmptyStageError, RunDirError
from sand_framework.plugins import load_plugins
from sand_framework.store import RunDir

OVERRIDES = ["data.limit=3", "run.synthesis_batch=2", "environment.n_train=6", "environment.n_seen=2",
             "environment.n_unseen=2", "sampler.n=3", "critic=no_rollout_critic"]  # no rollouts: fast


@pytest.fixture(scope="module")
def plugins():
    ps = load_plugins()
    return ps, ps.registries()


def pipeline(run: Path, plugins, overrides=()) -> tuple[Pipeline, ScriptedPolicy]:
    ps, regs = plugins
    data, _ = load_recipe("smoke", [*OVERRIDES, *overrides])
    recipe = validate(data, regs)
    rd = RunDir(run) if (run / "recipe.yaml").exists() else RunDir.create_at(run)
    (rd.path / "recipe.yaml").write_text("{}")
    ctx = RunContext(recipe=recipe, run_dir=rd, plugins=ps, registries=regs)
    policy = ScriptedPolicy()
    ctx.components["policy"] = policy
    ctx._policy_ready = True
    ctx.base_model_path = "scripted"
    return Pipeline(ctx), policy


def synthesize(p: Pipeline, trajs: list) -> list:
    """SAND's build stage on the agent's weights (none: the scripted policy): the trajectories it trains on."""
    return p.build(1, trajs, {"agent": None, "sft": None, "base": None}).trajectories


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_torn_middle_synthesis_record_after_the_stage_is_done_is_redone(tmp_path, plugins):
    p, _ = pipeline(tmp_path / "run", plugins)
    try:
        experts = p.expert()
        assert len(synthesize(p, experts)) == 3
    finally:
        p.ctx.close()
    log = tmp_path / "run" / "iter1" / "synthesis.units.jsonl"
    before = lines(log)
    torn = before[1][: len(before[1]) // 2]
    log.write_text("\n".join([before[0], torn, before[2]]) + "\n")  # a middle line torn, the stage marked done

    p, policy = pipeline(tmp_path / "run", plugins)
    try:
        again = synthesize(p, p.expert())
    finally:
        p.ctx.close()
    assert [t.task_id for t in again] == [t.task_id for t in experts]  # 3 of 3, not 2 of 3
    assert policy.calls, "the damaged trajectory was not synthesized again"
    state = json.loads((tmp_path / "run" / "state.json").read_text())["done"]
    assert state["synth/iter1"]["trajectories"] == 3
    sharegpt = json.loads((tmp_path / "run" / "iter1" / "deliberation.sharegpt.json").read_text())
    assert len(sharegpt) == 3


def test_a_unit_whose_id_was_damaged_is_redone(tmp_path, plugins):
    p, _ = pipeline(tmp_path / "run", plugins)
    try:
        experts = p.expert()
        synthesize(p, experts)
    finally:
        p.ctx.close()
    log = tmp_path / "run" / "iter1" / "synthesis.units.jsonl"
    rows = lines(log)
    rec = json.loads(rows[0])
    rec["unit"] = rec["unit"] + "x"  # the payload and its checksum untouched
    log.write_text("\n".join([json.dumps(rec), *rows[1:]]) + "\n")

    p, policy = pipeline(tmp_path / "run", plugins)
    try:
        again = synthesize(p, p.expert())
    finally:
        p.ctx.close()
    assert len(again) == 3 and policy.calls


def test_a_torn_expert_record_is_redone_after_the_stage_is_done(tmp_path, plugins):
    p, _ = pipeline(tmp_path / "run", plugins)
    try:
        first = p.expert()
    finally:
        p.ctx.close()
    log = tmp_path / "run" / "expert" / "trajectories.units.jsonl"
    rows = lines(log)
    log.write_text("\n".join([rows[0], rows[1][:40], rows[2]]) + "\n")
    p, _ = pipeline(tmp_path / "run", plugins)
    try:
        again = p.expert()
    finally:
        p.ctx.close()
    assert [t.task_id for t in again] == [t.task_id for t in first]


def test_no_stage_is_recorded_done_on_empty_input(tmp_path, plugins):
    p, _ = pipeline(tmp_path / "run", plugins)
    real = p.expert_trajectory

    def failing(task_id):  # what a step cap below every expert path gives
        t = real(task_id)
        t.success = False
        return t

    p.expert_trajectory = failing
    try:
        with pytest.raises(EmptyStageError, match="none of the 3 tasks"):
            p.expert()
        with pytest.raises(EmptyStageError, match="no trajectories to build from"):
            synthesize(p, [])
        with pytest.raises(EmptyStageError, match="0 trajectories"):
            p._stage_end("train/iter1", {"weights": "x", "trajectories": 0})
    finally:
        p.ctx.close()
    assert not RunDir(tmp_path / "run").stage_done("expert")
    assert not RunDir(tmp_path / "run").stage_done("train/iter1")


def test_weights_are_stored_relative_so_a_copied_run_uses_its_own(tmp_path):
    import shutil

    rd = RunDir.create_at(tmp_path / "a")
    weights = rd.path / "weights" / "iter0" / "final"
    weights.mkdir(parents=True)
    rd.mark_done("train/iter0", {"weights": str(weights), "trajectories": 3})
    stored = json.loads((rd.path / "state.json").read_text())["done"]["train/iter0"]
    assert stored["weights"] == "./weights/iter0/final"
    shutil.copytree(rd.path, tmp_path / "b")
    assert RunDir(tmp_path / "b").stage_result("train/iter0")["weights"] == str(tmp_path / "b" / "weights" / "iter0" /
                                                                                "final")
    # a run written before paths were relative: the copy still finds its own weights, not the original's
    legacy = {"done": {"train/iter0": {"weights": str(weights), "trajectories": 3}}}
    (tmp_path / "b" / "state.json").write_text(json.dumps(legacy))
    assert RunDir(tmp_path / "b").stage_result("train/iter0")["weights"].startswith(str(tmp_path / "b"))


@pytest.mark.parametrize("name,content,needle", [
    ("state.json", "", "state.json is unreadable (empty file)"),
    ("state.json", "[1, 2]", "state.json is damaged"),
    ("plugins.json", "{not json", "plugins.json is unreadable"),
    ("plugins.json", '{"plugin_dirs": 3}', "plugins.json is damaged"),
    ("recipe.yaml", "", "recipe.yaml is damaged (it holds nothing"),
    ("recipe.yaml", b"\x00\xff binary", "recipe.yaml is damaged"),
])
def test_damaged_bookkeeping_files_are_named_with_the_fix(tmp_path, name, content, needle):
    rd = RunDir.create_at(tmp_path / "run")
    (rd.path / "recipe.yaml").write_text("run: {name: x}\n")
    target = rd.path / name
    target.write_bytes(content) if isinstance(content, bytes) else target.write_text(content)
    with pytest.raises(RunDirError) as exc:
        RunDir.open_existing(rd.path)
    assert needle in str(exc.value)
    assert any(fix in str(exc.value) for fix in ("restore it", "delete it"))


def test_sand_eval_of_a_copied_run_uses_the_copys_weights(tmp_path):
    import shutil

    from sand_framework.app.model_eval import run_weights

    rd = RunDir.create_at(tmp_path / "a")
    (rd.path / "recipe.yaml").write_text("run: {iterations: 1}\nmodel: {base: tiny-random}\n")
    paths = {}
    for k in (0, 1):
        paths[k] = rd.path / "weights" / f"iter{k}" / "final"
        paths[k].mkdir(parents=True)
        rd.mark_done(f"train/iter{k}", {"weights": str(paths[k]), "trajectories": 3})
    rd.write_json("metrics.json", {"run": str(rd.path), "weights": {"sft": str(paths[0]), "final": str(paths[1])}})
    assert json.loads((rd.path / "metrics.json").read_text())["run"] == str(rd.path)
    shutil.copytree(rd.path, tmp_path / "b")
    for name, k in (("sft", 0), ("final", 1), ("iter1", 1)):
        weights, _ = run_weights(tmp_path / "b", name)
        assert Path(weights) == (tmp_path / "b" / "weights" / f"iter{k}" / "final").resolve(), name


def test_a_lifecycle_hook_that_raises_or_exits_is_reported_and_the_run_goes_on(tmp_path, plugins, caplog):
    import types

    from sand_framework import hookimpl
    from sand_framework.errors import PluginLoadError
    from sand_framework.lifecycle import RunInfo
    from sand_framework.plugins import PluginSet

    mod, quiet = types.ModuleType("noisy"), types.ModuleType("quiet")
    seen = []

    @hookimpl
    def sand_stage_end(run, stage, summary):
        raise SystemExit(4)

    @hookimpl
    def quiet_stage_end(run, stage, summary):
        seen.append((run, stage, summary))
        summary["trajectories"] = 99  # a copy: the recorded stage keeps its own

    quiet.sand_stage_end = quiet_stage_end

    @hookimpl
    def sand_resolve_model(ref, cache_dir):
        raise KeyError("no such alias table")

    mod.sand_stage_end, mod.sand_resolve_model = sand_stage_end, sand_resolve_model
    ps = PluginSet()
    ps.load_builtins()
    ps.register(quiet, "quiet", "1", "module")
    ps.register(mod, "noisy", "1", "module")  # registered last, so called first
    p, _ = pipeline(tmp_path / "run", (ps, plugins[1]))
    try:
        with caplog.at_level("WARNING"):
            p._stage_end("expert", {"trajectories": 1})  # the hook exits; the stage is recorded anyway
    finally:
        p.ctx.close()
    assert RunDir(tmp_path / "run").stage_done("expert")
    assert RunDir(tmp_path / "run").stage_result("expert") == {"trajectories": 1}
    assert any("plugin 'noisy' failed in its sand_stage_end hook: it called sys.exit(4)" in r.getMessage()
               for r in caplog.records if r.levelname == "WARNING")  # a log record: it reaches run.log too
    (run, stage, _), = seen  # the other observer still ran, and saw a frozen snapshot of the run
    assert isinstance(run, RunInfo) and stage == "expert" and run.path == tmp_path / "run" and run.iteration == 0
    with pytest.raises(PluginLoadError, match="plugin 'noisy' failed in its sand_resolve_model hook: KeyError"):
        ps.resolve_model("x", str(tmp_path))
