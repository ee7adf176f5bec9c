"""The plugin contract is versioned and kept: a plugin written against the previous contract still loads and runs.

``sand_framework.CONTRACT_VERSION`` is the MAJOR.MINOR of the package version; a renamed lifecycle argument
(``context`` -> ``run`` in 0.2) keeps working with a DeprecationWarning naming the replacement; an observer that
no longer matches its spec is disabled with a warning instead of costing the plugin its components; lifecycle
hooks are called through pluggy, so wrappers wrap them; a plugin may declare the contracts it supports.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import sand_framework
from sand_framework import CONTRACT_VERSION, __version__, hookimpl
from sand_framework.errors import PluginLoadError
from sand_framework.lifecycle import RunInfo, notify
from sand_framework.plugins import PluginSet, load_plugins

REPO = Path(__file__).resolve().parents[2]
LEGACY = Path(__file__).resolve().parents[1] / "data" / "plugin_contract_0_1"
EXAMPLE = REPO / "plugins" / "examples" / "sand-example-plugin"
LIFECYCLE = ("sand_run_start", "sand_stage_end", "sand_step_deliberated", "sand_iteration_end", "sand_run_end")
"""The lifecycle hooks of contract 0.1, each of which the 0.1 plugin implements (``sand_unit_saved`` came later)."""


def info(path: Path = Path("/runs/r-1")) -> RunInfo:
    return RunInfo(name="r", path=path, recipe={"run": {"name": "r", "iterations": 1}}, iteration=1, iterations=1,
                   resumed=False, started=0.0)


def plugin(name: str, **hooks) -> types.ModuleType:
    mod = types.ModuleType(name)
    for hook, fn in hooks.items():
        setattr(mod, hook, fn)
    return mod


# ------------------------------------------------------------------------------------------------ versions


def test_the_version_is_one_number_everywhere_and_the_contract_is_its_major_minor():
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^version = "([^"]+)"', pyproject, re.MULTILINE).group(1) == __version__
    assert CONTRACT_VERSION == ".".join(__version__.split(".")[:2])
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    section = changelog.split(f"## [{__version__}]", 1)
    assert len(section) == 2, f"CHANGELOG.md has no '## [{__version__}]' section"
    assert "Migrating from" in section[1].split("\n## [", 1)[0], "the release's section says how to migrate"


def test_the_docs_state_this_contract_and_the_example_plugins_pins():
    """hooks.md and writing-plugins.md say which contract this is and show the pins the example plugin has."""
    hooks = (REPO / "docs" / "hooks.md").read_text(encoding="utf-8")
    writing = (REPO / "docs" / "writing-plugins.md").read_text(encoding="utf-8")
    assert f"This is plugin contract **{CONTRACT_VERSION}**" in hooks
    assert f"`sand-framework {__version__} (plugin contract {CONTRACT_VERSION})`" in writing
    init = (EXAMPLE / "sand_example" / "__init__.py").read_text(encoding="utf-8")
    pyproject = (EXAMPLE / "pyproject.toml").read_text(encoding="utf-8")
    contract = re.search(r'^sand_contract = "[^"]+"', init, re.MULTILINE).group(0)
    dependency = re.search(r'^dependencies = \["sand-framework[^"]*"\]', pyproject, re.MULTILINE).group(0)
    version = re.search(r'^version = "[^"]+"', pyproject, re.MULTILINE).group(0)
    for doc, text in (("hooks.md", hooks), ("writing-plugins.md", writing)):
        assert contract in text and dependency.split(" = ", 1)[1] in text, doc
    assert dependency in writing and version in writing  # section 1's pyproject.toml is the example's


def test_the_context_deprecation_says_when_it_goes_everywhere(caplog):
    """0.2 deprecated the lifecycle argument ``context``; 0.3 keeps it (a 0.1 plugin still runs) and every place
    that says when it goes (the warning, the docstrings, the docs, CHANGELOG) names the same contract."""
    from packaging.version import Version

    from sand_framework import hookspecs
    from sand_framework.lifecycle import LegacyContext

    removed = hookspecs.CONTEXT_REMOVED_IN
    assert Version(removed) > Version(CONTRACT_VERSION), \
        f"contract {CONTRACT_VERSION} was to drop `context` ({removed}): remove it, or extend it everywhere"
    with pytest.warns(DeprecationWarning) as warned:
        load_plugins(dirs=[str(LEGACY)])
    said = [str(w.message) for w in warned if issubclass(w.category, DeprecationWarning)]
    assert said and all(f"removed in {removed}: rename the argument to `run`" in s for s in said), said
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    release = changelog.split(f"## [{__version__}]", 1)[1].split("\n## [", 1)[0]
    hooks = (REPO / "docs" / "hooks.md").read_text(encoding="utf-8")
    (row,) = [line for line in hooks.splitlines() if line.startswith("| 0.2 | lifecycle argument `context`")]
    texts = {"hookspecs": hookspecs.__doc__, "sand_run_end": sand_framework.hookspecs.sand_run_end.__doc__,
             "LegacyContext": LegacyContext.__doc__, "hooks.md": row, "CHANGELOG.md": release,
             "writing-plugins.md": (REPO / "docs" / "writing-plugins.md").read_text(encoding="utf-8")}
    for where, text in texts.items():
        flat = " ".join(text.split()).lower()
        assert f"removed in {removed}" in flat, where
        assert not re.search(rf"removed in (?!{re.escape(removed)}\b)\d", flat), where


def test_version_option_shows_the_contract():
    from click.testing import CliRunner

    from sand_framework.cli.main import main

    out = CliRunner().invoke(main, ["--version"]).output
    assert f"sand-framework {__version__} (plugin contract {CONTRACT_VERSION})" in out


# --------------------------------------------------------------------------------- the 0.1 plugin, as written


def test_a_plugin_written_for_0_1_loads_with_a_deprecation_warning_naming_the_replacement(caplog):
    with pytest.warns(DeprecationWarning, match=r"`context` was renamed `run`") as warned:
        ps = load_plugins(dirs=[str(LEGACY)])
    said = [str(w.message) for w in warned if issubclass(w.category, DeprecationWarning)]
    assert len(said) == len(LIFECYCLE)  # one per observer, each naming the plugin and the function
    assert all(s.startswith("plugin 'legacy_plugin': ") for s in said)
    assert any("sand_run_end(context, metrics)" in s for s in said)
    assert set(LIFECYCLE) <= set(ps.info["legacy_plugin"].hooks)
    assert "legacy_any_disagreement" in ps.registries()["detector"].names()


def test_the_0_1_observers_are_called_with_a_read_only_context(tmp_path, monkeypatch):
    log = tmp_path / "observed.jsonl"
    monkeypatch.setenv("LEGACY_OBSERVER_LOG", str(log))
    with pytest.warns(DeprecationWarning):
        ps = load_plugins(dirs=[str(LEGACY)])
    warnings: list[str] = []
    run = info(tmp_path / "run-1")
    notify(ps.pm.hook, "sand_run_start", run, warnings.append)
    notify(ps.pm.hook, "sand_stage_end", run, warnings.append, stage="expert", summary={"trajectories": 3})
    notify(ps.pm.hook, "sand_iteration_end", run, warnings.append, iteration=1, summary={})
    notify(ps.pm.hook, "sand_run_end", run, warnings.append, metrics={"eval": {"sft": {}, "final": {}}})
    assert warnings == []
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [line["event"] for line in lines] == ["run_start", "stage_end", "iteration_end", "run_end"]
    assert {line["run_dir"] for line in lines} == {str(tmp_path / "run-1")} and lines[0]["name"] == "r"
    assert lines[-1]["models"] == ["final", "sft"]


def test_the_legacy_context_is_read_only_and_says_what_replaced_the_live_parts():
    from sand_framework.lifecycle import LegacyContext

    context = LegacyContext(info())
    assert context.name == "r" and context.run_dir.path == Path("/runs/r-1") and context.recipe["run"]["name"] == "r"
    with pytest.raises(AttributeError, match="cannot change"):
        context.name = "x"
    with pytest.raises(AttributeError, match="cannot change"):
        context.recipe.run = {}
    with pytest.raises(AttributeError, match=r"frozen RunInfo"):
        context.registries  # noqa: B018


def test_a_0_1_plugin_validates_a_recipe_from_the_command_line():
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "SAND_NO_PROGRESS": "1"}
    proc = subprocess.run([sys.executable, "-m", "sand_framework.cli.main", "validate", "smoke",
                           "detector=legacy_any_disagreement", "--plugins-dir", str(LEGACY)],
                          capture_output=True, text=True, timeout=120, env=env, cwd=str(REPO))
    assert proc.returncode == 0, proc.stderr
    assert "detector=legacy_any_disagreement" in proc.stdout
    assert "warning: plugin 'legacy_plugin'" in proc.stderr and "rename the argument to `run`" in proc.stderr


@pytest.mark.slow
def test_a_0_1_plugin_runs_a_whole_run(tmp_path):
    """A real ``sand run smoke`` with the 0.1 plugin's detector and observers: every observer is called."""
    log = tmp_path / "observed.jsonl"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "SAND_NO_PROGRESS": "1",
           "LEGACY_OBSERVER_LOG": str(log)}
    proc = subprocess.run([sys.executable, "-m", "sand_framework.cli.main", "run", "smoke",
                           "detector=legacy_any_disagreement", "--plugins-dir", str(LEGACY),
                           "--run-dir", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=900, env=env, cwd=str(REPO))
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = [json.loads(line) for line in log.read_text().splitlines()]
    names = [e["event"] for e in events]
    assert names[0] == "run_start" and names[-1] == "run_end" and "iteration_end" in names
    assert [e["stage"] for e in events if e["event"] == "stage_end"] == \
        ["expert", "train/iter0", "synth/iter1", "train/iter1", "eval"]
    assert {e["run_dir"] for e in events} == {str(tmp_path / "run")}
    assert "rename the argument to `run`" in proc.stderr


# ----------------------------------------------------------------- an observer that no longer matches its spec


def test_an_observer_that_no_longer_matches_is_disabled_and_the_plugin_keeps_its_components(caplog):
    from sand_framework.components import Detector
    from sand_framework.types import Decision

    class Always(Detector):
        name = "always_for_contract_test"
        Params = sand_framework.components.NoParams

        def decide(self, sampled, expert):
            return Decision(True, 1.0)

    called = []
    mod = plugin("fixture",
                 sand_register_detectors=hookimpl(lambda register: register(Always)),
                 sand_run_end=hookimpl(lambda ctx, metrics: called.append(metrics)),
                 sand_stage_end=hookimpl(lambda run, stage: called.append(stage)))
    ps = PluginSet()
    with caplog.at_level(logging.WARNING, logger="sand_framework.plugins"):
        ps.register(mod, "fixture", "0.1.0", "entrypoint")
    said = [r.getMessage() for r in caplog.records]
    assert any("plugin 'fixture'" in s and "asks for 'ctx'" in s and "disabled" in s and
               "takes run, metrics" in s for s in said), said
    assert not any("without @hookimpl" in s for s in said)
    assert ps.info["fixture"].hooks == ["sand_register_detectors", "sand_stage_end"]
    assert "always_for_contract_test" in ps.registries()["detector"].names()
    notify(ps.pm.hook, "sand_run_end", info(), pytest.fail, metrics={})
    notify(ps.pm.hook, "sand_stage_end", info(), pytest.fail, stage="eval", summary={})
    assert called == ["eval"]


def test_a_registration_hook_that_does_not_match_still_stops_the_command():
    """Components cannot be half-registered: only observers are disabled."""
    mod = plugin("fixture", sand_register_detectors=hookimpl(lambda reg: None))
    with pytest.raises(PluginLoadError, match="does not match the hook specs"):
        PluginSet().register(mod, "fixture", "1", "module")


# ---------------------------------------------------------------------- lifecycle hooks go through pluggy


def test_lifecycle_wrappers_wrap_the_observers():
    order = []

    def new_style(run, stage):
        order.append(("new before", stage))
        result = yield
        order.append(("new after", result))
        return result

    def old_style(run):
        order.append("old before")
        outcome = yield
        order.append(("old after", outcome.get_result()))

    def observer(run, stage, summary):
        order.append(("observer", stage, dict(summary)))
        summary["changed"] = True  # its own copy

    ps = PluginSet()
    ps.register(plugin("obs", sand_stage_end=hookimpl(observer)), "obs", "1", "module")
    ps.register(plugin("new", sand_stage_end=hookimpl(wrapper=True)(new_style)), "new", "1", "module")
    ps.register(plugin("old", sand_stage_end=hookimpl(hookwrapper=True)(old_style)), "old", "1", "module")
    summary = {"steps": 1}
    notify(ps.pm.hook, "sand_stage_end", info(), pytest.fail, stage="expert", summary=summary)
    assert order == ["old before", ("new before", "expert"), ("observer", "expert", {"steps": 1}),
                     ("new after", []), ("old after", [])]
    assert summary == {"steps": 1}


def test_a_failing_wrapper_is_reported_naming_its_plugin_and_the_run_goes_on():
    def broken(run):
        yield
        raise RuntimeError("dashboard unreachable")

    ps = PluginSet()
    ps.register(plugin("dash", sand_run_end=hookimpl(wrapper=True)(broken)), "dash", "1", "module")
    warnings: list[str] = []
    notify(ps.pm.hook, "sand_run_end", info(), warnings.append, metrics={})
    assert len(warnings) == 1 and "plugin 'dash' failed in its sand_run_end hook wrapper" in warnings[0]
    assert "RuntimeError: dashboard unreachable" in warnings[0] and "the run goes on" in warnings[0]


def test_an_observer_calling_sys_exit_is_reported():
    ps = PluginSet()
    ps.register(plugin("quit", sand_run_start=hookimpl(lambda run: sys.exit(3))), "quit", "1", "module")
    warnings: list[str] = []
    notify(ps.pm.hook, "sand_run_start", info(), warnings.append)
    assert warnings and "plugin 'quit' failed in its sand_run_start hook: it called sys.exit(3)" in warnings[0]


# ---------------------------------------------------------------------------- declared contract ranges


def test_a_plugin_outside_its_declared_contract_range_is_refused_naming_both():
    mod = plugin("fixture")
    mod.sand_contract = ">=0.1,<0.2"
    with pytest.raises(PluginLoadError) as err:
        PluginSet().register(mod, "fixture", "1", "entrypoint")
    msg = str(err.value)
    assert "plugin 'fixture' supports the SAND plugin contract >=0.1,<0.2" in msg
    assert f"implements contract {CONTRACT_VERSION}" in msg and "SAND_PLUGINS_DENY=fixture" in msg
    assert err.value.exit_code == 2


def test_a_declared_range_is_checked_and_shown():
    ps = PluginSet()
    mod = plugin("fixture")
    mod.sand_contract = f">={CONTRACT_VERSION},<1"
    ps.register(mod, "fixture", "1", "entrypoint")
    assert ps.info["fixture"].contract == f">={CONTRACT_VERSION},<1"
    bad = plugin("bad")
    bad.sand_contract = "0.2 or newer"
    with pytest.raises(PluginLoadError, match="not a version range"):
        ps.register(bad, "bad", "1", "entrypoint")


def test_the_example_plugin_declares_the_contract_it_supports():
    from packaging.specifiers import SpecifierSet

    text = (EXAMPLE / "sand_example" / "__init__.py").read_text(encoding="utf-8")
    declared = re.search(r'^sand_contract = "([^"]+)"', text, re.MULTILINE).group(1)
    assert CONTRACT_VERSION in SpecifierSet(declared)
    pyproject = (EXAMPLE / "pyproject.toml").read_text(encoding="utf-8")
    dependency = re.search(r'"sand-framework([^"]*)"', pyproject).group(1)
    assert dependency and __version__ in SpecifierSet(dependency), "the package pins the framework it was made for"


OPTIONAL_HOOKS = ("context_token_budget", "device_plan", "weights_kind", "expect_agent_weights", "rollout_stats",
                  "input_files", "agent_token_budget", "thought_token_budget", "deliberations", "unit_shape",
                  "benchmark", "concurrent_generate")


def test_optional_component_hooks_are_declared_on_the_bases_and_never_looked_up_by_name():
    """Issue 38 item 4: each optional hook has its default on the base class a component inherits, and the core
    calls it there; a `getattr(component, "hook", None)` would be a hook declared nowhere."""
    import re

    from sand_framework.components import (Component, Environment, Evaluator, Method, Policy, PreferenceTrainer,
                                           Trainer)

    assert Component.device_plan(None, None) == [] and Component.context_token_budget(None) == {}
    assert Trainer.weights_kind(None) is None and PreferenceTrainer.weights_kind(None) is None
    assert Policy.expect_agent_weights(None, "full") is None and Evaluator.rollout_stats is None
    assert Method.unit_shape == "generic" and Environment.benchmark is None and Policy.concurrent_generate is False
    core = Path(__file__).resolve().parents[2] / "sand_framework"
    looked_up = [f"{p.relative_to(core)}: {m.group(0)}" for p in core.rglob("*.py")
                 for m in re.finditer(r"getattr\(.*?[\"'](%s)[\"']" % "|".join(OPTIONAL_HOOKS), p.read_text())]
    assert not looked_up, looked_up


def test_a_method_whose_units_carry_records_still_has_them_told_with_a_deprecation():
    """Until 0.3.1 the engine read ``unit["records"]`` of every method as deliberated steps; 0.3.2 asks
    ``Method.deliberations``, whose default keeps that reading for one more minor release, with a warning."""
    from sand_framework.components import Method
    from sand_framework.components.base import NoParams

    class Legacy(Method[NoParams]):
        name, description, produces = "legacy", "a 0.3.1 method that stores SAND-shaped records", "sft"

        def build(self, trajectories, tools, seed):
            return []

        def assemble(self, units, trajectories):
            raise NotImplementedError

    method = Legacy(NoParams())
    assert method.deliberations({"trajectory": {}}) == []
    with pytest.warns(DeprecationWarning, match=r"override Method.deliberations\(unit\)"):
        told = method.deliberations({"records": [{"task_id": "t", "step_index": 2, "expert_action": "go west",
                                                  "expert_thought": "", "candidates": [], "rollouts": [],
                                                  "critiques": [], "synthesis": {"thought": ""}}]})
    assert [(r.step_index, r.expert_action) for r in told] == [(2, "go west")]
