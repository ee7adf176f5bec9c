"""`sand sweep`: arms × seeds as resumable runs, shared SFT starts, the SFT control, mean ± std tables.

Runs a real (tiny) sweep through the CLI: the smoke recipe as the SAND arm, an
SFT-control arm that reuses the SAND arm's expert data and SFT weights, and a
base-model arm evaluated once.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sand_framework.errors import RecipeError, RunDirError

SAND = [sys.executable, "-m", "sand_framework.cli.main"]
SMOKE = ["data.limit=2", "eval.limit=1", "eval.batch_size=1", "eval.splits=[unseen]"]


def sand(*args, check=True):
    proc = subprocess.run([*SAND, *args], capture_output=True, text=True, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"sand {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def write_sweep(folder: Path, arms: list[dict], seeds=(0, 1)) -> Path:
    path = folder / "sweep.yaml"
    path.write_text(yaml.safe_dump({"name": "tiny", "output_dir": str(folder / "out"), "seeds": list(seeds),
                                    "arms": arms}))
    return path


ARMS = [
    {"name": "sand", "recipe": "smoke", "overrides": SMOKE, "report": {"sft": "SFT", "final": "SAND"}},
    {"name": "control", "recipe": "smoke", "overrides": [*SMOKE, "sampler=none"], "reuse": "sand",
     "report": {"final": "SFT control"}},
    {"name": "base", "recipe": "smoke", "overrides": [*SMOKE, "run.iterations=0", "eval.models=[base]"],
     "reuse": "sand", "seeds": [0], "report": {"base": "base"}},
]


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sweep")
    path = write_sweep(folder, ARMS)
    proc = sand("sweep", str(path))
    return folder / "out", path, proc


def test_sweep_runs_every_arm_and_seed(sweep):
    out, _, proc = sweep
    for run in ("sand/seed0", "sand/seed1", "control/seed0", "control/seed1", "base/seed0"):
        assert (out / run / "metrics.json").is_file(), run
    assert not (out / "base" / "seed1").exists()
    assert "results:" in proc.stdout and "SFT control" in (out / "results.md").read_text()


def test_reused_stages_are_the_same_weights_and_data(sweep):
    out, _, _ = sweep
    for seed in (0, 1):
        sand_run, control = out / "sand" / f"seed{seed}", out / "control" / f"seed{seed}"
        assert digest(sand_run / "weights" / "iter0" / "final") == digest(control / "weights" / "iter0" / "final")
        state = json.loads((control / "state.json").read_text())["done"]
        assert state["train/iter0"]["reused_from"] == str(sand_run)
        assert state["train/iter0"]["weights"].startswith(str(control.resolve()))  # its own copy, not the source's
        metrics = json.loads((control / "metrics.json").read_text())
        assert metrics["eval"]["final"]["unseen"]["tasks"] == 1
    # different seeds give different SFT starts: the seed reaches the trainer
    assert digest(out / "sand/seed0/weights/iter0/final") != digest(out / "sand/seed1/weights/iter0/final")


def test_sft_control_deliberates_nothing_and_calls_no_model(sweep):
    out, _, _ = sweep
    synth = json.loads((out / "control/seed0/metrics.json").read_text())["synthesis"]["iter1"]
    assert synth["deliberated"] == 0 and synth["backend_calls"] == 0 and synth["steps"] > 0
    sand_synth = json.loads((out / "sand/seed0/metrics.json").read_text())["synthesis"]["iter1"]
    assert sand_synth["backend_calls"] > 0 and sand_synth["seconds"] > 0


def test_results_table_has_mean_and_std_over_seeds(sweep):
    out, _, _ = sweep
    results = json.loads((out / "results.json").read_text())
    rows = {(r["label"], r["split"]): r for r in results["rows"]}
    assert set(rows) == {("SFT", "unseen"), ("SAND", "unseen"), ("SFT control", "unseen"), ("base", "unseen")}
    reward = rows[("SAND", "unseen")]["stats"]["avg_reward"]
    assert reward["n"] == 2 and reward["std"] is not None and len(reward["values"]) == 2
    assert rows[("base", "unseen")]["stats"]["avg_reward"]["n"] == 1
    synth = {s["arm"]: s for s in results["synthesis"]}
    assert synth["sand"]["stats"]["backend_calls"]["n"] == 2
    assert synth["sand"]["stats"]["wall_seconds"]["n"] == 2 and synth["sand"]["stats"]["wall_seconds"]["mean"] > 0
    assert not results["missing"]


def test_second_sweep_skips_finished_runs(sweep):
    out, path, _ = sweep
    before = digest(out / "sand")
    proc = sand("sweep", str(path), "--seed", "1")
    after = digest(out / "sand")
    assert {k: v for k, v in after.items() if "sweep_wall_seconds" not in k} == \
        {k: v for k, v in before.items() if "sweep_wall_seconds" not in k}
    assert "results:" in proc.stdout


def test_reuse_refuses_a_recipe_whose_sft_inputs_differ(sweep, tmp_path):
    from sand_framework.engine.reuse import reuse_stages
    from sand_framework.engine.runner import create, reopen

    out, _, _ = sweep
    recipe, _, _, rd = create("smoke", [*SMOKE, "trainer.learning_rate=0.1"], run_dir=str(tmp_path / "other"))
    source_recipe = reopen(out / "sand" / "seed0")[0]
    with pytest.raises(RunDirError, match=r"train/iter0.*trainer\.learning_rate"):
        reuse_stages(rd, recipe, out / "sand" / "seed0", source_recipe, ["expert", "train/iter0"])
    assert not rd.stage_done("train/iter0")
    # the expert stage does not depend on the trainer: it was reused before the refusal
    assert rd.stage_done("expert")


def test_a_longer_run_adopts_finished_iterations_and_computes_only_the_new_one(sweep, tmp_path):
    """SAND iteration 2 as its own arm: iteration 1 is the SAND arm's, bit for bit; iteration 2 runs here."""
    from sand_framework.engine.reuse import reuse_stages
    from sand_framework.engine.runner import create, reopen

    out, _, _ = sweep
    source = out / "sand" / "seed0"
    stages = ["expert", "train/iter0", "synth/iter1", "train/iter1"]
    recipe, _, _, rd = create("smoke", [*SMOKE, "run.iterations=2", "eval.models=[final]"],
                              run_dir=str(tmp_path / "iter2"))
    assert reuse_stages(rd, recipe, source, reopen(source)[0], stages) == stages
    sand("run", "--resume", str(rd.path))
    state = json.loads((rd.path / "state.json").read_text())["done"]
    assert all(state[s]["reused_from"] == str(source) for s in stages)
    assert "reused_from" not in state["synth/iter2"] and "reused_from" not in state["train/iter2"]
    assert digest(rd.path / "weights" / "iter1" / "final") == digest(source / "weights" / "iter1" / "final")
    assert (rd.path / "iter1" / "deliberation.sharegpt.json").read_bytes() == \
        (source / "iter1" / "deliberation.sharegpt.json").read_bytes()
    assert digest(rd.path / "weights" / "iter2" / "final") != digest(source / "weights" / "iter1" / "final")
    metrics = json.loads((rd.path / "metrics.json").read_text())
    assert metrics["weights"]["final"].endswith("iter2/final") and metrics["synthesis"]["iter2"]["steps"] > 0


