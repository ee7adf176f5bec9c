"""Crash-safety: a real run SIGKILLed in every stage (at random moments within it), resumed each time, ends identical to an uninterrupted one.

"Identical" is checked on the artifacts that matter — the expert data, every
synthesized trajectory and deliberation record, every evaluated task — and
"nothing recomputed" on the append-only unit logs: a unit is written once
when it finishes, so a unit redone after a crash would appear twice.
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

SAND = [sys.executable, "-m", "sand_framework.cli.main"]
ARGS = ["smoke", "data.limit=4", "run.synthesis_batch=1", "eval.limit=2", "trainer.max_steps=3",
        "trainer.save_steps=1"]


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


ORDER = ["before expert", "expert", "train/iter0", "synth/iter1", "train/iter1", "eval", "report"]
TARGETS = ["before expert", "expert", "train/iter0", "train/iter0", "synth/iter1", "synth/iter1", "train/iter1",
           "eval", "eval"]
"""Where the kills aim: every stage, twice in the long ones (a random delay after reaching a stage, or, in the
short stages of ``UNIT_LOGS``, right after their next unit)."""


UNIT_LOGS = {"expert": "expert/trajectories.units.jsonl", "synth/iter1": "iter1/synthesis.units.jsonl"}
"""Stages that can finish within a random delay on a fast machine: kills there aim at the next unit written."""


def units_written(run: Path, stage: str) -> int:
    log = run / UNIT_LOGS[stage]
    return len(log.read_text().splitlines()) if log.exists() else 0


def wait_for_next_unit(proc: subprocess.Popen, run: Path, stage: str, timeout: float = 900) -> bool:
    """Poll until ``stage`` writes one more unit than now, while it is still in progress; False if it ended first."""
    start, deadline = units_written(run, stage), time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None or current_stage(run) != stage:
            return False
        if units_written(run, stage) > start:
            return True
        time.sleep(0.005)
    raise AssertionError(f"{stage} wrote no unit in {timeout}s")


def current_stage(run: Path) -> str:
    """The stage in progress, from state.json (what a resume would start with)."""
    if not (run / "state.json").exists():
        return "before expert" if not (run / "expert").exists() else "expert"
    try:
        done = json.loads((run / "state.json").read_text())["done"]
    except (OSError, json.JSONDecodeError):
        return "expert"
    for stage in ORDER[1:-1]:
        if stage not in done:
            return stage
    return "report"


def wait_for_stage(proc: subprocess.Popen, run: Path, target: str, timeout: float = 900) -> bool:
    """Poll until the run reaches ``target`` (or a later stage); False if the process ended first."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            return False
        if ORDER.index(current_stage(run)) >= ORDER.index(target):
            return True
        time.sleep(0.05)
    raise AssertionError(f"run did not reach {target} in {timeout}s")


def test_sigkills_in_every_stage_then_resume_match_an_uninterrupted_run(tmp_path):
    clean = tmp_path / "clean"
    subprocess.run([*SAND, "run", *ARGS, "--run-dir", str(clean)], check=True, capture_output=True, timeout=900)

    run = tmp_path / "killed"
    rng = random.Random(int(os.environ.get("SAND_FAULT_SEED", "1234")))
    kills: list[str] = []
    cmd = [*SAND, "run", *ARGS, "--run-dir", str(run)]
    targets = list(TARGETS)
    while True:
        log = open(tmp_path / f"attempt{len(kills)}.log", "w+")  # a file: a full pipe would stall the run
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, text=True)
        killed = False
        while targets:
            target = targets.pop(0)
            if ORDER.index(target) < ORDER.index(current_stage(run)):
                continue  # that stage finished already
            if wait_for_stage(proc, run, target):
                if target in UNIT_LOGS:  # mid-stage: right after one of its units, before the stage ends
                    wait_for_next_unit(proc, run, target)
                else:
                    time.sleep(rng.uniform(0.05, 1.5))
                if proc.poll() is None:
                    kills.append(current_stage(run))
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait()
                    killed = True
            break
        if not killed:  # no target left (or the run outran it): this attempt runs to the end
            log.seek(0)
            assert proc.wait(timeout=1800) == 0, log.read()[-2000:]
            break
        # Killed before the run directory held its recipe: nothing to resume yet, start again.
        cmd = [*SAND, "run", "--resume", str(run)] if (run / "recipe.yaml").exists() else \
            [*SAND, "run", *ARGS, "--run-dir", str(run)]
        time.sleep(0.2)

    print(f"\nfault injection: {len(kills)} SIGKILLs, in stages {kills}")
    assert len(set(kills)) >= 4, f"kills should land in most stages, got {kills}"
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
