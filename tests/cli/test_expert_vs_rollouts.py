"""experiments/expert_vs_rollouts.py: where the expert's candidate ranks among a deliberation's rollouts."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))

import expert_vs_rollouts  # noqa: E402


def _record(expert: float | None, *others: float | None) -> dict:
    cands = [{"action": "open box", "is_expert": True}] + [{"action": f"move {i}", "is_expert": False}
                                                           for i in range(len(others))]
    crit = ([] if expert is None else [{"candidate": "open box", "rollout_reward": expert}])
    crit += [{"candidate": f"move {i}", "rollout_reward": r} for i, r in enumerate(others)]
    return {"candidates": cands, "critiques": crit}


def test_each_ranking_of_the_expert_rollout_gets_its_category():
    classify = expert_vs_rollouts.classify
    assert classify(_record(1.0, 0.5, 0.0)) == "expert best"
    assert classify(_record(1.0)) == "expert best"  # no other rollout to beat it
    assert classify(_record(0.5, 0.5, 0.0)) == "tied"
    assert classify(_record(0.5, 1.0)) == "expert beaten"
    assert classify(_record(None, 1.0)) == "no expert rollout"
    assert classify(_record(0.0, None)) == "expert best"  # a candidate whose rollout failed has no reward


def test_counts_read_kept_and_failed_syntheses_of_an_exported_run():
    """Seed 0 of the v2 export: the grounded arm keeps its syntheses, SAND's all failed their check; both arms
    rolled out the same candidates, so they count the same."""
    export = ROOT / "docs" / "results" / "table1-cpu-v2"
    grounded = expert_vs_rollouts.counts(export / "grounded" / "seed0")
    sand = expert_vs_rollouts.counts(export / "sand" / "seed0")
    assert grounded == sand and grounded["attempts"] == 27
    assert sum(grounded[c] for c in expert_vs_rollouts.CATEGORIES) == 27
    assert expert_vs_rollouts.counts(export / "eto" / "seed0") == {}  # its units hold pairs, no deliberations
