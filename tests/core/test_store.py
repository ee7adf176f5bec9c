"""Run-directory primitives: atomic writes, checksummed unit logs, the run lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from sand_framework.errors import RunDirError
from sand_framework.store import RunDir, UnitLog


def test_unit_log_round_trip_and_torn_line(tmp_path):
    log = UnitLog(tmp_path / "u.jsonl")
    log.append("a", {"x": 1})
    log.append("b", {"x": [1, 2]})
    with open(log.path, "ab") as f:
        f.write(b'{"unit": "c", "sha": "0000", "data": {"x"')  # a crash mid-write
    again = UnitLog(log.path)
    assert "a" in again and "b" in again and "c" not in again
    assert again.corrupt == [3]
    again.append("c", {"x": 3})  # starts on a fresh line despite the torn one
    third = UnitLog(log.path)
    assert third.get("c") == {"x": 3} and len(third) == 3


def test_unit_log_detects_edited_payload(tmp_path):
    log = UnitLog(tmp_path / "u.jsonl")
    log.append("a", {"x": 1})
    log.path.write_text(log.path.read_text().replace('"x": 1', '"x": 2'))
    again = UnitLog(log.path)
    assert "a" not in again and again.corrupt == [1]


def test_stage_bookkeeping(tmp_path):
    rd = RunDir.create(tmp_path, "t")
    assert not rd.stage_done("expert")
    rd.mark_done("expert", {"n": 3})
    assert RunDir(rd.path).stage_result("expert") == {"n": 3}


def test_lock_refuses_second_holder_and_ignores_stale_lock(tmp_path):
    rd = RunDir.create(tmp_path, "t")
    (rd.path / "recipe.yaml").write_text("{}")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from sand_framework.store import RunDir; rd = RunDir(sys.argv[1]); rd.lock(); "
        "print('locked', flush=True); time.sleep(60)"), str(rd.path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunDirError, match=f"in use by pid {holder.pid}"):
            RunDir.open_existing(rd.path).lock()
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    time.sleep(0.1)
    again = RunDir.open_existing(rd.path)
    again.lock()  # the dead holder's lock is stale
    again.unlock()


def test_open_existing_rejects_non_run_dir(tmp_path):
    with pytest.raises(RunDirError, match="not a SAND run directory"):
        RunDir.open_existing(tmp_path)


def test_checksum_covers_the_unit_id(tmp_path):
    log = UnitLog(tmp_path / "u.jsonl")
    log.append("task-1", {"x": 1})
    log.path.write_text(log.path.read_text().replace('"task-1"', '"task-7"'))
    again = UnitLog(log.path)
    assert len(again) == 0 and again.corrupt == [1]
    assert again.missing(["task-1", "task-2", "task-1"]) == ["task-1", "task-2"]


def test_lines_written_before_ids_were_checksummed_still_load(tmp_path):
    import hashlib
    import json

    payload = json.dumps({"x": 1}, sort_keys=True)
    legacy = {"unit": "a", "sha": hashlib.sha256(payload.encode()).hexdigest()[:16], "data": {"x": 1}}
    (tmp_path / "u.jsonl").write_text(json.dumps(legacy) + "\n")
    assert UnitLog(tmp_path / "u.jsonl").get("a") == {"x": 1}


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_atomic_files_follow_the_umask_like_unit_logs(tmp_path, umask):
    from sand_framework.store import atomic_write_json

    old = os.umask(umask)
    try:
        atomic_write_json(tmp_path / "state.json", {"done": {}})
        UnitLog(tmp_path / "u.jsonl").append("a", 1)
    finally:
        os.umask(old)
    mode = (tmp_path / "state.json").stat().st_mode & 0o777
    assert mode == 0o666 & ~umask == (tmp_path / "u.jsonl").stat().st_mode & 0o777
    os.chmod(tmp_path / "state.json", 0o640)  # a rewrite keeps the mode the user gave the file
    atomic_write_json(tmp_path / "state.json", {"done": {"x": 1}})
    assert (tmp_path / "state.json").stat().st_mode & 0o777 == 0o640


def test_run_names_cannot_leave_the_output_dir(tmp_path):
    for name in ("../../x", "/abs", "a/b", ".hidden", ""):
        with pytest.raises(RunDirError, match="not a plain folder name"):
            RunDir.create(tmp_path / "runs", name)
    assert not (tmp_path / "x").exists()


def test_damaged_json_names_the_file_and_the_fix(tmp_path):
    rd = RunDir.create(tmp_path, "t")
    (rd.path / "metrics.json").write_text('{"eval": ')
    with pytest.raises(RunDirError, match="metrics.json is unreadable .* delete it and resume"):
        rd.read_json("metrics.json")


def test_the_run_layout_spells_the_names_existing_runs_hold(tmp_path):
    """The names are a file format: runs made by older code must still resume, so they never change."""
    from sand_framework.store import RunLayout

    assert (RunLayout.RECIPE, RunLayout.PLUGINS, RunLayout.STATE, RunLayout.LOCK, RunLayout.LOG, RunLayout.METRICS,
            RunLayout.EVAL_SPEC) == (
        "recipe.yaml", "plugins.json", "state.json", "run.lock", "run.log", "metrics.json", "eval.json")
    assert (RunLayout.EXPERT_UNITS, RunLayout.EXPERT_DATA) == ("expert/trajectories.units.jsonl",
                                                               "expert/expert.sharegpt.json")
    assert (RunLayout.synthesis_units(2), RunLayout.deliberation_sharegpt(2), RunLayout.deliberation_messages(2)) == (
        "iter2/synthesis.units.jsonl", "iter2/deliberation.sharegpt.json", "iter2/deliberation.messages.jsonl")
    assert (RunLayout.weights(0), RunLayout.eval_units("sft", "seen")) == ("weights/iter0", "eval/sft/seen.units.jsonl")
    assert (RunLayout.train_stage(0), RunLayout.synth_stage(1)) == ("train/iter0", "synth/iter1")
    assert [RunLayout.parse_stage(s) for s in ("expert", "train/iter0", "synth/iter3", "eval", "synth/iter0", "x")] == [
        ("expert", 0), ("train", 0), ("synth", 3), ("eval", 0), None, None]
    assert RunLayout.stage_folders("train/iter1") == ["weights/iter1"]
    assert RunLayout.stage_folders("synth/iter1") == ["iter1"]
    for name in ("iter1", "iter10", "iter2", "iterx"):
        (tmp_path / name).mkdir()
    (tmp_path / "iter3").write_text("")  # a file, not an iteration folder
    assert RunLayout.iterations_in(tmp_path) == [1, 2, 10]


def test_a_run_folder_under_a_file_is_a_run_dir_error_naming_the_file(tmp_path):
    """`sand run` with run.output_dir (or --run-dir) below a file ended in "unexpected failure" (issue 24)."""
    from sand_framework.errors import RunDirError
    from sand_framework.store import RunDir

    (tmp_path / "afile").write_text("")
    with pytest.raises(RunDirError, match=r"afile is a file, not a folder; choose another run.output_dir"):
        RunDir.create(tmp_path / "afile" / "sub", "smoke")
    with pytest.raises(RunDirError, match=r"afile is a file, not a folder; choose another --run-dir"):
        RunDir.create_at(tmp_path / "afile" / "x")


def test_a_stages_units_redo_only_what_is_missing_and_refuse_done_while_any_is(tmp_path):
    """The one resumable-unit helper the expert, build and eval stages share (engine/units.py)."""
    from rich.console import Console

    from sand_framework.engine.units import StageUnits
    from sand_framework.errors import IncompleteStageError
    from sand_framework.unit_saved import listening

    log = UnitLog(tmp_path / "u.jsonl")
    log.append("a", 1)
    log.append("b", 2)
    with open(log.path, "ab") as f:
        f.write(b'{"unit": "c", "sha"')  # torn by a kill
    console = Console(record=True, width=200)
    units = StageUnits.open("synth/iter1", UnitLog(log.path), ["a", "b", "c", "d"], "sand run --resume R", console)
    assert "1 damaged record(s) (lines [3]); redoing the 2 unit(s) without an intact record" in console.export_text()
    assert units.todo == ["c", "d"] and units.done == 2
    with pytest.raises(IncompleteStageError, match=r"synth/iter1: 2 unit\(s\) got no record \(\['c', 'd'\]\).*"
                                                   r"`sand run --resume R` redoes them"):
        units.values()
    told = []
    with listening(told.append):
        units.save("c", 3)
    assert told == ["c"] and units.todo == ["d"]
    units.save("d", 4)
    assert units.values() == [1, 2, 3, 4] and UnitLog(log.path).get("d") == 4  # on disk, in the stage's order
    done = UnitLog(tmp_path / "done.jsonl")
    done.append("a", 1)
    console = Console(record=True, width=200)
    StageUnits.open("eval", UnitLog(done.path), ["a", "e"], "again", console, finished=True)
    assert "1 unit(s) of the finished stage have no record; redoing them" in console.export_text()
