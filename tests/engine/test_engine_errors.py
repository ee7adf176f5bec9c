"""Every error the engine raises is a SandError with its exit code (never RuntimeError, KeyError or assert), and the
statistics a component exposes are declared on its base class (Executor.stats).

The pipeline runs in-process on the real TextWorld-Express environment with the scripted policy of
tests/scripted.py and no rollouts (a few seconds), as in test_run_integrity.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from scripted import ScriptedPolicy

from sand_framework.components import Executor
from sand_framework.config import load_recipe, validate
from sand_framework.engine.context import RunContext
from sand_framework.engine.pipeline import Pipeline
from sand_framework.errors import ComponentError, IncompleteStageError, RecipeError, SandError
from sand_framework.plugins import load_plugins
from sand_framework.store import RunDir
from sand_framework.store import RunLayout

REPO = Path(__file__).resolve().parents[2]
OVERRIDES = ["data.limit=3", "run.synthesis_batch=2", "environment.n_train=6", "environment.n_seen=2",
             "environment.n_unseen=2", "sampler.n=3", "critic=no_rollout_critic"]


@pytest.fixture(scope="module")
def plugins():
    ps = load_plugins()
    return ps, ps.registries()


def pipeline(run: Path, plugins) -> Pipeline:
    ps, regs = plugins
    recipe = validate(load_recipe("smoke", OVERRIDES)[0], regs)
    rd = RunDir.create_at(run)
    (rd.path / "recipe.yaml").write_text("{}")
    ctx = RunContext(recipe=recipe, run_dir=rd, plugins=ps, registries=regs)
    ctx.components["policy"] = ScriptedPolicy()
    ctx._policy_ready = True
    ctx.base_model_path = "scripted"
    return Pipeline(ctx)


def test_a_method_returning_too_few_units_is_a_component_error(tmp_path, plugins):
    p = pipeline(tmp_path / "run", plugins)
    try:
        experts = p.expert()
        method = p._method()
        real = method.build_stream  # the engine builds through build_stream (SAND overrides it; others call build)
        method.build_stream = lambda batches, tools, depth=1: (units[:-1] for units in real(batches, tools, depth))
        with pytest.raises(ComponentError) as err:
            p.build(1, experts, {"agent": None, "sft": None, "base": None})
    finally:
        p.ctx.close()
    assert err.value.exit_code == 2
    msg = str(err.value)
    assert "synth/iter1: method 'sand' returned 1 unit(s) for 2 trajectory(ies)" in msg
    assert "Method.build must return one per trajectory" in msg and "sand run --resume" in msg
    assert not p.rd.stage_done(RunLayout.synth_stage(1))


def test_a_stage_left_without_a_unit_is_incomplete_and_not_recorded_done(tmp_path, plugins, monkeypatch):
    p = pipeline(tmp_path / "run", plugins)
    units = p.rd.units

    def dropping(*parts):
        log = units(*parts)
        if parts == (RunLayout.synthesis_units(1),) or list(parts) == [RunLayout.synthesis_units(1)]:
            append = log.append
            log.append = lambda unit, data: None if unit == experts[-1].task_id else append(unit, data)
        return log

    try:
        experts = p.expert()
        monkeypatch.setattr(p.rd, "units", dropping)
        with pytest.raises(IncompleteStageError) as err:
            p.build(1, experts, {"agent": None, "sft": None, "base": None})
    finally:
        p.ctx.close()
    assert err.value.exit_code == 5
    assert "1 unit(s) got no record" in str(err.value) and "sand run --resume" in str(err.value)
    assert not p.rd.stage_done(RunLayout.synth_stage(1))


def test_an_unknown_eval_model_is_a_recipe_error(tmp_path, plugins):
    p = pipeline(tmp_path / "run", plugins)
    try:
        with pytest.raises(RecipeError, match=r"eval.models: 'sft' is not one of \['base'\]") as err:
            p.evaluate({"base": None})
    finally:
        p.ctx.close()
    assert err.value.exit_code == 2


def test_rollout_critic_without_a_rollout_is_a_component_error(tmp_path, plugins):
    from sand_builtins.critics import RolloutCritic

    from sand_framework.components import CritiqueRequest
    from sand_framework.types import Candidate

    p = pipeline(tmp_path / "run", plugins)
    try:
        traj = p.expert()[0]
    finally:
        p.ctx.close()
    with pytest.raises(ComponentError, match="critic 'rollout_critic' needs each candidate's rollout") as err:
        RolloutCritic().prompt(CritiqueRequest(traj, 0, Candidate("look"), None))
    assert err.value.exit_code == 2 and traj.task_id in str(err.value)


# ---------------------------------------------------------------------------------------------- Executor.stats


class Bare(Executor):
    name = "bare_for_stats_test"

    def run(self, requests, env, policy, seed=None):
        return []


def test_executor_stats_is_declared_on_the_base_class():
    assert isinstance(Executor.__dict__["stats"], property) and Executor.stats.__doc__
    assert Bare().stats == {}
    old_style = Bare()
    old_style.stats = {"env_steps": 4}  # what an executor written before the declaration may do
    assert old_style.stats == {"env_steps": 4} and Bare().stats == {}


def test_every_builtin_executor_overrides_stats(plugins):
    _, regs = plugins
    for name in regs["executor"].names():
        cls = regs["executor"].get(name)
        assert isinstance(cls.stats, property), name


# ------------------------------------------------------------------------------------------- no bare errors


ENGINE = [*sorted((REPO / "sand_framework" / "engine").glob("*.py")), REPO / "plugins" / "sand_builtins" / "critics.py"]


@pytest.mark.parametrize("path", ENGINE, ids=lambda p: p.name)
def test_the_engine_raises_only_sand_errors(path):
    """No RuntimeError, KeyError, AssertionError or `assert` (stripped under -O) in the engine and the critics,
    and no `getattr(..., "stats", ...)`: what a component exposes is declared on its base class."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Assert):
            bad.append(f"line {node.lineno}: assert")
        if isinstance(node, ast.Raise) and node.exc is not None:
            call = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(call, ast.Name) and call.id in ("RuntimeError", "KeyError", "AssertionError"):
                bad.append(f"line {node.lineno}: raise {call.id}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" and \
                len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value == "stats":
            bad.append(f"line {node.lineno}: getattr(..., 'stats')")
    assert not bad, f"{path.relative_to(REPO)}: " + "; ".join(bad)


def test_the_new_errors_are_sand_errors():
    assert issubclass(ComponentError, SandError) and issubclass(IncompleteStageError, SandError)
