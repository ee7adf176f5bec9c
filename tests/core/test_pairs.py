"""Preference-pair files in and out (TRL JSONL, ETO's construct_preference.py output), ``sand data import-pairs`` /
``check-pairs``, and the ``pairs_file`` method: a bad pair file stops a run before any stage (exit 2)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from sand_framework.cli.main import main  # import first: it registers the `data` group
from sand_framework.formats import FormatError
from sand_framework.pairs import pair_messages, read_preference_pairs, write_preference_pairs
from sand_framework.types import PreferencePair, Step, Trajectory
from sand_builtins.methods.pairs_file import PairsFileMethod, UnmatchedPairsError

INSTR = "You are playing a text game. Answer with Thought: and Action:."


def _pair(task_id: str = "t0", task: str = "Find the coin.", prefix: int = 0) -> PreferencePair:
    prompt = Trajectory(task_id, "toy", INSTR, task, [Step("I look first.", "look around", "A door.")][:prefix])
    return PreferencePair(prompt, [Step("Coin here.", "take coin", "Taken."), Step("Done.", "inventory", "")],
                          [Step("North?", "go north", "")], chosen_reward=1.0, rejected_reward=0.25)


def _eto_record(eto_id: str, rejected_last: str = "gpt") -> dict:
    """One record as ETO's construct_preference.py writes it (json.dump of a list, indent=4)."""
    rejected = [{"from": "gpt", "value": "Thought: maybe north.\nAction: go north"},
                {"from": "human", "value": "Observation: A hall."}]
    if rejected_last == "gpt":
        rejected.append({"from": "gpt", "value": "Thought: lost.\nAction: look"})
    return {"id": eto_id,
            "prompt": [{"from": "human", "value": INSTR}, {"from": "gpt", "value": "OK"},
                       {"from": "human", "value": "Find the coin."}],
            "chosen": [{"from": "gpt", "value": "Thought: coin here.\nAction: take coin"},
                       {"from": "human", "value": "Observation: Taken."},
                       {"from": "gpt", "value": "Thought: done.\nAction: inventory"}],
            "rejected": rejected}


def test_trl_pair_files_round_trip(tmp_path):
    pairs = [_pair("t0"), _pair("t1", prefix=1)]
    path = tmp_path / "pairs.jsonl"
    write_preference_pairs(path, pairs)
    line = json.loads(path.read_text().splitlines()[1])
    assert set(line) == {"id", "prompt", "chosen", "rejected", "chosen_reward", "rejected_reward"}
    assert line["prompt"][-1] == {"role": "user", "content": "Observation: A door."}  # step-level prompt
    found = read_preference_pairs(path, "toy")
    assert found.format == "trl" and not found.notes
    for got, want in zip(found.pairs, pairs):
        assert pair_messages(got) == pair_messages(want) and got.prompt.task_id == want.prompt.task_id
        assert (got.chosen_reward, got.rejected_reward) == (1.0, 0.25)
        assert [s.action for s in got.chosen] == ["take coin", "inventory"]


def test_trl_implicit_prompt_lines(tmp_path):
    msgs = pair_messages(_pair())
    path = tmp_path / "implicit.jsonl"
    path.write_text(json.dumps({"chosen": msgs["prompt"] + msgs["chosen"],
                                "rejected": msgs["prompt"] + msgs["rejected"]}) + "\n")
    (pair,) = read_preference_pairs(path, "toy").pairs
    assert pair_messages(pair) == msgs and pair.meta["id_given"] is False


def test_eto_pair_files_are_read_with_their_ids_mapped(tmp_path):
    path = tmp_path / "eto_pm.json"
    path.write_text(json.dumps([_eto_record("12"), _eto_record("13")], indent=4))
    found = read_preference_pairs(path, "toy", map_eto_id=lambda i, traj: f"task_{i}")
    assert found.format == "eto" and [p.prompt.task_id for p in found.pairs] == ["task_12", "task_13"]
    pair = found.pairs[0]
    assert pair.prompt.instruction == INSTR and pair.prompt.task == "Find the coin." and not pair.prompt.steps
    assert [s.action for s in pair.chosen] == ["take coin", "inventory"] and pair.chosen[0].observation == "Taken."
    assert [s.action for s in pair.rejected] == ["go north", "look"]
    assert pair.meta == {"source": "eto", "id": "12", "id_given": True}


