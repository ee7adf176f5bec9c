"""Crash-safety: a real run SIGKILLed at random moments, resumed each time, ends identical to an uninterrupted one.

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
            recs[rec["unit"]] = rec["data"]
        out[str(log.relative_to(run))] = recs
    return out


def current_stage(run: Path) -> str:
    try:
        done = json.loads((run / "state.json").read_text())["done"]
    except (OSError, json.JSONDecodeError):
        return "before expert"
    order = ["expert", "train/iter0", "synth/iter1", "train/iter1", "eval"]
    for stage in order:
        if stage not in done:
            return stage
    return "report"


def test_random_sigkills_then_resume_match_an_uninterrupted_run(tmp_path):
    clean = tmp_path / "clean"
    subprocess.run([*SAND, "run", *ARGS, "--run-dir", str(clean)], check=True, capture_output=True, timeout=900)

    run = tmp_path / "killed"
    rng = random.Random(int(os.environ.get("SAND_FAULT_SEED", "1234")))
    kills: list[str] = []
    cmd = [*SAND, "run", *ARGS, "--run-dir", str(run)]
    kill_budget = 6
    while True:
        log = open(tmp_path / f"attempt{len(kills)}.log", "w+")  # a file: a full pipe would stall the run
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, text=True)
        try:
            # After the kill budget is spent, the last resume runs to the end.
            proc.wait(timeout=rng.uniform(4.0, 12.0) if len(kills) < kill_budget else 1800)
        except subprocess.TimeoutExpired:
            kills.append(current_stage(run))
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        else:
            log.seek(0)
            assert proc.returncode == 0, log.read()[-2000:]
            break
        cmd = [*SAND, "run", "--resume", str(run)]
        time.sleep(0.2)

    print(f"\nfault injection: {len(kills)} SIGKILLs at stages {kills}")
    assert len(kills) >= 2, "the kill schedule should interrupt the run at least twice"
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
