"""The device check for the first GPU (scripts/gpu_check.py, issue 37) runs here on the CPU, so it still works the
day a GPU is lent: its training parts train through the real trainers and its record holds what ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu_check.py"


def _check(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "SAND_NO_PROGRESS": "1"}
    return subprocess.run([sys.executable, str(SCRIPT), "--cpu", "--out", str(tmp_path / "record.json"), *args],
                          env=env, capture_output=True, text=True, timeout=600, cwd=str(REPO))


def test_the_training_and_hand_back_parts_run_on_the_cpu_and_are_recorded(tmp_path):
    proc = _check(tmp_path, "--parts", "sft,dpo,hand_back")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    record = json.loads((tmp_path / "record.json").read_text())
    assert record["cpu_mode"] and record["device"]["cuda"] is False and record["device"]["trl"]
    parts = record["parts"]
    assert set(parts) == {"sft", "dpo", "hand_back"} and all(p["ok"] and p["seconds"] > 0 for p in parts.values())
    assert parts["sft"]["steps"] == 4 and parts["dpo"]["steps"] == 4
    assert parts["hand_back"]["summary"] == "no accelerator"  # on a GPU: what was reserved before and after


def test_a_failing_part_is_recorded_and_the_exit_says_so(tmp_path):
    """The example plugin is not installed in this venv: the SAND-loop part fails, named, and the record is kept."""
    proc = _check(tmp_path, "--parts", "sand_loop")
    assert proc.returncode == 1
    part = json.loads((tmp_path / "record.json").read_text())["parts"]["sand_loop"]
    assert not part["ok"] and "example plugin is not installed" in part["error"]
    assert "sand_loop: FAILED" in proc.stdout
