"""How the episodes of a twc sweep end: solved, object put in a wrong place, or never put anywhere.

The sweep table says how often an agent succeeds; for TextWorld-Express twc
(one object to put away) this says why it fails, which is what the
deliberation arms are meant to change: a ``put`` into the wrong container
leaves the game running with no reward (rollouts can show that), while an
agent that never places the object fails before any choice of place.

    python experiments/twc_outcomes.py experiments/miniature2.yaml --split unseen

Reads each finished run's ``eval/<model>/<split>.units.jsonl`` (the same
files ``sand sweep --compare`` pairs) and prints one markdown row per table
row of the sweep, counts summed over its seeds. Categories, per episode:

- **solved**: the environment reported success;
- **wrong place**: the game accepted a ``put`` ("You put ...") but the
  episode did not succeed;
- **never placed, object taken** / **never placed**: no ``put`` was accepted,
  with or without a ``take`` that was;
- **stuck**: the same refused action at least three times (any category).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from sand_builtins.environments.textworld_express import UNKNOWN_ACTION
from sand_framework.report.tables import markdown_table
from sand_framework.store import RunLayout, UnitLog
from sand_framework.sweep.runner import finished, run_dir_of
from sand_framework.sweep.spec import load_sweep

CATEGORIES = ("solved", "wrong place", "never placed, object taken", "never placed")


def classify(trajectory: dict) -> tuple[str, bool]:
    """(category, stuck) of one evaluated twc episode (a trajectory record of an eval unit log)."""
    steps = trajectory.get("steps", [])
    accepted = [s["action"] for s in steps if not s.get("observation", "").startswith(UNKNOWN_ACTION)]
    refused = Counter(s["action"] for s in steps if s.get("observation", "").startswith(UNKNOWN_ACTION))
    stuck = bool(refused) and refused.most_common(1)[0][1] >= 3
    if trajectory.get("success"):
        return "solved", stuck
    if any(a.startswith("put ") for a in accepted):
        return "wrong place", stuck
    if any(a.startswith("take ") for a in accepted):
        return "never placed, object taken", stuck
    return "never placed", stuck


def outcomes(run: Path, model: str, split: str) -> Counter:
    counts: Counter = Counter()
    for unit in UnitLog(run / RunLayout.eval_units(model, split)).values():
        category, stuck = classify(unit["trajectory"])
        counts[category] += 1
        counts["stuck"] += stuck
        counts["episodes"] += 1
    return counts


def table(sweep: str, split: str, out_dir: str | None = None) -> str:
    spec = load_sweep(sweep)
    out = Path(out_dir or spec.output_dir)
    rows = []
    for arm in spec.arms:
        for model, label in arm.report.items():
            total: Counter = Counter()
            seeds = []
            for seed in spec.seeds_of(arm):
                run = run_dir_of(out, arm.name, seed)
                if finished(run) and (run / RunLayout.eval_units(model, split)).is_file():
                    total += outcomes(run, model, split)
                    seeds.append(seed)
            if seeds:
                rows.append([label or f"{arm.name}/{model}", ",".join(map(str, seeds)), total["episodes"],
                             *(total[c] for c in CATEGORIES), total["stuck"]])
    header = ["row", "seeds", "episodes", *CATEGORIES, "stuck (one refused action ≥3×)"]
    return markdown_table(header, rows, "ll" + "r" * (len(header) - 2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep", help="the sweep file, e.g. experiments/miniature2.yaml")
    parser.add_argument("--split", default="unseen")
    parser.add_argument("--out", help="folder of the sweep's runs (default: the file's output_dir)")
    args = parser.parse_args(argv)
    print(table(args.sweep, args.split, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
