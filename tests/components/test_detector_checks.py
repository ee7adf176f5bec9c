"""sand_framework.testing.detectors: real candidate sets reach both branches, and each broken detector is named."""

from __future__ import annotations

import itertools

import pytest

from sand_builtins.detectors import EntropyDetector, SetSizeDetector
from sand_framework.components import Detector, SampleRequest
from sand_framework.engine.expert import expert_trajectory
from sand_framework.testing.detectors import (
    PATTERNS,
    ExpertMixSampler,
    assert_detector_conforms,
    check_detector,
    detector_cases,
    proposals,
)
from sand_framework.types import Decision
from toy_envs import Corridor

TASKS = ["corridor-0", "corridor-1", "corridor-2"]  # experts: 1-3 x "go east", then "take coin"


def test_builtin_detectors_conform_and_reach_both_branches():
    for det in (SetSizeDetector(), EntropyDetector()):
        cases = assert_detector_conforms(det, Corridor(), TASKS, n=5)
        assert {c.pattern for c in cases} == set(PATTERNS)
        assert any(c.deliberated for c in cases) and not all(c.decision.deliberate for c in cases)


def test_cases_are_what_the_engine_passes():
    (case, *_) = [c for c in detector_cases(SetSizeDetector(), Corridor(), TASKS, n=4) if c.pattern == "split"]
    assert case.sampled == ("go east", "take coin", "go east", "take coin")  # normalized, two real actions
    invalid = [c for c in detector_cases(SetSizeDetector(), Corridor(), TASKS) if c.pattern == "invalid"]
    assert all(c.sampled == ("",) * 5 and not c.deliberated for c in invalid)


class _Bad(Detector):
    name = "bad"


class NotADecision(_Bad):
    def decide(self, sampled, expert):
        return True


class NonFiniteScore(_Bad):
    def decide(self, sampled, expert):
        return Decision(deliberate=1, score=float("nan"))


class Mutates(_Bad):
    def decide(self, sampled, expert):
        sampled.sort()
        return Decision(deliberate=False)


class Random(_Bad):
    def __init__(self, params=None):
        super().__init__(params)
        self.flip = itertools.cycle([True, False])

    def decide(self, sampled, expert):
        return Decision(deliberate=next(self.flip))


class Never(_Bad):
    def decide(self, sampled, expert):
        return Decision(deliberate=False)


class Always(_Bad):
    def decide(self, sampled, expert):
        return Decision(deliberate=True)


@pytest.mark.parametrize("cls, needle", [
    (NotADecision, "not Decision"),
    (NonFiniteScore, "is not a bool"),
    (NonFiniteScore, "is not a finite number"),
    (Mutates, "changed the sampled list"),
    (Random, "not deterministic"),
])
def test_broken_detectors_are_named(cls, needle):
    failures = check_detector(cls(), Corridor(), TASKS)
    assert any(needle in f for f in failures), failures
    with pytest.raises(AssertionError, match="detector 'bad' fails"):
        assert_detector_conforms(cls(), Corridor(), TASKS)


@pytest.mark.parametrize("cls, needle", [(Never, "deliberated on none"), (Always, "on every candidate set")])
def test_a_detector_with_one_branch_fails_the_branch_check(cls, needle):
    assert check_detector(cls(), Corridor(), TASKS) == []  # the contract holds ...
    with pytest.raises(AssertionError, match=needle):     # ... but one branch is never reached
        assert_detector_conforms(cls(), Corridor(), TASKS)


def test_expert_mix_sampler_cycles_the_patterns_over_the_batch():
    env = Corridor()
    trajs = [expert_trajectory(env, t) for t in TASKS]
    reqs = [SampleRequest(t, i, []) for t in trajs for i in range(len(t.steps))]
    out = ExpertMixSampler(ExpertMixSampler.Params(n=3)).sample(reqs, policy=None)
    assert len(out) == len(reqs) and all(len(p) == 3 for p in out)
    assert [p.action for p in out[0]] == ["go east", "take coin", "go east"]      # split
    assert [p.action for p in out[1]] == ["take coin"] * 3                       # unanimous (step 1)
    assert [p.valid for p in out[4]] == [False] * 3                              # invalid
    assert out == ExpertMixSampler(ExpertMixSampler.Params(n=3)).sample(reqs, policy=None)


def test_unknown_pattern():
    with pytest.raises(ValueError, match="unknown pattern"):
        proposals("sometimes", "a", ["b"], 3)
