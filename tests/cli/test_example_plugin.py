"""The example third-party plugin (plugins/examples/sand-example-plugin), end to end.

The package is pip-installed with ``--no-deps --target`` into a temporary
folder (never into the venv, so the rest of the suite does not see it) and the
``sand`` CLI runs in subprocesses with that folder (and this checkout's
``sand_framework`` and built-ins) on ``PYTHONPATH``: exactly how SAND meets a
third-party package, through the ``sand`` entry-point group.
Also covers the loader's allow/deny variables, a plugin that fails to import
and two plugins that claim the same component name.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import sand_cli

REPO = Path(__file__).resolve().parents[2]
PKG = REPO / "plugins" / "examples" / "sand-example-plugin"
RECIPE = PKG / "recipes" / "example.yaml"
DELIBERATE_RECIPE = PKG / "recipes" / "example-deliberate.yaml"
METHOD_RECIPE = PKG / "recipes" / "example-method.yaml"
ENV_VARS = ("SAND_PLUGINS_ALLOW", "SAND_PLUGINS_DENY", "SAND_LOAD_ENTRYPOINTS", "SAND_RECIPE_PATH")


def _env(site: Path | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS and k != "PYTHONPATH"}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", SAND_NO_PROGRESS="1", PYTHONDONTWRITEBYTECODE="1")
    env.setdefault("SAND_CACHE", str(REPO / ".sand_cache"))
    # This checkout's framework and built-ins, whatever copy of SAND the interpreter has installed.
    env["PYTHONPATH"] = os.pathsep.join([*([str(site)] if site is not None else []), str(REPO), str(REPO / "plugins")])
    env.update(extra)
    return env


def sand(site: Path | None, *args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess:
    return sand_cli.sand(*args, check=False, timeout=timeout, env=_env(site, **env), cwd=str(REPO))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The example package installed with ``pip install --no-deps --target``."""
    work = tmp_path_factory.mktemp("example_plugin")
    src, target = work / "src", work / "site"
    shutil.copytree(PKG, src, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "build", "dist"))
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--disable-pip-version-check",
           "--target", str(target)]
    have_backend = importlib.util.find_spec("hatchling") is not None
    if have_backend:  # build offline with the installed backend
        cmd += ["--no-build-isolation", "--no-index"]
    proc = subprocess.run([*cmd, str(src)], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        if not have_backend:
            pytest.skip(f"cannot build the example plugin without hatchling (pip install hatchling): "
                        f"{proc.stderr[-300:]}")
        pytest.fail(f"pip install of the example plugin failed:\n{proc.stdout}\n{proc.stderr}")
    assert (target / "sand_example" / "__init__.py").is_file()
    return target


def _plugins(site: Path | None, **env: str) -> dict[str, dict]:
    proc = sand(site, "plugins", **env)
    assert proc.returncode == 0, proc.stderr
    return {p["name"]: p for p in json.loads(proc.stdout)}


# ---------------------------------------------------------------------- the installed package


def test_plugins_lists_the_example_with_version_and_hooks(site):
    info = _plugins(site)["example"]
    assert info == {"name": "example", "version": "0.2.0", "source": "entrypoint",
                    "hooks": ["sand_add_commands", "sand_register_detectors", "sand_register_environments",
                              "sand_register_methods"],
                    "contract": ">=0.3,<0.4"}
    assert "example" not in _plugins(None)  # not installed in the venv itself


def test_the_plugin_adds_a_sand_command(site):
    """`sand_add_commands`: the installed package adds `sand lights`; `sand --help` lists it; a bad option is a
    clean usage error; without the package there is no such command, and the built-ins never load plugins."""
    proc = sand(site, "lights", "--split", "unseen", "--limit", "2")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("lights:") and "press switch" in line for line in lines)
    assert "lights" in sand(site, "--help").stdout
    bad = sand(site, "lights", "--split", "nowhere")
    assert bad.returncode == 2 and "'nowhere' is not a split" in bad.stderr and "Traceback" not in bad.stderr
    missing = sand(None, "lights")
    assert missing.returncode == 2 and "No such command 'lights'" in missing.stderr
    denied = sand(site, "lights", SAND_PLUGINS_DENY="example")
    assert denied.returncode == 2 and "No such command" in denied.stderr


