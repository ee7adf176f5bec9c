"""The majority-margin detector: decisions and parameter validation."""

from __future__ import annotations

import pytest

from sand_example.detectors import MajorityMarginDetector

P = MajorityMarginDetector.Params


def decide(sampled, expert="a", **params):
    return MajorityMarginDetector(P(**params)).decide(sampled, expert)


@pytest.mark.parametrize("sampled, deliberate, share", [
    (["a"] * 5, False, 1.0),
    (["a", "a", "a", "a", "b"], False, 0.8),     # one stray sample is not indecision
    (["a", "a", "a", "b", "b"], False, 0.6),     # share == threshold: still a majority
    (["a", "a", "b", "b", "c"], True, 0.4),
    (["a", "b", "c", "d", "e"], True, 0.2),
])
def test_threshold(sampled, deliberate, share):
    d = decide(sampled)
    assert d.deliberate is deliberate and d.score == pytest.approx(share)


def test_invalid_samples_count_against_the_majority_unless_ignored():
    sampled = ["a", "a", "", "", ""]
    assert decide(sampled).deliberate and decide(sampled).score == pytest.approx(0.4)
    d = decide(sampled, count_invalid=False)
    assert not d.deliberate and d.score == 1.0


def test_no_valid_sample_deliberates():
    assert decide(["", "", ""]).deliberate
    assert decide(["", ""], count_invalid=False).deliberate
    assert decide([]).deliberate


def test_expert_disagreement():
    confident_but_wrong = ["b"] * 5
    assert not decide(confident_but_wrong).deliberate
    assert decide(confident_but_wrong, expert_disagreement=True).deliberate
    assert not decide(["a"] * 5, expert_disagreement=True).deliberate


def test_the_expert_is_not_a_vote():
    assert decide(["b", "b", "c", "c", "a"], expert="a").score == pytest.approx(0.4)


@pytest.mark.parametrize("threshold", [0.0, -0.1, 1.5, True, "0.5"])
def test_threshold_is_validated(threshold):
    with pytest.raises(ValueError, match="threshold"):
        P(threshold=threshold)


def test_threshold_one_deliberates_on_any_disagreement():
    assert decide(["a", "a", "a", "a", "b"], threshold=1.0).deliberate
    assert not decide(["a"] * 5, threshold=1.0).deliberate
