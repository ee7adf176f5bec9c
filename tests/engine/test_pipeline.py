"""The whole SAND loop through the CLI: a real environment, a real (tiny) model, real TRL training.

Includes the crash test: SIGKILL during synthesis, then ``--resume`` finishes
without redoing any trajectory that had been synthesized.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from sand_cli import SAND, sand


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("runs") / "smoke"
    sand("run", "smoke", "--run-dir", str(run_dir))
    return run_dir


def test_smoke_run_writes_every_artifact(smoke_run):
    metrics = json.loads((smoke_run / "metrics.json").read_text())
    for model in ("sft", "final"):
        for split in ("seen", "unseen"):
            m = metrics["eval"][model][split]
            assert m["tasks"] == 2 and 0 <= m["avg_reward"] <= 100 and m["prompt_tokens_per_task"] > 0
    assert metrics["synthesis"]["iter1"]["trajectories"] == 3
    assert metrics["synthesis"]["iter1"]["samples_total"] > 0
    for rel in ["recipe.yaml", "plugins.json", "expert/expert.sharegpt.json", "iter1/deliberation.sharegpt.json",
                "iter1/deliberation.messages.jsonl", "weights/iter0/final/adapter_config.json",
                "weights/iter1/final/adapter_config.json"]:
        assert (smoke_run / rel).exists(), rel
    plugins = json.loads((smoke_run / "plugins.json").read_text())["plugins"]
    assert any(p["name"] == "sand_builtins.detectors" and p["version"] for p in plugins)


def test_second_run_on_a_finished_dir_redoes_nothing(smoke_run):
    before = {p: p.stat().st_mtime_ns for p in smoke_run.rglob("*.units.jsonl")}
    proc = sand("run", "--resume", str(smoke_run))
    assert "metrics" in proc.stdout
    assert {p: p.stat().st_mtime_ns for p in smoke_run.rglob("*.units.jsonl")} == before


def test_run_dir_is_refused_when_it_holds_a_run(smoke_run):
    proc = sand("run", "smoke", "--run-dir", str(smoke_run), check=False)
    assert proc.returncode == 3 and "--resume" in proc.stderr


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_kill_during_synthesis_then_resume(tmp_path):
    """SIGKILL with 2 of the 8 synthesis units written (the pause plugin holds the run right after the second, so
    the kill lands there on a machine of any speed), then a resume in a new process."""
    from run_control import PAUSE_PLUGIN

    run_dir = tmp_path / "killed"
    units = run_dir / "iter1" / "synthesis.units.jsonl"
    marker = tmp_path / "held"
    args = [*SAND, "run", "smoke", "data.limit=8", "run.synthesis_batch=1", "eval.limit=1", "--run-dir", str(run_dir),
            "--plugins-dir", str(PAUSE_PLUGIN)]
    env = {**os.environ, "SAND_PAUSE_AT": "synth/iter1#2", "SAND_PAUSE_FILE": str(marker)}
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.time() + 400
    while not marker.is_file() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = _lines(units)
    assert len(before) == 2, f"the kill should land after the second unit ({len(before)} units done)"
    assert not (run_dir / "metrics.json").exists()

    sand("run", "--resume", str(run_dir))
    after = _lines(units)
    assert after[: len(before)] == before, "finished units must be kept byte for byte"
    ids = [json.loads(line)["unit"] for line in after]
    assert len(ids) == len(set(ids)) == 8, "every trajectory synthesized exactly once across both processes"
    assert json.loads((run_dir / "metrics.json").read_text())["synthesis"]["iter1"]["trajectories"] == 8


def test_cli_listing_commands():
    plugins = json.loads(sand("plugins").stdout)
    names = {p["name"] for p in plugins}
    assert "sand_builtins.environments.textworld_express" in names
    assert all(p["hooks"] for p in plugins)
    comps = json.loads(sand("components", "--json").stdout)
    kinds = {c["kind"] for c in comps}
    assert kinds == {"environment", "policy", "detector", "sampler", "executor", "critic", "synthesizer", "method",
                     "trainer", "preference_trainer", "evaluator"}
    assert "max_new_tokens" in sand("config", "smoke", "sampler.n=2").stdout
    bad = sand("components", "detectr", check=False)
    assert bad.returncode == 2 and "did you mean 'detector'" in bad.stderr
