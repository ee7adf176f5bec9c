"""`sand sweep` arms that compare methods share one SFT start, and never each other's iterations.

An ETO (or RFT, IPR) arm differs from the SAND arm only after behavior initialization: it may adopt the
SAND arm's ``expert`` and ``train/iter0`` stages, but ``synth/iter1`` (and everything after it) was built by
another method, so reusing it across arms must be refused (the recipe's ``method`` slot, params included, is
one of the settings ``synth/iterK`` depends on).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sand_framework.errors import RunDirError

SMOKE = ["data.limit=2", "eval.limit=1", "eval.batch_size=1", "eval.splits=[unseen]"]
METHODS = {"sand": [], "rft": ["method=rft"], "eto": ["method=eto"], "ipr": ["method=ipr"]}


def recipe(*overrides: str):
    from sand_framework.app.runner import resolve

    return resolve("smoke", [*SMOKE, *overrides], [])[0]


@pytest.mark.parametrize("method", ["rft", "eto", "ipr"])
def test_a_method_arm_shares_the_sft_start_but_not_the_iterations(method):
    from sand_framework.app.reuse import stage_inputs

    sand, other = recipe(), recipe(*METHODS[method])
    for stage in ("expert", "train/iter0"):
        assert stage_inputs(other, stage) == stage_inputs(sand, stage), stage
    for stage in ("synth/iter1", "train/iter1"):
        mine, theirs = stage_inputs(other, stage), stage_inputs(sand, stage)
        assert mine["method"]["name"] == method and theirs["method"]["name"] == "sand"
        assert mine != theirs, stage


def test_iterations_of_two_baselines_or_two_settings_of_one_are_not_shared():
    from sand_framework.app.reuse import stage_inputs

    eto, rft = recipe("method=eto"), recipe("method=rft")
    assert stage_inputs(eto, "synth/iter1") != stage_inputs(rft, "synth/iter1")
    cut = recipe("method=eto", "method.truncate_rejected=4")
    assert stage_inputs(eto, "synth/iter1") != stage_inputs(cut, "synth/iter1")
    assert stage_inputs(eto, "train/iter0") == stage_inputs(cut, "train/iter0")
    # a preference method's training depends on the preference trainer; an SFT stage's never does
    assert "preference_trainer" in stage_inputs(eto, "train/iter1")
    assert "preference_trainer" not in stage_inputs(eto, "train/iter0")


def _finished_source(path: Path):
    """A SAND run whose first three stages are recorded done (their folders hold placeholder files)."""
    from sand_framework.app.runner import create

    src, _, _, rd = create("smoke", SMOKE, run_dir=str(path))
    for stage, folder in (("expert", "expert"), ("train/iter0", "weights/iter0/final"), ("synth/iter1", "iter1")):
        (rd.path / folder).mkdir(parents=True, exist_ok=True)
        (rd.path / folder / "marker.txt").write_text(stage)
        rd.mark_done(stage, {"weights": str(rd.path / folder)} if stage.startswith("train") else {"trajectories": 2})
    return src, rd


def test_an_eto_arm_adopts_the_sand_arms_expert_and_sft_and_refuses_its_synthesis(tmp_path):
    from sand_framework.app.reuse import reuse_stages
    from sand_framework.app.runner import create

    source_recipe, source = _finished_source(tmp_path / "sand")
    eto, _, _, rd = create("smoke", [*SMOKE, "method=eto"], run_dir=str(tmp_path / "eto"))
    assert reuse_stages(rd, eto, source.path, source_recipe, ["expert", "train/iter0"]) == ["expert", "train/iter0"]
    assert (rd.path / "weights" / "iter0" / "final" / "marker.txt").read_text() == "train/iter0"
    assert rd.stage_result("train/iter0")["weights"].startswith(str(rd.path.resolve()))
    with pytest.raises(RunDirError, match=r"synth/iter1.*method\.name: 'sand' there, 'eto' here"):
        reuse_stages(rd, eto, source.path, source_recipe, ["synth/iter1"])
    assert not rd.stage_done("synth/iter1")


@pytest.mark.slow
def test_sweep_with_a_sand_and_an_eto_arm_sharing_the_sft_start(tmp_path):
    """The real thing (minutes): `sand sweep` runs the SAND arm, then the ETO arm from its expert data and SFT
    weights (DPO on the ETO pairs with trl_dpo), and tabulates both."""
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"name": "methods", "output_dir": str(tmp_path / "out"), "seeds": [0], "arms": [
        {"name": "sand", "recipe": "smoke", "overrides": SMOKE, "report": {"sft": "SFT", "final": "SAND"}},
        {"name": "eto", "recipe": "smoke", "overrides": [*SMOKE, "method=eto", "method.max_new_tokens=48"],
         "reuse": "sand", "report": {"final": "ETO"}},
    ]}))
    proc = subprocess.run([sys.executable, "-m", "sand_framework.cli.main", "sweep", str(sweep)],
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    eto = tmp_path / "out" / "eto" / "seed0"
    state = json.loads((eto / "state.json").read_text())["done"]
    assert state["expert"]["reused_from"] and state["train/iter0"]["reused_from"]
    assert "reused_from" not in state["synth/iter1"] and state["synth/iter1"]["method"] == "eto"
    assert state["train/iter1"]["pairs"] == state["synth/iter1"]["pairs"] > 0
    assert (eto / "iter1" / "pairs.jsonl").is_file()


# -- a method's stages depend on the synthesis slots it declares in `uses` -----------------------------------------


def test_an_eto_synthesis_stage_ignores_the_critic_and_a_sand_one_does_not():
    """ETO never calls a critic (``uses = ("executor",)``): a critic edit changes none of its stages' fingerprints;
    SAND calls one, so the same edit changes its synthesis stage and everything after it."""
    from sand_framework.app.reuse import stage_inputs

    edit = ("critic.max_new_tokens=7", "sampler.n=2", "detector.min_distinct=3", "synthesizer.max_new_tokens=12")
    for stage in ("synth/iter1", "train/iter1", "eval"):
        eto = stage_inputs(recipe("method=eto"), stage)
        assert {"critic", "sampler", "detector", "synthesizer"}.isdisjoint(eto) and "executor" in eto, stage
        assert stage_inputs(recipe("method=eto", *edit), stage) == eto, stage
        assert stage_inputs(recipe("method=eto", "executor.temperature=0.5"), stage) != eto, stage
        sand = stage_inputs(recipe(), stage)
        assert {"critic", "sampler", "detector", "synthesizer", "executor", "policy"} <= set(sand), stage
        assert stage_inputs(recipe("critic.max_new_tokens=7"), stage) != sand, stage


def test_uses_is_read_in_one_place_and_undeclared_means_every_synthesis_slot():
    from sand_framework.components import Method
    from sand_framework.components.declared import SYNTHESIS_SLOTS, method_slots
    from sand_framework.plugins import load_plugins

    regs = load_plugins().registries()
    methods = {n: regs["method"].get(n) for n in regs["method"].names()}
    assert method_slots(methods["sand"]) == SYNTHESIS_SLOTS
    assert {n: method_slots(methods[n]) for n in ("rft", "eto", "ipr", "pairs_file")} == {
        "rft": ("environment", "policy", "executor"), "eto": ("environment", "policy", "executor"),
        "ipr": ("environment", "policy", "executor"), "pairs_file": ("environment", "policy")}
    assert Method.uses is None and method_slots(Method) == method_slots(None) == SYNTHESIS_SLOTS


def test_a_method_that_declares_uses_cannot_call_another_synthesis_slot(tmp_path):
    """The narrower fingerprint is kept honest: ``tools.component`` refuses a synthesis slot outside ``uses``
    (a change to it would go unseen by --resume and reuse); declared and non-synthesis slots pass through."""
    from sand_framework.components.declared import method_component
    from sand_framework.errors import ComponentError
    from sand_framework.plugins import load_plugins

    regs = load_plugins().registries()
    eto = regs["method"].get("eto")()
    get = method_component(eto, lambda slot: f"the {slot}")
    assert get("executor") == "the executor" and get("policy") == "the policy" and get("trainer") == "the trainer"
    with pytest.raises(ComponentError, match=r"method 'eto' asked for the 'critic' component, but its `uses` "
                                             r"\(executor\) does not declare that slot.*Add 'critic' to"):
        get("critic")
    sand = regs["method"].get("sand")()
    assert method_component(sand, lambda slot: slot)("critic") == "critic"


def test_a_method_declaring_an_unknown_slot_in_uses_is_refused_at_registration():
    from sand_framework.components import IterationData, Method
    from sand_framework.errors import PluginLoadError
    from sand_framework.registry import Registry

    class Typo(Method):
        name = "typo"
        uses = ("critc",)

        def build(self, trajectories, tools, seed):
            return [{"stats": {}} for _ in trajectories]

        def assemble(self, units, trajectories):
            return IterationData(next_expert=trajectories, trajectories=trajectories)

    with pytest.raises(PluginLoadError, match=r"plugin 'mine': .*Typo: `uses` names 'critc', not synthesis slot"):
        Registry("method").add(Typo, "mine")
    Typo.uses = "executor"
    with pytest.raises(PluginLoadError, match="must be a tuple of slot names"):
        Registry("method").add(Typo, "mine")


def _recorded_source(path: Path, *overrides: str):
    """A run whose first three stages are recorded done with their fingerprints, as `sand run` records them."""
    from sand_framework.app.fingerprint import fingerprint
    from sand_framework.app.runner import create

    src, plugins, regs, rd = create("smoke", [*SMOKE, *overrides], run_dir=str(path))
    for stage, folder in (("expert", "expert"), ("train/iter0", "weights/iter0/final"), ("synth/iter1", "iter1")):
        (rd.path / folder).mkdir(parents=True, exist_ok=True)
        (rd.path / folder / "marker.txt").write_text(stage)
        rd.mark_done(stage, {"weights": str(rd.path / folder)} if stage.startswith("train") else {"trajectories": 2},
                     fingerprint(src, rd, regs, plugins, stage))
    return src, rd


@pytest.mark.parametrize("method, reused", [("eto", True), ("sand", False)])
def test_an_arm_with_another_critic_reuses_an_eto_synthesis_but_not_a_sand_one(tmp_path, method, reused):
    from sand_framework.app.reuse import reuse_stages
    from sand_framework.app.runner import create

    source_recipe, source = _recorded_source(tmp_path / "source", f"method={method}")
    arm, _, _, rd = create("smoke", [*SMOKE, f"method={method}", "critic.max_new_tokens=7"],
                           run_dir=str(tmp_path / "arm"))
    stages = ["expert", "train/iter0", "synth/iter1"]
    if reused:
        assert reuse_stages(rd, arm, source.path, source_recipe, stages) == stages
        assert (rd.path / "iter1" / "marker.txt").read_text() == "synth/iter1"
    else:
        with pytest.raises(RunDirError, match=r"cannot reuse 'synth/iter1'.*critic\.max_new_tokens: 24 there, 7 here"):
            reuse_stages(rd, arm, source.path, source_recipe, stages)
        assert rd.finished_stages() == stages[:2]