def test_a_plugin_command_cannot_replace_a_built_in(site, tmp_path):
    pkg = tmp_path / "site2"
    shutil.copytree(site, pkg)
    init = pkg / "sand_example" / "__init__.py"
    init.write_text(init.read_text().replace('@cli.command(name="lights")', '@cli.command(name="run")'))
    proc = sand(pkg, "--help")
    assert proc.returncode == 0 and "adds a command 'run', which `sand` already has" in proc.stderr
    assert "Run RECIPE" in proc.stdout


def test_components_show_the_new_detector_and_environment(site):
    proc = sand(site, "components", "detector", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert {"set_size", "entropy", "majority_margin"} <= set(rows)
    mm = rows["majority_margin"]
    assert mm["kind"] == "detector" and mm["plugin"] == "example"
    assert [p["name"] for p in mm["params"]] == ["threshold", "count_invalid", "expert_disagreement"]
    assert mm["params"][0]["default"] == 0.6
    proc = sand(site, "components", "environment", "--json")
    envs = {r["name"]: r["plugin"] for r in json.loads(proc.stdout)}
    assert envs["light_switches"] == "example"


def test_components_show_the_new_method(site):
    proc = sand(site, "components", "method", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert {"sand", "rft", "eto", "ipr", "successful_replay"} <= set(rows)
    mine = rows["successful_replay"]
    assert mine["kind"] == "method" and mine["plugin"] == "example"
    assert [(p["name"], p["default"]) for p in mine["params"]] == [("min_reward", 1.0)]
    assert "successful_replay" in sand(site, "components", "method").stdout


def test_run_the_example_method_recipe(site, tmp_path):
    """A method from a separate package builds iteration 1 of a real run (light switches, tiny model)."""
    proc = sand(site, "run", str(METHOD_RECIPE), "--run-dir", str(tmp_path / "run"), "data.limit=2",
                "eval.limit=1", "eval.models=[final]", "eval.splits=[unseen]", "trainer.max_steps=1", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    state = json.loads((tmp_path / "run" / "state.json").read_text())["done"]
    assert state["synth/iter1"]["method"] == "successful_replay"
    assert state["synth/iter1"]["kept"] == state["synth/iter1"]["trajectories"] == 2
    assert state["train/iter1"]["trajectories"] == 2
    units = [json.loads(line)["data"] for line in (tmp_path / "run" / "iter1" / "synthesis.units.jsonl")
             .read_text().splitlines()]
    assert all(u["kept"] and u["reward"] == 1.0 for u in units)
    bad = sand(site, "validate", str(METHOD_RECIPE), "method.min_reward=2")
    assert bad.returncode == 2 and "method[successful_replay]" in bad.stderr and "min_reward" in bad.stderr


def test_validate_example_recipe(site):
    proc = sand(site, "validate", str(RECIPE))
    assert proc.returncode == 0, proc.stderr
    assert "environment=light_switches" in proc.stdout and "detector=majority_margin" in proc.stdout
    bad = sand(site, "validate", str(RECIPE), "detector.threshold=1.5")
    assert bad.returncode == 2 and "detector[majority_margin]" in bad.stderr and "threshold" in bad.stderr


def test_run_example_recipe_reaches_the_deliberate_branch(site, tmp_path):
    """The docs' smoke run, with ``expert_mix`` candidates so the detector's deliberate branch runs end to end."""
    proc = sand(site, "run", str(DELIBERATE_RECIPE), f"run.output_dir={tmp_path}", "data.limit=2", "eval.limit=1",
                "trainer.max_steps=1", "--allow-recipe-plugins", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert run_dir.name.startswith("example-deliberate-")  # run.output_dir/NAME-STAMP
    log = run_dir / "iter1" / "synthesis.units.jsonl"
    units = [json.loads(line)["data"] for line in log.read_text().splitlines()]
    records = [r for u in units for r in u["records"] + u.get("failed", [])]  # a failed synthesis is kept apart
    assert records, "no step was deliberated"
    for r in records:  # majority_margin deliberated on real light-switch actions, each rolled out and critiqued
        assert r["detector_score"] < 0.6 and len(r["candidates"]) >= 2
        assert all(c["action"].startswith("press switch") for c in r["candidates"])
        assert len(r["rollouts"]) == len(r["candidates"]) == len(r["critiques"])
        assert r["synthesis"]["thought"] or r["synthesis"]["status"] == "failed"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert set(metrics["eval"]) == {"sft", "final"}
    assert metrics["eval"]["final"]["unseen"]["tasks"] == 1
    state = json.loads((run_dir / "state.json").read_text())["done"]
    assert state["expert"] == {"trajectories": 2, "successful": 2}
    plugins = {p["name"]: p for p in json.loads((run_dir / "plugins.json").read_text())["plugins"]}
    assert plugins["example"]["version"] == "0.2.0"
    experts = [json.loads(line) for line in (run_dir / "expert" / "trajectories.units.jsonl").read_text().splitlines()]
    assert experts and all("lights:" in json.dumps(e) for e in experts)


def test_package_own_tests(site):
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                          cwd=str(PKG), env=_env(site), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "skipped" not in proc.stdout  # the entry-point test ran too


# ---------------------------------------------------------------------- allow / deny


def test_deny_hides_the_example(site):
    plugins = _plugins(site, SAND_PLUGINS_DENY="example")
    assert "example" not in plugins and "sand_builtins.detectors" in plugins
    proc = sand(site, "validate", str(RECIPE), SAND_PLUGINS_DENY="example")
    assert proc.returncode == 2
    assert "unknown environment 'light_switches'" in proc.stderr
    assert "unknown detector 'majority_margin'" in proc.stderr


def test_allow_list(site):
    assert "example" in _plugins(site, SAND_PLUGINS_ALLOW="example")
    assert "example" in _plugins(site, SAND_PLUGINS_ALLOW="other, example")
    only_other = _plugins(site, SAND_PLUGINS_ALLOW="some_other_plugin")
    assert "example" not in only_other
    assert "sand_builtins.detectors" in only_other  # built-ins load regardless of the allow list
    assert "example" not in _plugins(site, SAND_LOAD_ENTRYPOINTS="0")


# ---------------------------------------------------------------------- failures name the plugin


def test_plugin_that_fails_to_import_stops_with_its_name(tmp_path):
    d = tmp_path / "plugins"
    d.mkdir()
    (d / "broken_plugin.py").write_text("import sand_no_such_module_xyz\n")
    for args in (["plugins"], ["components", "detector"], ["validate", "smoke"]):
        proc = sand(None, *args, "--plugins-dir", str(d))
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert "broken_plugin" in proc.stderr and "failed to import" in proc.stderr
        assert "sand_no_such_module_xyz" in proc.stderr
        assert "Traceback" not in proc.stderr


def test_same_component_name_from_two_plugins_fails_naming_both(site, tmp_path):
    d = tmp_path / "plugins"
    d.mkdir()
    (d / "copycat.py").write_text(textwrap.dedent("""
        from sand_framework import hookimpl
        from sand_framework.components import Detector
        from sand_framework.types import Decision

        class Copycat(Detector):
            name = "majority_margin"

            def decide(self, sampled, expert):
                return Decision(deliberate=False)

        @hookimpl
        def sand_register_detectors(register):
            register(Copycat)
    """))
    proc = sand(site, "components", "--plugins-dir", str(d))
    assert proc.returncode == 2, proc.stdout
    msg = proc.stderr
    assert "detector 'majority_margin' is registered twice" in msg
    assert "'example'" in msg and "'copycat'" in msg
    # Denying either one resolves it.
    assert sand(site, "components", "--plugins-dir", str(d), SAND_PLUGINS_DENY="copycat").returncode == 0
    assert sand(site, "components", "--plugins-dir", str(d), SAND_PLUGINS_DENY="example").returncode == 0
