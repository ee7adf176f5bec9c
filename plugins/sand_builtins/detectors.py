"""Deliberation triggers: the paper's set-size check and an entropy threshold."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Annotated

from annotated_types import Ge

from sand_framework import hookimpl
from sand_framework.components import Detector
from sand_framework.types import Decision


class SetSizeDetector(Detector["SetSizeDetector.Params"]):
    """Deliberate iff the N sampled actions plus the expert action are not all the same (SAND, Sec. 3.2)."""

    name = "set_size"
    description = "deliberate when sampled + expert actions hold more than one distinct action"

    @dataclass
    class Params:
        min_distinct: Annotated[int, Ge(1)] = 2
        """Deliberate when at least this many distinct actions appear (the paper: 2)."""
        count_invalid: bool = False
        """Count unparseable samples as a distinct 'action' (off: they are ignored)."""

    def decide(self, sampled: list[str], expert: str) -> Decision:
        actions = {a for a in sampled if a or self.params.count_invalid} | {expert}
        return Decision(deliberate=len(actions) >= self.params.min_distinct, score=float(len(actions)))


class EntropyDetector(Detector["EntropyDetector.Params"]):
    """Deliberate when the entropy of the sampled-action distribution exceeds a threshold.

    Unlike the set-size check it ignores a single stray sample among N and
    does not look at the expert action, so it triggers only on real indecision.
    """

    name = "entropy"
    description = "deliberate when the sampled actions' entropy (nats) exceeds a threshold"

    @dataclass
    class Params:
        threshold: Annotated[float, Ge(0.0)] = 0.5
        """In nats; with N=5, one dissenting sample gives 0.50, a 3/2 split 0.67."""
        include_expert: bool = True
        """Add the expert action to the distribution as one more sample."""

    def decide(self, sampled: list[str], expert: str) -> Decision:
        pool = [a for a in sampled if a] + ([expert] if self.params.include_expert else [])
        counts = Counter(pool)
        total = sum(counts.values()) or 1
        h = -sum(c / total * math.log(c / total) for c in counts.values())
        return Decision(deliberate=h > self.params.threshold, score=h)


@hookimpl
def sand_register_detectors(register):
    register(SetSizeDetector)
    register(EntropyDetector)
