"""Detectors and the synthesizer's check/retry/fallback logic."""

from __future__ import annotations

from scripted import ScriptedPolicy

from sand_framework.components import CritiqueRequest, SynthesisRequest
from sand_framework.deliberation import concludes_with, is_deliberation, quoted_actions
from sand_framework.types import Candidate, Completion, Critique, Step, Trajectory


def test_set_size(registries):
    d = registries.build("detector", "set_size")
    assert not d.decide(["go", "go", "go"], "go").deliberate
    assert d.decide(["go", "go", "take"], "go").deliberate
    assert d.decide(["go", "go"], "take").deliberate  # the expert disagrees with all samples
    assert not d.decide(["", "", "go"], "go").deliberate  # invalid samples are ignored by default
    assert registries.build("detector", "set_size", {"count_invalid": True}).decide(["", "go"], "go").deliberate


def test_entropy(registries):
    d = registries.build("detector", "entropy", {"threshold": 0.6})
    assert not d.decide(["a"] * 5, "a").deliberate
    assert not d.decide(["a"] * 4 + ["b"], "a").deliberate  # one stray sample: H = 0.45 nats
    assert d.decide(["a", "a", "b", "b", "c"], "a").deliberate
    from sand_framework.config.validate import component_params

    built, problems = component_params(registries, "detector", "entropy", {"threshold": -0.1})
    assert built is None and problems == ["detector[entropy].threshold: must be >= 0.0, got -0.1"]


def test_deliberation_rule():
    t = 'If I "move east" I waste a step; "take coin" wins. So I will "take coin".'
    assert quoted_actions(t) == ["move east", "take coin"] and is_deliberation(t)
    assert concludes_with(t, "Take coin.") and not concludes_with(t, "move east")
    assert not is_deliberation('I will "take coin".')


class Stubborn(ScriptedPolicy):
    """Base model that never concludes with the expert action."""

    def generate(self, chats, sampling, role="agent"):
        self.calls.append((role, len(chats), sampling.n))
        return [[Completion('I will "move west" or "move north".')] for _ in chats]


def _request():
    traj = Trajectory("t", "e", "instr", "Task: find coin.", [Step("", "take coin", "You win.")])
    cands = [Candidate("take coin", is_expert=True), Candidate("move west")]
    crits = [Critique("take coin", "Taking it finishes the task."), Critique("move west", "That wastes a step.")]
    return SynthesisRequest(traj, 0, cands, crits)


def test_synthesizer_accepts_good_thoughts(registries):
    s = registries.build("synthesizer", "deliberation")
    [res] = s.synthesize([_request()], ScriptedPolicy(actions=["move west"]))
    assert res.status == "ok" and concludes_with(res.thought, "take coin")


def test_synthesizer_retries_then_drops_the_step_as_the_paper_does(registries):
    """No attempt passes: the result is ``failed`` with no thought (the step keeps the expert's), never a
    template, unless the recipe opts in with ``on_failure: template``."""
    s = registries.build("synthesizer", "deliberation", {"retries": 2})
    policy = Stubborn()
    [res] = s.synthesize([_request()], policy, seed=1)
    assert res.status == "failed" and res.attempts == 3 and len(policy.calls) == 3 and res.thought == ""


def test_the_template_is_a_named_opt_in(registries):
    s = registries.build("synthesizer", "deliberation", {"retries": 2, "on_failure": "template"})
    [res] = s.synthesize([_request()], Stubborn(), seed=1)
    assert res.status == "fallback" and res.attempts == 3
    assert concludes_with(res.thought, "take coin") and is_deliberation(res.thought)
    assert "That wastes a step." in res.thought


class Leaky(ScriptedPolicy):
    """Base model whose thought concludes right but repeats the critic prompt's scaffolding."""

    def generate(self, chats, sampling, role="agent"):
        return [[Completion('Imagined outcome: the task is not completed (reward 0.50). "move west" fails, so '
                            '"take coin".')] for _ in chats]


def test_the_check_refuses_a_thought_that_carries_the_prompts_scaffolding(registries):
    from sand_framework.deliberation import leaks_scaffolding, passes_synthesis_check

    s = registries.build("synthesizer", "deliberation", {"retries": 0})
    [res] = s.synthesize([_request()], Leaky())
    assert res.status == "failed"
    assert leaks_scaffolding("I imagined outcome x") and not leaks_scaffolding('"a" then "b"')
    assert passes_synthesis_check('If I "move west" I waste a step, so "take coin".', "take coin")


def test_critic_keeps_three_sentences(registries):
    from sand_builtins.critics import first_sentences

    assert first_sentences("A. B! C? D. E.") == "A. B! C?"


def test_a_critique_cut_by_its_budget_ends_on_its_last_whole_sentence(registries):
    """The fragment the token budget left goes nowhere near a training target; the cut is counted."""
    from sand_builtins.critics import whole_sentences

    assert whole_sentences("It wastes a step. I should not go west because the", cut_by_budget=True) == (
        "It wastes a step.", True)
    assert whole_sentences("It wastes a step. I should not go west because the", cut_by_budget=False) == (
        "It wastes a step. I should not go west because the", False)
    assert whole_sentences('It works. "Done."', cut_by_budget=True) == ('It works. "Done."', False)
    assert whole_sentences("Only a fragment", cut_by_budget=True) == ("", True)
    assert whole_sentences("A. B. C. D and", cut_by_budget=True) == ("A. B. C.", False)  # cut at 3 already

    class Cut(ScriptedPolicy):
        def generate(self, chats, sampling, role="agent"):
            return [[Completion("It wastes a step. Going west leads to the", completion_tokens=sampling.max_new_tokens)]
                    for _ in chats]

    critic = registries.build("critic", "no_rollout_critic", {"max_new_tokens": 12})
    traj = Trajectory("t", "e", "instr", "Task: find coin.", [Step("", "take coin", "You win.")])
    [crit] = critic.critique([CritiqueRequest(traj, 0, Candidate("move west"), None)], Cut())
    assert crit.text == "It wastes a step." and crit.truncated


def test_fallback_fits_the_synthesizer_budget(registries):
    """The fallback is training data like a generated thought, so it obeys the same token budget (the agent's
    generation budgets are validated against it): long critiques are cut to their first sentence, then the other
    candidates' critiques are dropped, while every candidate stays named."""
    from sand_builtins.synthesizers import fallback_thought

    traj = Trajectory("t", "e", "instr", "Task: find coin.", [Step("", "take coin", "You win.")])
    cands = [Candidate("take coin", is_expert=True), Candidate("move west"), Candidate("move east")]
    long = "It goes nowhere useful. " + "Then more words follow here. " * 10
    crits = [Critique("take coin", "Taking it finishes the task. " + "Really. " * 10),
             Critique("move west", long), Critique("move east", long)]
    req = SynthesisRequest(traj, 0, cands, crits)
    words = lambda t: len(t.split())  # noqa: E731
    full = fallback_thought(req, "take coin")
    assert words(full) > 100
    short = fallback_thought(req, "take coin", fits=lambda t: words(t) <= 40)
    assert words(short) <= 40
    assert all(f'"{a}"' in short for a in ("move west", "move east", "take coin"))
    assert concludes_with(short, "take coin") and is_deliberation(short)
    s = registries.build("synthesizer", "deliberation", {"retries": 0, "max_new_tokens": 40, "on_failure": "template"})
    [res] = s.synthesize([req], Stubborn())
    assert res.status == "fallback" and Stubborn().count_tokens(res.thought) <= 40
