"""Both branches of the majority-margin detector on real candidate sets of the light-switch puzzle.

``sand_framework.testing.detectors`` builds the sets from the environment's
own expert actions and decides them the way the engine decides a synthesis
step, so "the engine deliberates here" is the engine's answer, not ours.
"""

from __future__ import annotations

from sand_framework.testing.detectors import assert_detector_conforms, check_detector

from sand_example.detectors import MajorityMarginDetector
from sand_example.lights import LightSwitchesEnv

TASKS = ["lights:3:0", "lights:4:1", "lights:3:2"]  # experts: switches 1+3, 1, 1+2


def _by_pattern(cases):
    out: dict[str, set[tuple[bool, bool]]] = {}
    for c in cases:
        out.setdefault(c.pattern, set()).add((c.decision.deliberate, c.deliberated))
    return out


def test_default_detector_deliberates_only_without_a_majority():
    cases = assert_detector_conforms(MajorityMarginDetector(), LightSwitchesEnv(), TASKS, n=5)
    seen = _by_pattern(cases)
    assert seen["split"] == {(True, True)}            # 2/2/1: no majority, the engine deliberates
    assert seen["unanimous"] == {(False, False)}
    assert seen["one_dissent"] == {(False, False)}    # 4/1 is a clear majority
    assert seen["unanimous_other"] == {(False, False)}
    assert seen["invalid"] == {(True, False)}         # asks, but one candidate: the engine skips the step


def test_expert_disagreement_deliberates_on_a_majority_for_another_action():
    det = MajorityMarginDetector(MajorityMarginDetector.Params(expert_disagreement=True))
    seen = _by_pattern(assert_detector_conforms(det, LightSwitchesEnv(), TASKS, n=5))
    assert seen["unanimous_other"] == {(True, True)}
    assert seen["unanimous"] == {(False, False)}


def test_contract_holds_on_every_split():
    env = LightSwitchesEnv()
    for split in env.splits():
        assert check_detector(MajorityMarginDetector(), env, env.tasks(split)[:5]) == []
