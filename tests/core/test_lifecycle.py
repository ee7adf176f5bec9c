"""Lifecycle observers see a frozen snapshot and copies, so they cannot steer; a failing one is reported."""

from __future__ import annotations

import dataclasses
import types
from pathlib import Path

import pytest

from sand_framework import hookimpl
from sand_framework.lifecycle import RunInfo, notify
from sand_framework.plugins import PluginSet


def info() -> RunInfo:
    return RunInfo(name="r", path=Path("/runs/r-1"), recipe={"run": {"name": "r"}}, iteration=1, iterations=2,
                   resumed=False, started=0.0)


def observers(*impls) -> PluginSet:
    ps = PluginSet()
    for i, fn in enumerate(impls):
        mod = types.ModuleType(f"observer{i}")
        mod.sand_iteration_end = hookimpl(fn)
        ps.register(mod, f"observer{i}", "1", "module")
    return ps


def test_run_info_is_frozen_plain_data():
    run = info()
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.iteration = 3  # type: ignore[misc]
    plain = (str, int, float, bool, dict, Path)
    assert all(isinstance(getattr(run, f.name), plain) for f in dataclasses.fields(run))


def test_a_failing_observer_is_reported_and_the_others_still_run_on_copies():
    seen, warnings = [], []

    def records(run, iteration, summary):
        seen.append((run.iteration, iteration, dict(summary)))
        summary["steps"] = -1  # changes the observer's copy only

    def fails(run):
        raise RuntimeError("dashboard unreachable")

    ps = observers(records, fails)  # `fails` registered last: pluggy order calls it first
    summary = {"steps": 5}
    notify(ps.pm.hook, "sand_iteration_end", info(), warnings.append, iteration=1, summary=summary)
    assert seen == [(1, 1, {"steps": 5})] and summary == {"steps": 5}
    assert len(warnings) == 1 and "plugin 'observer1' failed in its sand_iteration_end hook" in warnings[0]
    assert "RuntimeError: dashboard unreachable" in warnings[0] and "the run goes on" in warnings[0]


def test_an_observer_written_for_the_live_context_loads_with_a_deprecation_warning():
    """The argument is ``run`` (a RunInfo) since 0.2; a plugin still asking for 0.1's ``context`` loads, is warned
    (naming ``run``) and gets a read-only stand-in (tests/core/test_contract.py holds a whole 0.1 plugin to this)."""
    seen = []

    def old(context, iteration):
        seen.append((context.name, context.run_dir.path, iteration))

    with pytest.warns(DeprecationWarning, match="rename the argument to `run`"):
        ps = observers(old)
    notify(ps.pm.hook, "sand_iteration_end", info(), pytest.fail, iteration=1, summary={})
    assert seen == [("r", Path("/runs/r-1"), 1)]
