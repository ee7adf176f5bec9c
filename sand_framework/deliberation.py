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