@pytest.mark.parametrize("content, message", [
    ("", "holds no preference pairs"),
    ("\n\n", "holds no preference pairs"),
    ("[]", "holds no preference pairs"),
    ("{not json\n", "not a JSON object"),
    ("[{not json", "not a JSON pair list"),
    ('{"prompt": [], "chosen": []}\n', "no 'rejected'"),
    ('"just a string"\n', "a pair must be a JSON object"),
    (json.dumps([_eto_record("1", rejected_last="human")]), "rejected must start and end on an assistant"),
    (json.dumps({**pair_messages(_pair()), "chosen": []}) + "\n", "chosen is empty"),
    (json.dumps({**pair_messages(_pair()), "chosen_reward": "high"}) + "\n", "chosen_reward must be a number"),
    ('{"prompt": [{"role": "user", "content": 1}], "chosen": [], "rejected": []}\n', "needs string"),
    (json.dumps({**pair_messages(_pair()), "prompt": pair_messages(_pair())["prompt"][:2]}) + "\n",
     "must end on a user turn"),
    ('{"prompt": NaN, "chosen": [], "rejected": []}\n', "NaN or Infinity"),
])
def test_malformed_pair_files_are_named_errors(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(FormatError, match=message) as info:
        read_preference_pairs(path, "toy")
    assert info.value.exit_code == 2 and str(path) in str(info.value)


def test_import_pairs_cli_maps_eto_ids_to_task_ids(tmp_path):
    src = tmp_path / "webshop_pm.json"
    src.write_text(json.dumps([_eto_record("2853")], indent=4))
    out = tmp_path / "out" / "pairs.jsonl"
    res = CliRunner().invoke(main, ["data", "import-pairs", str(src), "--env", "webshop", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "imported 1 preference pairs (eto" in res.output
    (pair,) = read_preference_pairs(out, "webshop").pairs
    assert pair.prompt.task_id == "webshop_2853"  # WebShop's task_id_from_eto
    res = CliRunner().invoke(main, ["data", "check-pairs", str(out)])
    assert res.exit_code == 0 and json.loads(res.output)["pairs"] == 1


def test_check_pairs_cli_exit_2_without_traceback(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": []}\n')
    res = CliRunner().invoke(main, ["data", "check-pairs", str(bad)])
    assert res.exit_code == 2 and "error:" in res.output and "Traceback" not in res.output


# ----------------------------------------------------------------------------- the pairs_file method


class _Env:
    name = "toy"

    def task_id_from_eto(self, eto_id, trajectory=None):
        return f"task_{eto_id}"


class _Tools:
    def __init__(self):
        self.env, self.shared = _Env(), {}


def _traj(task_id: str, task: str) -> Trajectory:
    return Trajectory(task_id, "toy", INSTR, task, [Step("", "take coin", "")])


def test_pairs_file_units_hold_each_tasks_pairs(tmp_path, caplog):
    msgs = pair_messages(_pair(task="Find the key."))
    path = tmp_path / "p.jsonl"
    write_preference_pairs(path, [_pair("t0"), _pair("t9"), _pair("t0", prefix=1)])
    with path.open("a") as f:  # a pair without an id: matched by its task text
        f.write(json.dumps(msgs) + "\n")
    method = PairsFileMethod(PairsFileMethod.Params(path=str(path), reference="sft"))
    trajs = [_traj("t0", "Find the coin."), _traj("t1", "Find the key.")]
    units = method.build(trajs[:1], _Tools(), 0) + method.build(trajs[1:], _Tools(), 0)  # two batches
    assert [u["stats"]["pairs"] for u in units] == [2, 1]
    json.dumps(units)  # stored as JSON
    with caplog.at_level(logging.WARNING):
        data = method.assemble(units, trajs)
    assert data.reference == "sft" and data.next_expert == trajs
    assert [p.prompt.task_id for p in data.pairs] == ["t0", "t0", "3"] and "1 of the 4 pairs" in caplog.text
    assert method.summarize(units)["unmatched_pairs"] == 1
    strict = PairsFileMethod(PairsFileMethod.Params(path=str(path), unmatched="error"))
    with pytest.raises(UnmatchedPairsError, match="1 of the 4 pairs"):
        strict.assemble(units, trajs)


def test_pairs_file_params_check_the_file(tmp_path):
    good = tmp_path / "good.jsonl"
    write_preference_pairs(good, [_pair()])
    assert PairsFileMethod.Params(path=str(good)).validate() == []
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert "required" in PairsFileMethod.Params().validate()[0]
    assert "not found" in PairsFileMethod.Params(path=str(tmp_path / "nope.jsonl")).validate()[0]
    (problem,) = PairsFileMethod.Params(path=str(empty)).validate()
    assert "holds no preference pairs" in problem and "sand data check-pairs" in problem


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_bad_pair_file_stops_the_run_before_any_stage(tmp_path, command):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": [], "chosen": [], "rejected": []}\n{oops\n')
    run_dir = tmp_path / "run"
    args = [command, "smoke", "method=pairs_file", f"method.path={bad}", "preference_trainer=trl_dpo"]
    res = CliRunner().invoke(main, args + (["--run-dir", str(run_dir)] if command == "run" else []))
    assert res.exit_code == 2, res.output
    assert "method[pairs_file]: path:" in res.output and "Traceback" not in res.output
    assert not run_dir.exists()


@pytest.mark.slow
def test_a_run_trains_dpo_on_a_pair_file(tmp_path, registries):
    """End to end on the smoke recipe (~35 s): SFT, then iteration 1 trains trl_dpo on the file's pairs for the
    expert's tasks, against the SFT adapter as the reference."""
    from sand_framework.engine.expert import expert_trajectory

    env = registries.build("environment", "textworld_express", None)
    try:
        expert = [expert_trajectory(env, tid) for tid in env.tasks("train")[:3]]
    finally:
        env.close()
    pairs = [PreferencePair(Trajectory(t.task_id, t.env, t.instruction, t.task), t.steps,
                            [Step("I wander.", "look around", "")]) for t in expert]
    path = tmp_path / "pairs.jsonl"
    write_preference_pairs(path, pairs)
    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "sand_framework.cli.main", "run", "smoke", "method=pairs_file", f"method.path={path}",
         "run.iterations=1", "preference_trainer=trl_dpo", "preference_trainer.max_steps=2",
         "preference_trainer.batch_size=2", "preference_trainer.report_to=none", "preference_trainer.threads=1",
         "--run-dir", str(run)],
        env={**os.environ, "SAND_NO_PROGRESS": "1", "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    state = json.loads((run / "state.json").read_text())["done"]
    assert state["synth/iter1"]["pairs"] == 3 and state["train/iter1"]["pairs"] == 3
    summary = json.loads((run / "weights" / "iter1" / "training_summary.json").read_text())
    assert summary["pairs"] == 3 and summary["reference_weights"] == summary["init_weights"]
    assert summary["reference"].startswith("frozen copy of the init adapter")