def test_reuse_refuses_iterations_made_with_a_different_synthesis_slot(sweep, tmp_path):
    from sand_framework.engine.reuse import reuse_stages
    from sand_framework.engine.runner import create, reopen

    out, _, _ = sweep
    source = out / "sand" / "seed0"
    recipe, _, _, rd = create("smoke", [*SMOKE, "run.iterations=2", "critic.max_new_tokens=25"],
                              run_dir=str(tmp_path / "other-critic"))
    with pytest.raises(RunDirError, match=r"synth/iter1.*critic\.max_new_tokens"):
        reuse_stages(rd, recipe, source, reopen(source)[0], ["expert", "train/iter0", "synth/iter1"])
    assert rd.stage_done("train/iter0") and not rd.stage_done("synth/iter1")
    with pytest.raises(RunDirError, match="cannot be reused.*synth/iter<K>"):
        reuse_stages(rd, recipe, source, reopen(source)[0], ["eval"])


def test_bad_sweep_files_report_every_problem(tmp_path):
    from sand_framework.sweep import load_sweep

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"name": "x", "seeds": "zero", "colour": 1, "arms": [
        {"name": "a", "recipe": "smoke", "reuse": "b"},
        {"name": "b"},
        {"name": "a", "recipe": "smoke", "report": 3},
    ]}))
    with pytest.raises(RecipeError) as err:
        load_sweep(path)
    text = str(err.value)
    for needle in ("seeds", "colour", "arms[1].recipe: required", "arms[2].report"):
        assert needle in text, needle
    proc = sand("sweep", str(path), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_plan_validates_every_arm_without_running(tmp_path):
    path = write_sweep(tmp_path, [{"name": "a", "recipe": "smoke", "overrides": ["sampler.n=0"]}], seeds=(0,))
    proc = sand("sweep", str(path), "--plan", check=False)
    assert proc.returncode == 2 and "arm a seed 0" in proc.stderr and "sampler" in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["miniature", "miniature-gpu"])
def test_shipped_experiments_validate(name):
    """Every arm × seed of the shipped experiments (CPU and the GPU-sized one) is a valid recipe here."""
    repo = Path(__file__).resolve().parent.parent
    proc = sand("sweep", str(repo / "experiments" / f"{name}.yaml"), "--plan")
    runs = json.loads(proc.stdout)
    arms = {"sand", "sft-control", "wo-eac", "wo-sas", "base"} | ({"sand-iter2", "sft-control-iter2"}
                                                                  if name == "miniature" else set())
    assert {r["arm"] for r in runs} == arms
    assert len(runs) == (len(arms) - 1) * 3 + 1


def test_seed_and_arm_filters_touch_only_the_selected_runs(tmp_path):
    """`--seed 1 --arm b` makes exactly one run directory (runs fail fast here: the model does not exist)."""
    arms = [{"name": "a", "recipe": "smoke", "overrides": ["model.base=/nonexistent"]},
            {"name": "b", "recipe": "smoke", "overrides": ["model.base=/nonexistent"]}]
    path = write_sweep(tmp_path, arms, seeds=(0, 1, 2))
    proc = sand("sweep", str(path), "--seed", "1", "--arm", "b", check=False)
    assert proc.returncode == 1 and "b/seed1" in proc.stderr
    made = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").glob("*/seed*"))
    assert made == ["b/seed1"]
