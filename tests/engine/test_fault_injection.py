"""Crash-safety: a real run SIGKILLed in every stage (right after a unit the seed picks), resumed each time, ends identical to an uninterrupted one.

"Identical" is checked on the artifacts that matter — the expert data, every
synthesized trajectory and deliberation record, every evaluated task — and
"nothing recomputed" on the append-only unit logs: a unit is written once
when it finishes, so a unit redone after a crash would appear twice.

The kills aim by what the run writes, never by time: a test plugin (``tests/data/pause_plugin``) holds the run in
the ``sand_unit_saved`` hook at the chosen unit, and the kill comes while it is held, so every stage takes one on
a machine of any speed. ``SAND_FAULT_SEED`` picks which unit.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from run_control import PAUSE_PLUGIN  # the observer that holds the run where a kill aims

SAND = [sys.executable, "-m", "sand_framework.cli.main"]
# batches_in_flight=3: the synthesis stage streams its 4 one-trajectory batches, so kills land while several are
# in flight (the units must still resume to the uninterrupted run's).
ARGS = ["smoke", "data.limit=4", "run.synthesis_batch=1", "run.batches_in_flight=3", "eval.limit=2",
        "trainer.max_steps=3", "trainer.save_steps=1"]


def unit_ids(run: Path) -> dict[str, list[str]]:
    out = {}
    for log in sorted(run.rglob("*.units.jsonl")):
        lines = [ln for ln in log.read_text().splitlines() if ln.strip()]
        ids = []
        for ln in lines:
            try:
                ids.append(json.loads(ln)["unit"])
            except json.JSONDecodeError:
                ids.append("<torn>")
        out[str(log.relative_to(run))] = ids
    return out


def payloads(run: Path) -> dict[str, dict[str, object]]:
    out = {}
    for log in sorted(run.rglob("*.units.jsonl")):
        recs = {}
        for ln in log.read_text().splitlines():
            try:
                rec = json.loads(ln)
            except json.JSONDecodeError:
                continue
            data = rec["data"]
            if isinstance(data, dict) and isinstance(data.get("stats"), dict):
                for key in [k for k in data["stats"] if k.endswith("seconds")]:  # wall times (the batch's, the
                    data["stats"].pop(key)  # rollouts', the engine's busy/queue time): not artifacts of the method
            recs[rec["unit"]] = data
        out[str(log.relative_to(run))] = recs
    return out



STAGES = ["start", "expert", "train/iter0", "synth/iter1", "train/iter1", "eval"]


def targets(rng: random.Random) -> list[tuple[str, int]]:
    """Where the kills aim, in run order: before anything is computed, then every stage, twice in the long ones.
    A pair is (stage, N): the N-th unit that stage saves in the attempt (a training stage's units are its
    checkpoints, one per step here); the seed picks N for the first kill in the stages with units to spare."""
    return [("start", 1), ("expert", rng.randint(1, 2)), ("train/iter0", 1), ("train/iter0", 1),
            ("synth/iter1", rng.randint(1, 2)), ("synth/iter1", 1), ("train/iter1", 1),
            ("eval", rng.randint(1, 2)), ("eval", 1)]


def held_at(proc: subprocess.Popen, marker: Path, timeout: float = 900) -> str | None:
    """The ``STAGE UNIT`` the run is held at, once the pause plugin holds it; None if the run ended first."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if marker.exists() and marker.read_text():
            return marker.read_text()
        if proc.poll() is not None:
            return None
        time.sleep(0.01)
    raise AssertionError(f"the run was not held in {timeout}s")


def test_sigkills_in_every_stage_then_resume_match_an_uninterrupted_run(tmp_path):
    clean = tmp_path / "clean"
    subprocess.run([*SAND, "run", *ARGS, "--run-dir", str(clean)], check=True, capture_output=True, timeout=900)

    run = tmp_path / "killed"
    rng = random.Random(int(os.environ.get("SAND_FAULT_SEED", "1234")))
    kills: list[str] = []
    cmd = [*SAND, "run", *ARGS, "--run-dir", str(run), "--plugins-dir", str(PAUSE_PLUGIN)]
    marker = tmp_path / "held"
    for attempt, (stage, nth) in enumerate([*targets(rng), (None, 0)]):
        marker.unlink(missing_ok=True)
        env = {**os.environ, "SAND_PAUSE_FILE": str(marker)}
        if stage is not None:
            env["SAND_PAUSE_AT"] = stage if stage == "start" else f"{stage}#{nth}"
        log = open(tmp_path / f"attempt{attempt}.log", "w+")  # a file: a full pipe would stall the run
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, text=True, env=env)
        where = held_at(proc, marker) if stage is not None else None
        if where is None:  # the last attempt (or a target past its stage's last unit): the run goes to its end
            log.seek(0)
            assert proc.wait(timeout=1800) == 0, log.read()[-2000:]
            break
        assert where.split()[0] == stage, f"held at {where!r}, aimed at {stage}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        kills.append(stage)
        # Killed before the run directory held its recipe: nothing to resume yet, start again.
        cmd = [*SAND, "run", "--resume", str(run)] if (run / "recipe.yaml").exists() else cmd

    print(f"\nfault injection: {len(kills)} SIGKILLs, in stages {kills}")
    assert set(kills) == set(STAGES), f"every stage should take a kill, got {kills}"
    assert (run / "metrics.json").exists()
    for name, ids in unit_ids(run).items():
        assert "<torn>" not in ids or ids.count("<torn>") <= len(kills), name
        real = [i for i in ids if i != "<torn>"]
        assert len(real) == len(set(real)), f"{name}: a finished unit was recomputed: {real}"
    a, b = payloads(clean), payloads(run)
    assert a.keys() == b.keys()
    for name in a:
        assert a[name] == b[name], f"{name} differs between the interrupted and the clean run"
    clean_metrics = json.loads((clean / "metrics.json").read_text())["eval"]
    assert json.loads((run / "metrics.json").read_text())["eval"] == clean_metrics
