"""At a deliberated step, did the expert's candidate roll out best? Counted from a sweep's synthesis units.

SAND's synthesis (and the grounded synthesizer, its upper bound) must end on the expert's action. Where another
candidate's rollout did better than the expert's, the thought has to argue past its own evidence; a reading of the
v2 grounded arms' loss was that they teach exactly that. This counts how often it happens:

    python experiments/expert_vs_rollouts.py experiments/table1-cpu-v2.yaml --out docs/results/table1-cpu-v2

For every arm whose units are deliberations and every seed with a ``synth/iter1`` unit log, each deliberation
attempt (a kept record or a failed synthesis: both had their candidates rolled out and critiqued) is one of:

- **expert best**: the expert's rollout reward is above every other candidate's;
- **tied**: the best other candidate's equals it;
- **expert beaten**: another candidate's rollout ended better;
- **no expert rollout**: the expert's candidate has no critique (its rollout was not made or failed).

A unit log stopped part way (a run not finished) is counted as far as it goes.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from sand_framework.report.tables import markdown_table
from sand_framework.store import RunLayout, UnitLog
from sand_framework.sweep.runner import run_dir_of
from sand_framework.sweep.spec import load_sweep

CATEGORIES = ("expert best", "tied", "expert beaten", "no expert rollout")


def classify(record: dict) -> str:
    """The category of one deliberation record (a unit's ``records`` or ``failed`` entry)."""
    expert = {c["action"] for c in record.get("candidates", []) if c.get("is_expert")}
    rewards = [(c["candidate"] in expert, c.get("rollout_reward")) for c in record.get("critiques", [])]
    mine = [r for is_expert, r in rewards if is_expert and r is not None]
    others = [r for is_expert, r in rewards if not is_expert and r is not None]
    if not mine:
        return "no expert rollout"
    best_other = max(others, default=float("-inf"))
    if mine[0] > best_other:
        return "expert best"
    return "tied" if mine[0] == best_other else "expert beaten"


def counts(run: Path, iteration: int = 1) -> Counter:
    """The categories of every deliberation attempt of ``run``'s ``synth/iter<iteration>`` units."""
    out: Counter = Counter()
    log = run / RunLayout.synthesis_units(iteration)
    if not log.is_file():
        return out
    for unit in UnitLog(log).values():
        for record in [*unit.get("records", []), *unit.get("failed", [])]:
            out[classify(record)] += 1
            out["attempts"] += 1
    return out


def table(sweep: str, out_dir: str | None = None) -> str:
    spec = load_sweep(sweep)
    out = Path(out_dir or spec.output_dir)
    rows = []
    for arm in spec.arms:
        for seed in spec.seeds_of(arm):
            c = counts(run_dir_of(out, arm.name, seed))
            if c["attempts"]:
                rows.append([arm.name, seed, c["attempts"], *(c[k] for k in CATEGORIES)])
    header = ["arm", "seed", "deliberation attempts", *CATEGORIES]
    return markdown_table(header, rows, "l" + "r" * (len(header) - 1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep", help="the sweep file, e.g. experiments/table1-cpu-v2.yaml")
    parser.add_argument("--out", help="folder of the sweep's runs (default: the file's output_dir)")
    args = parser.parse_args(argv)
    print(table(args.sweep, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
