"""``sand data import-eto`` / ``sand data expert`` and the ETO id mappings."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from sand_framework.cli.main import main  # import first: it registers the `data` group
from sand_builtins.environments.alfworld import eto_ids
from sand_framework import eto
from sand_framework.components import Environment
from sand_framework.engine.expert import write_thoughts
from sand_framework.formats import read_sharegpt, read_trajectories_jsonl, trajectories_path

_ALFWORLD_DATA = os.environ.get("ALFWORLD_DATA", "")  # conftest sets it from ../shared/alfworld when that exists
ALFWORLD_DATA = Path(_ALFWORLD_DATA)
HAVE_ALFWORLD_DATA = bool(_ALFWORLD_DATA) and (ALFWORLD_DATA / "json_2.1.1").is_dir()
NO_ALFWORLD_DATA = "ALFWorld game data not found: run `alfworld-download` and set ALFWORLD_DATA"


def conv(instruction: str, task: str, turns: list[tuple[str, str, str]]) -> list[dict]:
    """ETO layout: instruction, OK, task, then (thought, action, observation) turns."""
    out = [{"from": "human", "value": instruction}, {"from": "gpt", "value": "OK"}, {"from": "human", "value": task}]
    for i, (thought, action, obs) in enumerate(turns):
        out.append({"from": "gpt", "value": f"Thought: {thought}\nAction: {action}"})
        if i < len(turns) - 1:
            out.append({"from": "human", "value": f"Observation:\n{obs}"})
    return out


def write(tmp_path: Path, name: str, records: list[dict]) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(records, indent=1))
    return p


# ----------------------------------------------------------------------------- WebShop

WS_INSTR = ("You are web shopping.\nI will give you instructions about what to do.\n"
            "An action should be of the following structure:\nsearch[keywords]\nclick[value]\n"
            "Your response should use the following format:\n\nThought: I think ...\nAction: click[something]")


def ws_record(eto_id: str, goal: str, asin: str) -> dict:
    task = f"WebShop [SEP] Instruction: [SEP] {goal} [SEP] Search"
    return {"id": eto_id, "conversations": conv(WS_INSTR, task, [
        ("I should search for the item.", f"search[{goal[:30]}]",
         f"Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] {asin} [SEP] A product [SEP] $9.99"),
        ("The first result looks right.", f"click[{asin}]",
         "Back to Search [SEP] < Prev [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now"),
        ("It matches; I will buy it.", "click[Buy Now]", ""),
    ])}


def test_import_eto_webshop(tmp_path):
    src = write(tmp_path, "webshop_sft.json", [
        ws_record("2853", "i need a long clip-in hair extension, price lower than 40.00 dollars", "B09C337K8S"),
        ws_record("4116", "i want a 3 ounce travel size shampoo", "B07XYZ1234"),
        ws_record("4116", "i want a 3 ounce travel size shampoo", "B07XYZ1234"),  # ETO lists 4116 twice
    ])
    out = tmp_path / "out" / "webshop_expert.json"
    res = CliRunner().invoke(main, ["data", "import-eto", str(src), "--env", "webshop", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "imported 2 trajectories (1 skipped)" in res.output and "duplicate" in res.output
    trajs = read_sharegpt(out, "webshop")
    assert [t.task_id for t in trajs] == ["webshop_2853", "webshop_4116"]
    assert trajs[0].actions == ["search[i need a long clip-in hair ext]", "click[B09C337K8S]", "click[Buy Now]"]
    assert trajs[0].steps[0].thought == "I should search for the item."
    assert trajs[0].steps[0].observation.startswith("Back to Search [SEP] Page 1")
    full = read_trajectories_jsonl(trajectories_path(out))
    assert [t.meta["eto"]["id"] for t in full] == ["2853", "4116"]
    assert full[0].instruction == WS_INSTR and full[0].task.startswith("WebShop [SEP] Instruction:")


def test_import_eto_reports_unmappable_ids(tmp_path):
    src = write(tmp_path, "bad.json", [ws_record("not-a-number", "x", "B0")])
    res = CliRunner().invoke(main, ["data", "import-eto", str(src), "--env", "webshop", "-o", str(tmp_path / "o.json")])
    assert res.exit_code == 2 and "not a goal index" in res.output and "no trajectory could be imported" in res.output


def test_import_eto_malformed_file(tmp_path):
    src = tmp_path / "x.json"
    src.write_text("{not json")
    res = CliRunner().invoke(main, ["data", "import-eto", str(src), "--env", "webshop", "-o", str(tmp_path / "o.json")])
    assert res.exit_code == 2 and "not a readable ShareGPT JSON" in res.output


# ----------------------------------------------------------------------------- ScienceWorld

SW_INSTR = ("You are a helpful assistant to do some scientific experiment in an environment.\n"
            "The available actions are:\n open OBJ: open a container\n focus on OBJ: focus on an object\n"
            "Your response should use the following format:\n\nThought: <your thoughts>\nAction: <your next action>")


def sw_record(eto_id: str, task: str) -> dict:
    return {"id": eto_id, "conversations": conv(SW_INSTR, task, [
        ("I need to find the substance first.", "look around",
         "This room is called the kitchen. In it, you see: \n\ta substance called water\n\ta stove"),
        ("Water is here; I focus on it.", "focus on substance in kitchen",
         "You focus on the water."),
        ("Now heat it on the stove.", "move water to stove", "You move the water to the stove."),
    ])}


def test_sciworld_ids():
    from sand_builtins.environments.scienceworld import ScienceWorldEnv

    env = ScienceWorldEnv()  # ids only: no JVM starts
    assert env.task_id_from_eto("0_12") == "0_12"
    assert env.task_id_from_eto(" 13_007") == "13_7"
    for bad in ("5_1", "boil_3", "0-12", ""):  # 5 is the id no task has
        with pytest.raises(ValueError):
            env.task_id_from_eto(bad)


def test_import_eto_sciworld(tmp_path, registries):
    if "scienceworld" not in registries["environment"].names():
        pytest.skip("scienceworld environment plugin not registered")
    src = write(tmp_path, "sciworld_sft.json", [
        sw_record("0_12", "Your task is to boil water. For compounds without a boiling point, combusting the "
                          "substance is also acceptable. First, focus on the substance."),
        sw_record("16_3", "Your task is to determine if unknown substance B is electrically conductive."),
    ])
    out = tmp_path / "sciworld_expert.json"
    res = CliRunner().invoke(main, ["data", "import-eto", str(src), "--env", "scienceworld", "-o", str(out)])
    assert res.exit_code == 0, res.output
    trajs = read_sharegpt(out, "scienceworld")
    assert [t.task_id for t in trajs] == ["0_12", "16_3"]
    assert trajs[0].actions[1] == "focus on substance in kitchen"


# ----------------------------------------------------------------------------- ALFWorld

AW_INSTR = ("Interact with a household to solve a task. Imagine you are an intelligent agent in a household "
            "environment and your target is to perform actions to complete the task goal.\n"
            "Your response should use the following format:\n\nThought: <your thoughts>\nAction: <your next action>")
UNIQUE = "json_2.1.1/train/look_at_obj_in_light-AlarmClock-None-DeskLamp-303/trial_T20190908_144950_175895"
TWINS = ["json_2.1.1/train/look_at_obj_in_light-AlarmClock-None-DeskLamp-301/trial_T20190907_174127_043461",
         "json_2.1.1/train/look_at_obj_in_light-AlarmClock-None-DeskLamp-301/trial_T20190907_174142_375532"]


def aw_task(receptacles: list[str], goal: str) -> str:
    seen = ", ".join(f"a {r}" for r in receptacles[:-1]) + f", and a {receptacles[-1]}"
    return (f"You are in the middle of a room. Looking quickly around you, you see {seen}.\n"
            f"Your task is to: {goal}")


TASK_303 = aw_task(["bed 1", "desk 1", "drawer 5", "drawer 4", "drawer 3", "drawer 2", "drawer 1", "dresser 1",
                    "garbagecan 1"] + [f"shelf {i}" for i in range(12, 0, -1)] + ["sidetable 1"],
                   "look at alarmclock under the desklamp.")
TASK_301 = aw_task(["bed 1", "desk 1", "dresser 1", "garbagecan 1"] + [f"drawer {i}" for i in range(1, 18)]
                   + [f"shelf {i}" for i in range(1, 7)], "look at alarmclock under the desklamp.")


def aw_record(eto_id: str, task: str, **extra) -> dict:
    return {"id": eto_id, **extra, "conversations": conv(AW_INSTR, task, [
        ("To solve the task, I need to find an alarmclock, then a desklamp.", "go to desk 1",
         "On the desk 1, you see a alarmclock 2, a desklamp 1, and a pen 1."),
        ("I find the alarmclock.", "take alarmclock 2 from desk 1", "You pick up the alarmclock 2 from the desk 1."),
        ("Now I use the desklamp.", "use desklamp 1", "You turn on the desklamp 1."),
    ])}


@pytest.fixture(scope="module")
def alf_index():
    if not HAVE_ALFWORLD_DATA:
        pytest.skip(NO_ALFWORLD_DATA)
    return eto_ids.GameIndex.build(ALFWORLD_DATA, splits=["train"])


def test_alfworld_game_key():
    key = eto_ids.game_key(f"data/{TWINS[0]}/game.tw-pddl")
    assert key == TWINS[0]
    assert eto_ids.game_key(f"/home/u/.cache/alfworld/{TWINS[0]}") == TWINS[0]
    with pytest.raises(ValueError):
        eto_ids.game_key("alfworld_17")


def test_alfworld_text_features():
    goal, receps = eto_ids.task_text_features(TASK_301)
    assert goal == "look at alarmclock under the desklamp"
    assert receps["drawer"] == 17 and receps["shelf"] == 6 and receps["bed"] == 1


def test_alfworld_match_by_text(alf_index):
    assert eto_ids.eto_game(TASK_303, alf_index) == UNIQUE
    with pytest.raises(eto_ids.AmbiguousTask) as info:  # two trials of one task folder: same goal, same scene
        eto_ids.eto_game(TASK_301, alf_index)
    assert info.value.candidates == TWINS
    assert eto_ids.eto_game(TASK_301, alf_index, verify=lambda k: k == TWINS[1]) == TWINS[1]
    with pytest.raises(ValueError, match="no ALFWorld game"):
        eto_ids.eto_game(TASK_301.replace("alarmclock", "teddybear"), alf_index)


def test_alfworld_game_file_field_wins(alf_index):
    rec = {"game_file": f"data/{TWINS[1]}/game.tw-pddl"}
    assert eto_ids.eto_game(TASK_301, alf_index, eto_record=rec) == TWINS[1]
    assert eto_ids.eto_game(TASK_301, None, eto_record=rec) == TWINS[1]
    with pytest.raises(ValueError, match="not under"):
        eto_ids.eto_game(TASK_301, alf_index, eto_record={"game_file": "data/json_2.1.1/train/x-1/trial_y"})


class AlfworldIds(Environment):
    """Stand-in for the alfworld plugin's id hook only (the plugin wires the same call); no game runs."""

    name = "alfworld"

    def __init__(self, index):
        super().__init__()
        self.index = index

    def task_id_from_eto(self, eto_id, trajectory=None):
        return eto_ids.eto_game(trajectory.task, self.index, eto_record=trajectory.meta.get("eto"))

    tasks = instruction = reset = step = max_steps = None  # not used by the importer


