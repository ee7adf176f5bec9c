"""A full disk stops a run with a clear message and loses nothing; after freeing space, --resume finishes it.

The disk is real: a size-limited tmpfs mounted for the test (skipped where mounting is not allowed).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SAND = [sys.executable, "-m", "sand_framework.cli.main"]


@pytest.fixture
def small_disk(tmp_path):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=320k", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_full_disk_is_reported_and_the_run_resumes_after_space_is_freed(small_disk):
    run = small_disk / "run"
    args = ["smoke", "data.limit=2", "eval.limit=1", "eval.splits=[unseen]", "trainer.max_steps=2",
            "trainer.save_steps=1"]
    proc = subprocess.run([*SAND, "run", *args, "--run-dir", str(run)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 6, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert "no space left" in proc.stderr and f"sand run --resume {run}" in proc.stderr
    done_before = json.loads((run / "state.json").read_text())["done"]
    assert "expert" in done_before  # what finished before the disk filled is kept
    expert_before = (run / "expert" / "trajectories.units.jsonl").read_bytes()

    subprocess.run(["mount", "-o", "remount,size=16m", str(small_disk)], check=True)
    proc = subprocess.run([*SAND, "run", "--resume", str(run)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (run / "expert" / "trajectories.units.jsonl").read_bytes() == expert_before
    assert json.loads((run / "metrics.json").read_text())["eval"]["final"]["unseen"]["tasks"] == 1
