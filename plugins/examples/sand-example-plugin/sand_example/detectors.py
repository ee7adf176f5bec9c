"""A deliberation trigger based on how large the majority of the sampled actions is."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from sand_framework.components import Detector
from sand_framework.types import Decision


class MajorityMarginDetector(Detector):
    """Deliberate when the most common sampled action holds less than ``threshold`` of the samples.

    Where ``set_size`` deliberates on any disagreement (one stray sample among
    N is enough) and ``entropy`` looks at the whole distribution, this asks
    one question: is there a clear majority? With N=5 and the default 0.6, a
    4/1 or 3/2 split passes (share 0.8 or 0.6) and a 2/2/1 split deliberates.

    ``Decision.score`` is the majority share in [0, 1] (lower = less consistent).
    """

    name = "majority_margin"
    description = "deliberate when the most common sampled action's share is below a threshold"

    @dataclass
    class Params:
        threshold: float = 0.6
        """Deliberate when the majority action's share of the samples is below this, in (0, 1]."""
        count_invalid: bool = True
        """Keep unparseable samples in the denominator (they are votes for no action); off: ignore them."""
        expert_disagreement: bool = False
        """Also deliberate when there is a clear majority but it differs from the expert action."""

        def __post_init__(self) -> None:
            if isinstance(self.threshold, bool) or not isinstance(self.threshold, (int, float)):
                raise ValueError(f"threshold must be a number, got {self.threshold!r}")
            if not 0.0 < self.threshold <= 1.0:
                raise ValueError(f"threshold must be in (0, 1], got {self.threshold}")

    def decide(self, sampled: list[str], expert: str) -> Decision:
        valid = [a for a in sampled if a]
        total = len(sampled) if self.params.count_invalid else len(valid)
        if not valid or total == 0:
            return Decision(deliberate=True, score=0.0)  # no usable majority at all
        top, count = Counter(valid).most_common(1)[0]
        share = count / total
        deliberate = share < self.params.threshold or (self.params.expert_disagreement and top != expert)
        return Decision(deliberate=deliberate, score=share)
