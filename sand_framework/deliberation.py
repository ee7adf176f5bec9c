"""What counts as a deliberation thought, shared by synthesizers and evaluators.

SAND's synthesized thoughts name each candidate action in double quotes
("If I \"go north\" ... if I \"take key\" ..."); a thought that names at least
two distinct actions this way weighs several candidates and counts as a
deliberation. The rule is deliberately simple and checkable, so the
deliberation rate of an evaluated agent is comparable across runs.
"""

from __future__ import annotations

import re

_QUOTED = re.compile(r"\"([^\"\n]{1,200})\"")


def quoted_actions(thought: str) -> list[str]:
    """Distinct double-quoted spans, normalized, in order of first mention."""
    seen: list[str] = []
    for m in _QUOTED.finditer(thought or ""):
        a = " ".join(m.group(1).lower().split()).rstrip(".")
        if a and a not in seen:
            seen.append(a)
    return seen


def is_deliberation(thought: str) -> bool:
    return len(quoted_actions(thought)) >= 2


def concludes_with(thought: str, action: str) -> bool:
    """True when the last action the thought names is ``action`` (normalized)."""
    names = [" ".join(m.group(1).lower().split()).rstrip(".") for m in _QUOTED.finditer(thought or "")]
    target = " ".join(action.lower().split()).rstrip(".")
    return bool(names) and names[-1] == target


SCAFFOLDING: tuple[str, ...] = ("imagined outcome", "imagined steps", "you imagine", "recent progress:",
                                "(reward ", "reward 0.", "reward 1.", "critique", "the notes")
"""Phrases of the critic and synthesis prompts' own wording (lower case). A synthesized thought is the agent's
private reasoning; one that repeats the prompts' scaffolding (an 'Imagined outcome: ... reward 0.50' line, a
mention of the critiques) would teach the agent to write about help it will not have, so the check refuses it."""


def leaks_scaffolding(thought: str) -> bool:
    """True when the thought carries a phrase of :data:`SCAFFOLDING`."""
    low = " ".join((thought or "").lower().split())
    return any(p in low for p in SCAFFOLDING)


def passes_synthesis_check(thought: str, expert_action: str) -> bool:
    """The check a synthesized thought must pass to be trained on: it weighs at least two quoted candidates, the
    last one it names is the expert's action, and it carries none of the prompts' scaffolding."""
    return is_deliberation(thought) and concludes_with(thought, expert_action) and not leaks_scaffolding(thought)
