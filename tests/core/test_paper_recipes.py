"""The paper recipes' CPU variants run end to end on the real ALFWorld and ScienceWorld environments.

The default suite runs them with the tiny model (minutes matter in CI); the
``slow`` variants run exactly the CPU recipes, with SmolLM2-135M.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SAND = [sys.executable, "-m", "sand_framework.cli.main"]


def _run(recipe, run_dir, *overrides, timeout=1800):
    proc = subprocess.run([*SAND, "run", recipe, *overrides, "--run-dir", str(run_dir)], capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    print(f"\n{recipe}: synthesis {metrics['synthesis']['iter1']}\n eval {json.dumps(metrics['eval'])}")
    return metrics


FAST = ("model.base=tiny-random", "data.limit=1", "eval.limit=1", "trainer.max_steps=1", "evaluator.max_new_tokens=40",
        "sampler.max_new_tokens=40", "executor.max_new_tokens=40", "critic.max_new_tokens=8",
        "synthesizer.max_new_tokens=8", "evaluator.max_steps=2", "executor.max_rollout_steps=1")


def _needs(module):
    pytest.importorskip(module, reason=f"{module} not installed (pip install 'sand-framework[{module}]')")
    if module == "alfworld":  # the engine installs with pip; the game data is a separate download
        data = os.environ.get("ALFWORLD_DATA", "")
        if not data or not (Path(data) / "json_2.1.1").is_dir():
            pytest.skip("ALFWorld game data not found: run `alfworld-download` and set ALFWORLD_DATA "
                        "(CI uses ../shared/alfworld beside the checkout)")


@pytest.mark.parametrize("env,module", [("alfworld", "alfworld"), ("sciworld", "scienceworld")])
def test_cpu_variant_runs_with_tiny_model(tmp_path, env, module):
    _needs(module)
    m = _run(f"paper/cpu/{env}", tmp_path / env, *FAST)
    assert m["synthesis"]["iter1"]["trajectories"] == 1
    assert set(m["eval"]["final"]) == {"seen", "unseen"}


@pytest.mark.slow
@pytest.mark.parametrize("env,module", [("alfworld", "alfworld"), ("sciworld", "scienceworld")])
def test_cpu_variant_runs_as_written(tmp_path, env, module):
    _needs(module)
    # ALFWorld as written took over an hour on the shared 2-core machine (docs/environments.md)
    m = _run(f"paper/cpu/{env}", tmp_path / env, timeout=3 * 3600)
    assert m["synthesis"]["iter1"]["steps"] > 0