def test_import_eto_alfworld(tmp_path, alf_index):
    src = write(tmp_path, "alfworld_sft.json", [
        aw_record("alfworld_0", TASK_303),
        aw_record("alfworld_1", TASK_301, game_file=f"data/{TWINS[0]}/game.tw-pddl"),
        aw_record("alfworld_2", TASK_301),  # ambiguous without a replay check: skipped and reported
    ])
    trajs, problems = eto.import_eto(src, AlfworldIds(alf_index))
    assert [t.task_id for t in trajs] == [UNIQUE, TWINS[0]]
    assert trajs[1].meta["eto"] == {"id": "alfworld_1", "game_file": f"data/{TWINS[0]}/game.tw-pddl"}
    assert len(problems) == 1 and "alfworld_2" in problems[0] and "2 ALFWorld games match" in problems[0]


def test_import_eto_alfworld_cli(tmp_path, registries):
    if "alfworld" not in registries["environment"].names():
        pytest.skip("alfworld environment plugin not registered")
    if not HAVE_ALFWORLD_DATA:
        pytest.skip(NO_ALFWORLD_DATA)
    src = write(tmp_path, "alfworld_sft.json", [aw_record("alfworld_1", TASK_301,
                                                          game_file=f"data/{TWINS[0]}/game.tw-pddl")])
    out = tmp_path / "alf.json"
    res = CliRunner(env={"ALFWORLD_DATA": str(ALFWORLD_DATA)}).invoke(
        main, ["data", "import-eto", str(src), "--env", "alfworld", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert len(read_sharegpt(out, "alfworld")) == 1


# ----------------------------------------------------------------------------- expert


def test_expert_textworld_express_replays_to_success(tmp_path, registries):
    pytest.importorskip("textworld_express")
    out = tmp_path / "twx.json"
    res = CliRunner().invoke(main, ["data", "expert", "--env", "textworld_express", "--split", "train", "--limit", "3",
                                    "--set", "n_train=8", "--set", "n_seen=4", "--set", "n_unseen=4", "-o", str(out)])
    assert res.exit_code == 0, res.output
    trajs = read_sharegpt(out, "textworld_express")
    assert len(trajs) == 3 and all(s.thought for t in trajs for s in t.steps)  # short grounded ReAct thoughts
    full = read_trajectories_jsonl(trajectories_path(out))
    assert all(t.success and t.reward == 1.0 for t in full)
    env = registries.build("environment", "textworld_express", {"n_train": 8, "n_seen": 4, "n_unseen": 4})
    try:
        assert [t.task_id for t in trajs] == env.tasks("train")[:3]
        for t in full:  # the .jsonl keeps every observation, the last one included
            results = env.replay(t.task_id, t.actions, expected=[s.observation for s in t.steps])
            assert results[-1].success and results[-1].done
        # the ShareGPT file (no last observation) replays through the importer's --verify path
        imported, problems = eto.import_eto(out, env, verify=True)
        assert problems == [] and all(t.success for t in imported)
    finally:
        env.close()


def test_expert_needs_env_or_recipe(tmp_path):
    res = CliRunner().invoke(main, ["data", "expert", "-o", str(tmp_path / "x.json")])
    assert res.exit_code == 2 and "--env or --recipe" in res.output


def test_write_thoughts_fills_every_step():
    from scripted import ScriptedPolicy

    from sand_framework.types import Step, Trajectory

    traj = Trajectory("t", "textworld_express", "instr", "Task: find the coin.",
                      [Step("", "move north", "You are in the kitchen."), Step("", "take coin", "You win.")])
    policy = ScriptedPolicy()
    write_thoughts([traj], policy)
    assert all(s.thought.startswith("I think") for s in traj.steps)
    assert policy.calls == [("base", 2, 1)]


def test_an_environment_without_an_expert_or_an_unknown_split_is_the_users_error(tmp_path):
    """Issue 38 item 5: both ended as 'unexpected failure ... a bug in SAND'. An environment without an expert
    asked for expert trajectories is NoExpertError (exit 2, naming the file-based fix), lazily as the expert
    yields; `sand data expert --split` and `sand eval --split` name the splits there are."""
    from sand_framework.engine.expert import expert_trajectory
    from sand_framework.errors import NoExpertError
    from toy_envs import Corridor

    class NoExpert(Corridor):
        name = "no_expert"
        expert_actions = Environment.expert_actions

    class HalfExpert(Corridor):
        def expert_actions(self, task_id):
            yield "go east"
            raise NotImplementedError("the rest is not written")

    with pytest.raises(NoExpertError, match="'no_expert' has no expert.*data.source=sharegpt"):
        expert_trajectory(NoExpert(), "corridor-0")
    with pytest.raises(NoExpertError, match="the rest is not written"):
        expert_trajectory(HalfExpert(), "corridor-2")
    assert expert_trajectory(Corridor(), "corridor-2").success
    pytest.importorskip("textworld_express")
    res = CliRunner().invoke(main, ["data", "expert", "--env", "textworld_express", "--split", "dev", "--limit", "1",
                                    "-o", str(tmp_path / "x.json")])
    assert res.exit_code == 2 and "no split 'dev'; choose from train, seen, unseen" in res.output, res.output
    res = CliRunner().invoke(main, ["eval", "tiny-random", "--recipe", "smoke", "--split", "dev", "--limit", "1",
                                    "-o", str(tmp_path / "ev")])
    assert res.exit_code == 2 and "--split 'dev': textworld_express has no such split" in res.output, res.output
