"""experiments/twc_outcomes.py: how twc episodes end, on five real evaluated episodes.

tests/data/twc_eval_units.jsonl holds five eval units (one per outcome) copied from the 8-epoch SFT agent's seen-split
evaluation of issue 15 (runs/miniature2-epochs-1obj/sft-e8/seed0/eval/sft/seen.units.jsonl).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))

import twc_outcomes  # noqa: E402

UNITS = Path(__file__).resolve().parents[1] / "data" / "twc_eval_units.jsonl"


def _units() -> list[dict]:
    return [json.loads(line) for line in UNITS.read_text().splitlines()]


def test_each_real_episode_gets_its_category():
    got = {u["unit"].rsplit(":", 1)[1]: twc_outcomes.classify(u["data"]["trajectory"]) for u in _units()}
    assert got == {"950": ("never placed, object taken", True), "951": ("solved", False),
                   "952": ("wrong place", True), "955": ("wrong place", False), "964": ("never placed", True)}


def test_table_sums_a_rows_finished_seeds_and_leaves_unfinished_ones_out(tmp_path):
    sweep = tmp_path / "exp.yaml"
    sweep.write_text(yaml.safe_dump({"name": "t", "output_dir": str(tmp_path / "out"), "seeds": [0, 1, 2],
                                     "arms": [{"name": "a", "recipe": "smoke", "report": {"sft": "SFT"}}]}))
    for seed, done in ((0, True), (1, True), (2, False)):
        run = tmp_path / "out" / "a" / f"seed{seed}"
        (run / "eval" / "sft").mkdir(parents=True)
        shutil.copy(UNITS, run / "eval" / "sft" / "seen.units.jsonl")
        if done:
            (run / "metrics.json").write_text("{}")
            (run / "state.json").write_text(json.dumps({"done": {"eval": {}}}))
    rows = twc_outcomes.table(str(sweep), "seen").splitlines()
    assert rows[0].startswith("| row | seeds | episodes | solved | wrong place |")
    assert rows[2] == "| SFT | 0,1 | 10 | 2 | 4 | 2 | 2 | 6 |"
    assert twc_outcomes.table(str(sweep), "unseen").count("\n") == 1  # no row without that split's units
