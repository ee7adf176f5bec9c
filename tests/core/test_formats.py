"""ETO ShareGPT and chat-messages readers/writers, and the Thought/Action parser."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sand_framework.formats import (
    FormatError,
    read_messages,
    read_sharegpt,
    to_sharegpt,
    write_messages,
    write_sharegpt,
)
from sand_framework.prompting import MAX_ACTION_CHARS, format_turn, parse_turn, trajectory_chat
from sand_framework.types import Step, Trajectory

ETO_EXAMPLE = {
    "id": "alfworld_0",
    "conversations": [
        {"from": "human", "value": "Interact with a household to solve a task. ..."},
        {"from": "gpt", "value": "OK"},
        {"from": "human", "value": "You are in the middle of a room. ... Your task is to: put a clean apple in fridge."},
        {"from": "gpt", "value": "Thought: I need an apple first.\nAction: go to countertop 1"},
        {"from": "human", "value": "Observation: On the countertop 1, you see a apple 1."},
        {"from": "gpt", "value": "Thought: There it is.\nAction: take apple 1 from countertop 1"},
    ],
}


def sample_traj() -> Trajectory:
    return Trajectory(task_id="t1", env="e", instruction="Do things.", task="Task: find coin.", steps=[
        Step("I look.", "look around", "You see a coin."),
        Step('If I "take coin" I win; if I "move east" I waste time. So I will "take coin".', "take coin",
             "You win.", deliberated=True)], reward=1.0, success=True)


def test_reads_eto_sharegpt(tmp_path):
    path = tmp_path / "alfworld_sft.json"
    path.write_text(json.dumps([ETO_EXAMPLE]))
    [t] = read_sharegpt(path, "alfworld")
    assert t.task_id == "alfworld_0" and t.task.endswith("fridge.")
    assert [s.action for s in t.steps] == ["go to countertop 1", "take apple 1 from countertop 1"]
    assert t.steps[0].observation == "On the countertop 1, you see a apple 1."
    assert t.steps[0].thought == "I need an apple first."


def test_round_trips_and_loads_in_datasets(tmp_path):
    import datasets

    traj = sample_traj()
    write_sharegpt(tmp_path / "d.json", [traj])
    write_messages(tmp_path / "d.jsonl", [traj])
    back = read_sharegpt(tmp_path / "d.json", "e")[0]
    assert back.actions == traj.actions and [s.thought for s in back.steps] == [s.thought for s in traj.steps]
    assert read_messages(tmp_path / "d.jsonl", "e")[0].actions == traj.actions
    ds = datasets.load_dataset("json", data_files=str(tmp_path / "d.jsonl"), split="train")
    assert ds[0]["messages"][-1]["content"].endswith("Action: take coin")
    ds2 = datasets.load_dataset("json", data_files=str(tmp_path / "d.json"), split="train")
    assert ds2[0]["conversations"][0]["from"] == "human"


def test_training_chat_ends_on_the_last_action_and_prefix_on_an_observation():
    traj = sample_traj()
    assert trajectory_chat(traj)[-1]["role"] == "assistant"
    prefix = trajectory_chat(traj, upto=1)
    assert prefix[-1] == {"role": "user", "content": "Observation: You see a coin."}
    assert len(trajectory_chat(traj, upto=0)) == 3
    assert to_sharegpt(traj)["conversations"][1] == {"from": "gpt", "value": "OK"}


@pytest.mark.parametrize("content", ["not json", "{\"a\": 1}", "[{\"id\": 1}]",
                                     "[{\"conversations\": [{\"from\": \"human\"}]}]"])
def test_malformed_sharegpt_is_a_format_error(tmp_path, content):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(FormatError):
        read_sharegpt(path, "e")


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=400))
def test_truncated_or_random_sharegpt_never_crashes_unexpectedly(tmp_path_factory, junk):
    good = json.dumps([ETO_EXAMPLE]).encode()
    path = tmp_path_factory.mktemp("f") / "x.json"
    path.write_bytes(good[: len(junk) % len(good)] + junk)
    try:
        read_sharegpt(path, "e")
    except FormatError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=2000))
def test_parser_never_raises_and_valid_actions_are_sane(text):
    turn = parse_turn(text)
    if turn.valid:
        assert turn.action and "\n" not in turn.action and len(turn.action) <= MAX_ACTION_CHARS
        assert turn.action.isprintable()
    else:
        assert turn.action == ""


@given(st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Cn", "Co", "Zl", "Zp")), min_size=1, max_size=80)
       .filter(lambda s: s.isprintable() and s.strip() and "action" not in s.lower() and s.strip().strip("`").strip()))
def test_parser_recovers_what_format_turn_wrote(action):
    turn = parse_turn(format_turn("some thought", action))
    assert turn.valid and turn.action == action.strip().strip("`").strip()


@pytest.mark.parametrize("text", ["", "Thought: hmm", "Action:", "Action: " + "x" * 500, "\x00\x01Action: \x07",
                                  b"\xff\xfe".decode("latin-1") + "Action: go"])
def test_malformed_outputs_are_invalid_not_errors(text):
    turn = parse_turn(text)
    assert isinstance(turn.valid, bool)
