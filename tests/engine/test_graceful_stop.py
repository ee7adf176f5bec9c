"""Graceful stops and edited recipes on a real `sand run` (smoke recipe, tiny model, real TRL, real workers).

SIGTERM (what a scheduler, `timeout` or Ctrl-C's sibling sends first) at the training stage's first checkpoint,
then right after the synthesis stage logs its first unit (a test plugin holds the run there): each time the run exits 143 with one line (console and
run.log) naming the signal, the stage and the resume command, its lock is free, no process it started is left
(environment workers of the process_pool executor, the JVMs of TextWorld-Express), and the last resume finishes
with every unit written once. Then the finished run's recipe is edited: the resume is refused naming the stage,
and ``--redo-from`` redoes that stage and only the ones after it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
import yaml
from run_control import (PAUSE_PLUGIN, assert_no_orphans, assert_unlocked, held, state, stop_when)

SAND = [sys.executable, "-m", "sand_framework.cli.main"]
ARGS = ["smoke", "method=rft", "executor=process_pool", "data.limit=2", "run.synthesis_batch=1", "eval.limit=1",
        "eval.splits=[unseen]", "trainer.save_steps=1", "--plugins-dir", str(PAUSE_PLUGIN)]
"""RFT explores in the executor's environment workers even with a random model (SAND's synthesis rolls out only
where valid samples disagree), so the synthesis stage has worker processes to shut down. One trajectory per batch:
when the first unit is logged the second is still being explored, so the stop lands inside the synthesis stage
(with both in one batch they were logged together and the signal met train/iter1 on a loaded machine)."""


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stop")
    run = tmp / "run"
    marker = tmp / "held"
    at = lambda stage: {**os.environ, "SAND_PAUSE_AT": stage, "SAND_PAUSE_FILE": str(marker)}  # noqa: E731
    stops = [stop_when([*SAND, "run", *ARGS, "--run-dir", str(run)], run, held(marker), tmp / "a.log",
                       env=at("train/iter0#1"))]  # at its first checkpoint: the stop waits for the step's end
    marker.unlink()
    stops.append(stop_when([*SAND, "run", "--resume", str(run)], run, held(marker), tmp / "b.log",
                           env=at("synth/iter1#1")))  # right after its first unit
    units_at_stop = (run / "iter1/synthesis.units.jsonl").read_text()
    final = subprocess.run([*SAND, "run", "--resume", str(run)], capture_output=True, text=True, timeout=600)
    return run, stops, units_at_stop, final


@pytest.mark.parametrize("which, stage", [(0, "train/iter0"), (1, "synth/iter1")])
def test_sigterm_is_said_frees_the_run_and_leaves_no_process(stopped, which, stage):
    run, stops, _, _ = stopped
    rc, err, children = stops[which]
    said = f"stopped by SIGTERM during {stage}: every finished unit is kept"
    assert rc == 143, err[-3000:]
    assert said in err and f"continue with `sand run --resume {run}`" in err and "Traceback" not in err
    assert said in (run / "run.log").read_text()
    assert children, "the run had started processes (JVMs, env workers) to check"
    if stage.startswith("synth"):
        assert sum("python" in c.noted for c in children) >= 2, [c.noted for c in children]  # env workers
    assert_no_orphans(children)


def test_a_stopped_run_resumes_to_the_end_with_every_unit_once(stopped):
    run, _, units_at_stop, final = stopped
    assert final.returncode == 0, final.stderr[-3000:]
    assert_unlocked(run)
    lines = (run / "iter1/synthesis.units.jsonl").read_text().splitlines()
    assert "\n".join(lines).startswith(units_at_stop.rstrip("\n")), "units written before the stop are kept"
    ids = [json.loads(line)["unit"] for line in lines]  # every line whole
    assert len(ids) == len(set(ids)) == 2
    assert (run / "metrics.json").is_file() and "eval" in state(run)["done"]
    assert set(state(run)["fingerprints"]) == set(state(run)["done"])


def test_an_edited_recipe_is_refused_and_redo_from_redoes_only_that_stage_and_later(stopped, tmp_path):
    run = tmp_path / "copy"
    shutil.copytree(stopped[0], run)
    recipe = yaml.safe_load((run / "recipe.yaml").read_text())
    recipe["eval"]["limit"] = 2
    (run / "recipe.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
    weights = {p: p.read_bytes() for p in (run / "weights").rglob("*") if p.is_file()}

    refused = subprocess.run([*SAND, "run", "--resume", str(run)], capture_output=True, text=True, timeout=300)
    assert refused.returncode == 3, refused.stderr[-3000:]
    assert "since stage 'eval' was computed (finished): eval.limit: 1 then, 2 now" in refused.stderr
    assert "--redo-from eval`" in refused.stderr

    redo = subprocess.run([*SAND, "run", "--resume", str(run), "--redo-from", "eval"], capture_output=True,
                          text=True, timeout=600)
    assert redo.returncode == 0, redo.stderr[-3000:]
    assert "--redo-from eval: discarded eval (removed eval, metrics.json)" in redo.stderr
    assert {p: p.read_bytes() for p in weights} == weights, "no stage before eval was redone"
    for model in ("sft", "final"):
        assert len((run / f"eval/{model}/unseen.units.jsonl").read_text().splitlines()) == 2
    assert json.loads((run / "metrics.json").read_text())["eval"]["final"]["unseen"]["tasks"] == 2


def test_a_stop_raised_inside_a_finalizer_prints_no_traceback(monkeypatch):
    """A stop that lands in a finalizer (py4j's ``__del__`` during a run's shutdown) is raised again outside it, so
    the "Exception ignored in ..." traceback Python would print for it is dropped; any other exception a finalizer
    raises is still reported."""
    from sand_framework.app.runner import stop_on_signals
    from sand_framework.errors import RunStopped

    seen: list[BaseException] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.exc_value))

    class Dies:
        def __init__(self, exc: BaseException):
            self.exc = exc

        def __del__(self):
            raise self.exc

    with stop_on_signals():
        Dies(RunStopped(signal.SIGTERM))
        Dies(ValueError("a finalizer's own bug"))
    assert [type(e) for e in seen] == [ValueError]
    Dies(RunStopped(signal.SIGTERM))  # outside a run the hook is the caller's again
    assert [type(e) for e in seen] == [ValueError, RunStopped]
