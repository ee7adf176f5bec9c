"""`sand sweep`: arms × seeds as resumable runs, shared SFT starts, the SFT control, mean ± std tables.

Runs a real (tiny) sweep through the CLI: the smoke recipe as the SAND arm, an
SFT-control arm that reuses the SAND arm's expert data and SFT weights, and a
base-model arm evaluated once.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sand_cli
import yaml

from sand_framework.errors import RecipeError, RunDirError
from sand_framework.store import RunDir

SAND = sand_cli.SAND
SMOKE = ["data.limit=2", "eval.limit=1", "eval.batch_size=1", "eval.splits=[unseen]"]


def sand(*args, check=True):
    return sand_cli.sand(*args, check=check, timeout=900)


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
        assert RunDir(control).stage_result("train/iter0")["weights"].startswith(str(control))  # its own copy
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


def uncaught_tracebacks(err: str) -> int:
    """Tracebacks on stderr besides those Python prints for an exception a finalizer raised while the run stopped
    ("Exception ignored in": py4j's and TextWorld-Express's ``__del__``, which the run's stop may interrupt)."""
    return err.count("Traceback") - err.count("Exception ignored in")


def test_sigterm_stops_the_sweep_and_its_run_and_the_printed_command_resumes(tmp_path):
    """SIGTERM to `sand sweep` (what kill, timeout and schedulers send) while its run trains: the run stops
    cleanly (its own line), the sweep waits for it, records its wall seconds, starts no further run and exits 143
    with one line naming the arm, the seed and the command that continues; no process is left behind. That
    command, rerun (for seed 0 only, to keep the test short), finishes the stopped run."""
    from run_control import PAUSE_PLUGIN, assert_no_orphans, held, state, stop_when

    from sand_framework.sweep.runner import wall_seconds

    path = write_sweep(tmp_path, [{**ARMS[0], "overrides": [*SMOKE, "trainer.save_steps=1"]}])
    out, run = tmp_path / "out", tmp_path / "out" / "sand" / "seed0"
    marker = tmp_path / "held"  # the run is held at its first checkpoint (any machine speed), then stopped
    env = {**os.environ, "SAND_PAUSE_AT": "train/iter0#1", "SAND_PAUSE_FILE": str(marker)}
    rc, err, children = stop_when([*SAND, "sweep", str(path), "--plugins-dir", str(PAUSE_PLUGIN)], run,
                                  held(marker), tmp_path / "a.log", env=env)
    assert rc == 143, err[-3000:]
    assert "stopped by SIGTERM during train/iter0: every finished unit is kept" in err  # the run's clean stop
    said = [line for line in err.splitlines() if line.startswith("sand sweep stopped by SIGTERM")]
    assert len(said) == 1 and "during arm sand seed 0 (its run stopped cleanly" in said[0], err[-3000:]
    assert said[0].endswith(f"continue with `sand sweep {path} --plugins-dir {PAUSE_PLUGIN}`")  # its own command
    assert err.rstrip().endswith(said[0])
    assert uncaught_tracebacks(err) == 0
    assert children, "the sweep's run (and the processes it started) to check"
    assert_no_orphans(children)
    first = wall_seconds(run)
    assert first and first > 0 and "train/iter0" not in state(run)["done"]
    assert not (out / "sand" / "seed1").exists(), "no further run was started"
    proc = sand(*said[0].rsplit("`sand ", 1)[1].rstrip("`").split(), "--seed", "0")
    assert "results:" in proc.stdout
    assert (run / "metrics.json").is_file() and set(state(run)["done"]) == set(state(run)["fingerprints"])
    assert wall_seconds(run) > first and not (out / "sand" / "seed1").exists()


def test_ctrl_c_reaches_the_sweeps_run_once(tmp_path):
    """Ctrl-C in a terminal sends SIGINT to the whole foreground process group: the run, in a group of its own,
    gets it once (passed on by the sweep), so its stop is the clean one, and the sweep exits 130."""
    from run_control import assert_no_orphans, descendants, started

    path = write_sweep(tmp_path, [ARMS[0]], seeds=(0,))
    run = tmp_path / "out" / "sand" / "seed0"
    with open(tmp_path / "b.log", "w+") as log:
        proc = subprocess.Popen([*SAND, "sweep", str(path)], stdout=subprocess.DEVNULL, stderr=log, process_group=0)
        deadline = time.time() + 300
        while not started("expert")(run):
            assert proc.poll() is None and time.time() < deadline, (tmp_path / "b.log").read_text()[-3000:]
            time.sleep(0.02)
        children = descendants(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal does
        rc = proc.wait(timeout=120)
        log.seek(0)
        err = log.read()
    assert rc == 130, err[-3000:]
    run_said = [line for line in err.splitlines() if line.startswith("stopped by SIGINT during ")]
    assert len(run_said) == 1, err[-3000:]  # the run's line, once: one clean stop
    assert "during arm sand seed 0 (its run stopped cleanly" in err and uncaught_tracebacks(err) == 0
    assert_no_orphans(children)


def test_reuse_refuses_a_recipe_whose_sft_inputs_differ(sweep, tmp_path):
    from sand_framework.app.reuse import reuse_stages
    from sand_framework.app.runner import create, reopen

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
    from sand_framework.app.reuse import reuse_stages
    from sand_framework.app.runner import create, reopen

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
    from sand_framework.app.reuse import reuse_stages
    from sand_framework.app.runner import create, reopen

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


V1_ARMS = {"sand", "sft-control", "wo-eac", "wo-sas", "base"}
TABLE1_ARMS = {"sft", "sft-control", "sand", "rft", "eto", "ipr", "bon-oracle", "bon-judge"}
SHIPPED = {  # experiment file -> (its arms, its runs)
    "miniature": (V1_ARMS | {"sand-iter2", "sft-control-iter2"}, 6 * 3 + 1),
    "miniature-gpu": (V1_ARMS, 4 * 3 + 1),
    "miniature2-epochs": ({"sft-e4", "sft-e8"}, 2),
    "miniature2": ({"sand", "base", "sft-control", "grounded", "wo-eac"}, 4 * 3 + 1),
    "miniature2-retrain": ({"sand", "sft-control", "grounded", "seen-sft", "seen-sand", "seen-control",
                            "retrain-sand", "retrain-grounded", "retrain-control"}, 9),
    "table1-cpu": (TABLE1_ARMS, 8 * 3),
    "table1-cpu-v2": ({"sft", "sft-control", "eto", "ipr", "grounded", "grounded-keep", "sand"}, 7 * 3),
    "table1-gpu": (TABLE1_ARMS, 8),
}


def test_every_shipped_experiment_is_checked():
    repo = Path(__file__).resolve().parents[2]
    assert {p.stem for p in (repo / "experiments").glob("*.yaml")} == set(SHIPPED)


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_experiments_validate(name):
    """Every arm × seed of the shipped experiments (CPU and the GPU-sized one) is a valid recipe, checked here
    (``--for-another-machine``: the GPU arms' vLLM and data files need not be on this machine)."""
    repo = Path(__file__).resolve().parents[2]
    proc = sand("sweep", str(repo / "experiments" / f"{name}.yaml"), "--plan", "--for-another-machine")
    runs = json.loads(proc.stdout)
    arms, n_runs = SHIPPED[name]
    assert {r["arm"] for r in runs} == arms
    assert len(runs) == n_runs


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_experiments_reuse_only_stages_their_arms_can_adopt(name, registries):
    """Every `reuse` of a shipped experiment passes the check `sand sweep` makes when it prepares the run (the
    settings each adopted stage depends on are equal in both recipes), so no arm fails after its source arm ran."""
    from sand_framework.app.reuse import stage_inputs
    from sand_framework.config import load_recipe, validate
    from sand_framework.sweep import load_sweep
    from sand_framework.sweep.spec import arm_overrides

    spec = load_sweep(Path(__file__).resolve().parents[2] / "experiments" / f"{name}.yaml")

    def recipe(arm, seed):
        return validate(load_recipe(spec.recipe_path(arm), arm_overrides(arm, seed))[0], registries)

    for arm in (a for a in spec.arms if a.reuse):
        seed = spec.seeds_of(arm)[0]
        mine, theirs = recipe(arm, seed), recipe(spec.arm(arm.reuse), seed)
        for stage in arm.reuse_stages:
            assert stage_inputs(mine, stage) == stage_inputs(theirs, stage), (arm.name, stage)


def test_seed_and_arm_filters_touch_only_the_selected_runs(tmp_path):
    """`--seed 1 --arm b` makes exactly one run directory (runs fail fast here: the model does not exist)."""
    arms = [{"name": "a", "recipe": "smoke", "overrides": ["model.base=/nonexistent"]},
            {"name": "b", "recipe": "smoke", "overrides": ["model.base=/nonexistent"]}]
    path = write_sweep(tmp_path, arms, seeds=(0, 1, 2))
    proc = sand("sweep", str(path), "--seed", "1", "--arm", "b", check=False)
    assert proc.returncode == 1 and "b/seed1" in proc.stderr
    made = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").glob("*/seed*"))
    assert made == ["b/seed1"]


# -- paired comparisons and the figure, on hand-made finished runs (no model runs) ------------------------------

GAMES = [f"g{i}" for i in range(12)]


def fake_run(out: Path, arm: str, seed: int, evals: dict[str, dict[str, list[bool]]], done: bool = True) -> Path:
    """A finished-looking run directory: per model and split, one eval unit per game, metrics.json from them."""
    from sand_framework.metrics import aggregate_results, task_results_from_units
    from sand_framework.store import RunDir

    rd = RunDir(out / arm / f"seed{seed}")
    metrics: dict = {"eval": {}}
    for model, splits in evals.items():
        for split, wins in splits.items():
            log = rd.units("eval", model, f"{split}.units.jsonl")
            for game, ok in zip(GAMES, wins):
                log.append(game, {"trajectory": {"task_id": game, "env": "toy", "instruction": "", "task": "",
                                                 "steps": [{"thought": "", "action": "go"}],
                                                 "reward": float(ok), "success": ok},
                                  "prompt_tokens": 10, "completion_tokens": 2})
            results = task_results_from_units(log.values())
            metrics["eval"].setdefault(model, {})[split] = aggregate_results(results)
    if done:
        rd.write_json("metrics.json", metrics)
        rd.write_json("state.json", {"done": {"eval": {"models": list(evals)}}})
    return rd.path


def wins(*games: int) -> list[bool]:
    return [i in games for i in range(len(GAMES))]


SFT_WINS = wins(0, 1, 2, 3, 4, 5)                     # 6 of 12
SAND_WINS = wins(0, 1, 2, 3, 4, 5, 6, 7)              # 8 of 12: SFT's games and two more
CONTROL_WINS = wins(0, 1, 2, 3, 4, 5, 8, 9, 10)       # 9 of 12: SFT's games and three others

COMPARISONS = [
    {"question": "Does SAND beat step-matched SFT?", "a": "sand/final", "b": "control/final"},
    {"question": "Does SAND beat its SFT start?", "a": "sand/final", "b": "sand/sft"},
    {"question": "Does the control beat the base model?", "a": "control/final", "b": "base/base"},
]


@pytest.fixture
def finished_sweep(tmp_path):
    """The miniature's per-seed numbers (SFT 6, SAND 8, control 9 of 12 in every seed; base 0, one seed)."""
    arms = [{"name": "sand", "recipe": "smoke", "report": {"sft": "SFT", "final": "SAND"}},
            {"name": "control", "recipe": "smoke", "reuse": "sand", "report": {"final": "SFT control"}},
            {"name": "base", "recipe": "smoke", "reuse": "sand", "seeds": [0], "report": {"base": "base"}}]
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"name": "tiny", "output_dir": str(tmp_path / "out"), "seeds": [0, 1, 2],
                                    "arms": arms, "comparisons": COMPARISONS}))
    out = tmp_path / "out"
    for seed in (0, 1, 2):
        fake_run(out, "sand", seed, {"sft": {"unseen": SFT_WINS}, "final": {"unseen": SAND_WINS}})
        fake_run(out, "control", seed, {"final": {"unseen": CONTROL_WINS}})
    fake_run(out, "base", 0, {"base": {"unseen": wins()}})
    return path, out


@pytest.mark.parametrize("wins_, losses, p", [
    (6, 0, 0.03125), (0, 6, 0.03125), (9, 0, 0.00390625), (6, 9, 9949 / 16384), (9, 6, 9949 / 16384),
    (2, 0, 0.5), (2, 3, 1.0), (0, 0, 1.0), (5, 5, 1.0), (27, 0, 2 / 2 ** 27)])
def test_exact_two_sided_binomial_p(wins_, losses, p):
    from sand_framework.sweep.paired import binomial_two_sided

    assert binomial_two_sided(wins_, losses) == pytest.approx(p, rel=1e-12)


def test_wilson_interval_stays_in_range_at_zero_and_one():
    from sand_framework.sweep.paired import wilson_interval

    lo, hi = wilson_interval(0, 12)
    assert lo == pytest.approx(0, abs=1e-12) and hi == pytest.approx(0.2425, abs=1e-4)
    lo, hi = wilson_interval(12, 12)
    assert hi == pytest.approx(1, abs=1e-12) and lo == pytest.approx(0.7575, abs=1e-4)
    lo, hi = wilson_interval(6, 12)
    assert (lo, hi) == pytest.approx((0.2538, 0.7462), abs=1e-4)
    assert wilson_interval(0, 0) is None


def test_compare_pairs_seed_by_seed_and_the_single_seed_arm_with_every_seed(finished_sweep):
    from sand_framework.sweep import compare, load_sweep

    path, out = finished_sweep
    spec = load_sweep(path)
    step, start, base = compare(spec, out, ["unseen"])

    assert step.seed_pairs == [(0, 0), (1, 1), (2, 2)]
    assert (step.pairs, step.a_only, step.b_only, step.ties) == (36, 6, 9, 21)
    assert step.mcnemar_p == pytest.approx(9949 / 16384)  # 0.607
    assert (step.games, step.games_a_better, step.games_b_better, step.games_tied) == (12, 2, 3, 7)
    assert step.sign_p == 1.0
    assert step.a_success == {0: 66.67, 1: 66.67, 2: 66.67} and step.b_success == {0: 75.0, 1: 75.0, 2: 75.0}
    assert step.verdict.startswith("no detectable difference (p=1,")

    # 6 wins, 0 losses over (seed, game) pairs, but they are 2 games replayed by 3 seeds
    assert (start.pairs, start.a_only, start.b_only) == (36, 6, 0) and start.mcnemar_p == 0.03125
    assert (start.games_a_better, start.games_b_better) == (2, 0) and start.sign_p == 0.5
    assert start.verdict.startswith("no detectable difference (p=0.5") and "McNemar" in start.verdict

    assert base.seed_pairs == [(0, 0), (1, 0), (2, 0)]
    assert (base.pairs, base.a_only, base.b_only) == (36, 27, 0)
    assert (base.games_a_better, base.games_b_better) == (9, 0) and base.sign_p == 0.00390625
    assert base.a_success == {0: 75.0, 1: 75.0, 2: 75.0} and base.b_success == {0: 0.0}
    assert base.verdict == "SFT control better (p=0.00391, sign test over 12 games)"


def test_adjusted_p_values_bonferroni_and_holm():
    from sand_framework.sweep.paired import adjusted_p_values

    ps = [0.01, 0.04, 0.03, 0.005]
    assert adjusted_p_values(ps, "none") == ps
    assert adjusted_p_values(ps, "bonferroni") == pytest.approx([0.04, 0.16, 0.12, 0.02])
    # Holm: sorted 0.005 x 4, 0.01 x 3, 0.03 x 2, 0.04 x 1 (raised to the running maximum 0.06)
    assert adjusted_p_values(ps, "holm") == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert adjusted_p_values([0.5, 0.6], "bonferroni") == [1.0, 1.0]


def test_a_declared_correction_decides_the_verdicts_and_the_summary_says_each_answer(finished_sweep):
    """With `correction: bonferroni` and alpha 0.01, the control's 9 games to 0 over the base model (p = 0.0039)
    no longer count as better once adjusted for the 3 questions (0.0117): the verdict says both and what the
    correction turned; the summary table gives each question's answer in one row."""
    from sand_framework.sweep import compare, comparisons_markdown, load_sweep

    path, out = finished_sweep
    spec = load_sweep(path)
    assert compare(spec, out, ["unseen"])[2].verdict.startswith("SFT control better")
    data = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**data, "correction": "bonferroni", "alpha": 0.01}))
    spec = load_sweep(path)
    step, start, base = compare(spec, out, ["unseen"])
    assert [r.adjusted_p for r in (step, start, base)] == pytest.approx([1.0, 1.0, 3 * 0.00390625])
    assert base.verdict == ("no detectable difference (p=0.00391, bonferroni-adjusted for 3 questions p=0.0117, "
                            "sign test over 12 games); without the correction for 3 questions: SFT control better")
    text = comparisons_markdown([step, start, base], spec.alpha)
    assert "each p bonferroni-adjusted for the 3 questions asked" in text
    assert ("| Does the control beat the base model? | unseen | 0–0, 1–0, 2–0 | 9 / 0 / 3 | 0.00391 | 0.0117 "
            "| no detectable difference |") in text
    path.write_text(yaml.safe_dump({**data, "correction": "holm", "alpha": 0.05}))
    assert compare(load_sweep(path), out, ["unseen"])[2].verdict.startswith("SFT control better (p=0.00391, holm")
    path.write_text(yaml.safe_dump({**data, "correction": "sidak"}))
    with pytest.raises(RecipeError, match="correction"):
        load_sweep(path)


def test_compare_leaves_out_unfinished_runs_and_averages_differing_seeds_per_game(finished_sweep):
    from sand_framework.sweep import compare, load_sweep

    path, out = finished_sweep
    (out / "control" / "seed2" / "metrics.json").unlink()  # seed 2 of the control: interrupted in evaluation
    fake_run(out, "sand", 1, {"final": {"unseen": wins(0, 1, 2, 3, 4, 5, 8, 9, 10, 11)}})  # re-recorded, last wins
    step = compare(load_sweep(path), out, ["unseen"])[0]
    assert step.seed_pairs == [(0, 0), (1, 1)] and step.pairs == 24
    # game 11: SAND won it in seed 1 only, the control never (mean 0.5 vs 0); games 6, 7: SAND won them in
    # seed 0 only (0.5 vs 0); games 8-10: the control always, SAND in seed 1 (0.5 vs 1)
    assert (step.games_a_better, step.games_b_better, step.games_tied) == (3, 3, 6)
    assert step.a_only == 3 and step.b_only == 3


def test_results_md_answers_each_question_and_the_figure_has_every_seed(finished_sweep):
    from sand_framework.report.figures import SEED_GID, success_by_seed
    from sand_framework.sweep import collect, load_sweep, write_results
    from sand_framework.sweep.aggregate import FIGURE, figure_rows

    path, out = finished_sweep
    spec = load_sweep(path)
    md = write_results(spec, out).read_text()
    for c in COMPARISONS:
        assert f"### {c['question']}" in md
    assert "**no detectable difference (p=1, sign test over 12 games)**" in md
    assert "**SFT control better (p=0.00391, sign test over 12 games)**" in md
    assert f"![success per seed]({FIGURE})" in md and (out / FIGURE).stat().st_size > 0
    assert "| SAND | 8 / 12 | 8 / 12 | 8 / 12 |" in md and "| base | 0 / 12 | – | – |" in md  # solved per seed
    assert "| Does SAND beat its SFT start? | unseen | 0–0, 1–1, 2–2 | 2 / 0 / 10 | 0.5 | no detectable difference |" \
        in md  # the summary: one row per question

    results = json.loads((out / "results.json").read_text())
    assert [c["question"] for c in results["comparisons"]] == [c["question"] for c in COMPARISONS]
    assert results["comparisons"][0]["ties"] == 21 and results["figure"] == FIGURE
    rows = {r["label"]: r for r in results["rows"]}
    assert rows["base"]["games"] == 12 and rows["base"]["success_ci95"] == pytest.approx([0.0, 24.25], abs=0.01)
    assert rows["SAND"]["stats"]["success_rate"]["seeds"] == [0, 1, 2]

    fig = success_by_seed(figure_rows(collect(spec, out)))
    points = {c.get_gid()[len(SEED_GID):]: c.get_offsets()[:, 0].tolist()  # success % runs across
              for ax in fig.axes for c in ax.collections if (c.get_gid() or "").startswith(SEED_GID)}
    assert points == {"unseen:SFT": [50.0] * 3, "unseen:SAND": pytest.approx([66.67] * 3, abs=0.01),
                      "unseen:SFT control": [75.0] * 3, "unseen:base": [0.0]}
    for r in results["rows"]:  # one point per seed the table reports, for every row
        assert len(points[f"{r['split']}:{r['label']}"]) == len(r["seeds"]) == r["stats"]["success_rate"]["n"]


def test_runs_of_one_seed_from_different_sft_starts_are_not_paired(finished_sweep):
    """Seed 1's SAND run recorded another SFT start than seed 1's control (the start was trained again after one
    of them finished): that seed pair is left out of the test and named; the others still pair."""
    from sand_framework.sweep import comparisons_markdown, load_sweep
    from sand_framework.sweep.compare import GameOutcomes, compare_one

    path, out = finished_sweep
    for arm, seed, tensors in (("sand", 0, b"a"), ("control", 0, b"a"), ("sand", 1, b"b"), ("control", 1, b"c")):
        run = out / arm / f"seed{seed}"
        final = run / "weights/iter0/final"
        final.mkdir(parents=True)
        (final / "adapter_model.safetensors").write_bytes(tensors)
        (final / "training_args.bin").write_bytes(run.name.encode() + arm.encode())  # differs: not a tensor file
        _with_stages(run, {"train/iter0": {"weights": "./weights/iter0/final"}})
    spec = load_sweep(path)
    res = compare_one(spec, spec.comparisons[0], "unseen", GameOutcomes(spec, out))
    assert res.seed_pairs == [(0, 0), (2, 2)] and res.other_starts == [(1, 1)]  # seed 2 recorded none: paired
    assert res.pairs == 2 * len(GAMES)
    assert "seed pair(s) 1–1 left out: their two runs come from different SFT starts" in \
        comparisons_markdown([res], spec.alpha)


def _with_stages(run: Path, stages: dict[str, dict], **metrics_keys) -> None:
    """Add finished stages (their state.json results) and metrics.json keys to a fake run."""
    state = json.loads((run / "state.json").read_text())
    state["done"].update(stages)
    (run / "state.json").write_text(json.dumps(state))
    metrics = json.loads((run / "metrics.json").read_text())
    metrics.update(metrics_keys)
    (run / "metrics.json").write_text(json.dumps(metrics))


def test_the_cost_table_sums_the_stages_each_row_comes_from_and_marks_an_oracle_row(tmp_path):
    """Per row: inference tokens per task, and env steps, tokens and seconds of the training data and training of
    every stage its weights come from, adopted ones included; a Best-of-N row with the oracle scorer is marked
    UPPER BOUND even when its label does not say so."""
    from sand_framework.sweep import collect, load_sweep, write_results

    arms = [{"name": "sand", "recipe": "smoke", "report": {"sft": "SFT", "final": "SAND"}},
            {"name": "control", "recipe": "smoke", "reuse": "sand", "report": {"final": "SFT control"}},
            {"name": "bon", "recipe": "smoke", "reuse": "sand", "report": {"sft": "Best-of-5"}}]
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"name": "costs", "output_dir": str(tmp_path / "out"), "seeds": [0, 1],
                                    "arms": arms}))
    out = tmp_path / "out"
    sft = {"weights": "w0", "seconds": 100.0, "trajectories": 12}
    for seed in (0, 1):
        synth = {"method": "sand", "env_steps": 50 + 10 * seed, "backend_completion_tokens": 1000,
                 "backend_prompt_tokens": 5000, "seconds": 30.0, "trajectories": 12}
        run = fake_run(out, "sand", seed, {"sft": {"unseen": SFT_WINS}, "final": {"unseen": SAND_WINS}})
        _with_stages(run, {"train/iter0": sft, "synth/iter1": synth, "train/iter1": {"seconds": 20.0}},
                     synthesis={"iter1": synth}, weights={"base": None, "iter0": "w0", "sft": "w0", "iter1": "w1",
                                                          "final": "w1"})
        control = {"method": "sand", "env_steps": 0, "backend_completion_tokens": 0, "seconds": 1.0}
        run = fake_run(out, "control", seed, {"final": {"unseen": CONTROL_WINS}})
        _with_stages(run, {"train/iter0": {**sft, "reused_from": "x"}, "synth/iter1": control,
                           "train/iter1": {"seconds": 22.0}}, synthesis={"iter1": control})
        run = fake_run(out, "bon", seed, {"sft": {"unseen": CONTROL_WINS}})
        metrics = json.loads((run / "metrics.json").read_text())
        metrics["eval"]["sft"]["unseen"].update(oracle=True, scorer="oracle", prompt_tokens_per_task=50.0)
        (run / "metrics.json").write_text(json.dumps(metrics))
        _with_stages(run, {"train/iter0": {**sft, "reused_from": "x"}})
    data = collect(load_sweep(path), out)
    costs = {c["label"]: {k: v.mean for k, v in c["stats"].items()} for c in data["costs"]}
    assert costs["SFT"] == {"data_env_steps": 0, "data_generated_tokens": 0, "data_prompt_tokens": 0,
                            "data_seconds": 0, "train_seconds": 100, "eval_prompt_tokens/unseen": 10,
                            "eval_completion_tokens/unseen": 2}
    assert costs["SAND"]["data_env_steps"] == 55 and costs["SAND"]["data_generated_tokens"] == 1000
    assert costs["SAND"]["data_seconds"] == 30 and costs["SAND"]["train_seconds"] == 120
    assert costs["SFT control"]["train_seconds"] == 122 and costs["SFT control"]["data_env_steps"] == 0
    oracle = "Best-of-5 [oracle scorer: UPPER BOUND]"
    assert costs[oracle]["eval_prompt_tokens/unseen"] == 50 and costs[oracle]["train_seconds"] == 100
    assert oracle in {r["label"] for r in data["rows"]}
    md = write_results(load_sweep(path), out).read_text()
    assert "## Cost of each row" in md and "| SAND | 2 | 10 ± 0 + 2 ± 0 | 55 ± 7 | 1000 ± 0 | 5000 ± 0 | 30 ± 0 | 120 ± 0 |" in md
    results = json.loads((out / "results.json").read_text())
    assert {c["label"] for c in results["costs"]} == set(costs)
    sand_row = next(c for c in results["costs"] if c["label"] == "SAND")
    assert sand_row["stats"]["data_env_steps"]["values"] == [50.0, 60.0] and sand_row["seeds"] == [0, 1]


def test_each_split_panel_of_the_figure_shows_only_the_rows_evaluated_on_it():
    """An experiment whose arms evaluate different splits drew every row's slot in every panel, empty where the
    row has no value (miniature2-retrain's figure was mostly empty slots)."""
    from sand_framework.report.figures import SeedRow, success_by_seed

    rows = [SeedRow("SFT", "unseen", {0: 25.0}), SeedRow("SAND", "unseen", {0: 12.5}),
            SeedRow("SFT", "seen", {0: 14.6}), SeedRow("retrained", "seen", {0: 16.7}),
            SeedRow("control", "seen", {0: 6.2})]
    fig = success_by_seed(rows)
    ticks = {ax.get_title(): [t.get_text() for t in ax.get_yticklabels()] for ax in fig.axes}
    assert ticks == {"split unseen": ["SFT", "SAND"], "split seen": ["SFT", "retrained", "control"]}
    notes = {ax.get_title(): [t.get_text() for t in ax.texts if "seed" in t.get_text()] for ax in fig.axes}
    assert notes == {"split unseen": ["1 seed"] * 2, "split seen": ["1 seed"] * 3}


def test_sweep_compare_and_table_only_on_the_command_line(finished_sweep):
    path, out = finished_sweep
    proc = sand("sweep", str(path), "--compare")
    assert "### Does SAND beat step-matched SFT?" in proc.stdout and "sign-test p" in proc.stdout
    assert not (out / "results.md").exists()  # --compare writes nothing
    proc = sand("sweep", str(path), "--table-only")
    assert "## Paired comparisons" in proc.stdout and "## Cost of each row" in proc.stdout
    assert (out / "results.md").is_file() and (out / "success_by_arm.png").is_file()


def test_bad_comparisons_are_reported_with_every_problem(tmp_path):
    from sand_framework.sweep import load_sweep

    arms = [{"name": "sand", "recipe": "smoke", "report": {"sft": "SFT", "final": "SAND"}},
            {"name": "base", "recipe": "smoke", "seeds": [0], "report": {"base": "base"}},
            {"name": "late", "recipe": "smoke", "seeds": [7, 8], "report": {"final": "late"}}]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"name": "x", "seeds": [0, 1], "alpha": 1.5, "arms": arms, "comparisons": [
        {"question": "q0", "a": "sand/iter3", "b": "nope/final"},
        {"question": "q1", "a": "sandfinal", "b": "base/base", "colour": 1},
        {"a": "sand/final", "b": "base/base"},
        {"question": "q3", "a": "sand/final", "b": "sand/final"},
        {"question": "q4", "a": "sand/final", "b": "late/final"},
        {"question": "q5", "a": "base/base", "b": "late/final"},  # a single-seed arm pairs with any seeds
    ]}))
    with pytest.raises(RecipeError) as err:
        load_sweep(path)
    problems = err.value.problems
    for needle in ("sweep.alpha", "comparisons[0].a: arm 'sand' does not report model 'iter3'",
                   "comparisons[0].b: no arm 'nope'", "comparisons[1].colour: unknown key",
                   "comparisons[1].a: 'sandfinal' must be ARM/MODEL", "comparisons[2].question: required",
                   "comparisons[3]: a and b are the same row", "comparisons[4]: 'sand/final' (seeds [0, 1]) and "
                   "'late/final' (seeds [7, 8]) share no seed"):
        assert any(needle in p for p in problems), (needle, problems)
    assert not any("comparisons[5]" in p for p in problems)
    assert len(problems) == 8
    proc = sand("sweep", str(path), "--compare", check=False)
    assert proc.returncode == 2 and "nope" in proc.stderr and "Traceback" not in proc.stderr


def test_compare_without_declared_comparisons_says_how_to_add_them(tmp_path):
    path = write_sweep(tmp_path, [{"name": "a", "recipe": "smoke"}], seeds=(0,))
    proc = sand("sweep", str(path), "--compare", check=False)
    assert proc.returncode == 2 and "comparisons" in proc.stderr


def test_every_sweep_file_key_and_sweep_option_is_documented():
    """docs/experiments.md documents every key a sweep file accepts and every `sand sweep` option."""
    import dataclasses

    from sand_framework.cli.sweep import command
    from sand_framework.sweep import ArmSpec, ComparisonSpec, SweepSpec

    doc = (Path(__file__).resolve().parents[2] / "docs" / "experiments.md").read_text()
    keys = [f.name for f in dataclasses.fields(SweepSpec) if f.name not in ("path", "arms", "comparisons")]
    keys += [f"arms[].{f.name}" for f in dataclasses.fields(ArmSpec)]
    keys += [f"comparisons[].{f.name}" for f in dataclasses.fields(ComparisonSpec)]
    assert not [k for k in keys if f"`{k}`" not in doc]
    options = [p.opts for p in command.params if p.opts[0].startswith("-")]
    assert not [o for o in options if not any(opt in doc for opt in o)]


def test_a_report_label_cut_at_a_comma_is_refused_with_the_fix(tmp_path):
    """`{final: upper bound, not SAND}` is two YAML keys; the table would have shown the row as 'upper bound'."""
    from sand_framework.errors import RecipeError
    from sand_framework.sweep.spec import load_sweep

    path = tmp_path / "exp.yaml"
    path.write_text("name: t\narms:\n  - name: a\n    recipe: smoke\n    report: {final: upper bound, not SAND}\n")
    with pytest.raises(RecipeError, match=r"arms\[0\]\.report: 'not SAND' is not a model a run evaluates.*quote"):
        load_sweep(path)
    path.write_text('name: t\narms:\n  - name: a\n    recipe: smoke\n    report: {final: "upper bound, not SAND"}\n')
    assert load_sweep(path).arms[0].report == {"final": "upper bound, not SAND"}


def test_an_arm_that_retrains_from_the_base_model_adopts_the_synthesis_but_not_the_training(sweep, tmp_path):
    """run.train_from decides only where iteration 1's training starts: the synthesis before it (sampled from the
    SFT weights) is the same, so an arm that retrains from the base model reuses it; its training is refused."""
    from sand_framework.app.reuse import reuse_stages
    from sand_framework.app.runner import create, reopen

    out, _, _ = sweep
    source = out / "sand" / "seed0"
    recipe, _, _, rd = create("smoke", [*SMOKE, "run.train_from=base"], run_dir=str(tmp_path / "retrain"))
    stages = ["expert", "train/iter0", "synth/iter1"]
    assert reuse_stages(rd, recipe, source, reopen(source)[0], stages) == stages
    with pytest.raises(RunDirError, match=r"train/iter1.*run\.train_from: 'previous' there, 'base' here"):
        reuse_stages(rd, recipe, source, reopen(source)[0], ["train/iter1"])
    assert not rd.stage_done("train/iter1")


def test_a_repeated_stop_counts_once_a_second_is_passed_on_and_a_third_kills(tmp_path):
    """What docs/experiments.md says of further signals: a stop repeated within REPEAT_S is one stop (``timeout``
    signals the command, then its group), a later one is passed on again, and the next one after that kills the
    run (SIGKILL). The run here counts the SIGTERMs it gets and carries on."""
    import threading

    from sand_framework.sweep.runner import REPEAT_S, SweepStop

    ready, count = tmp_path / "ready", tmp_path / "count"
    child = ("import os, signal, time, pathlib\n"
             f"n = 0\nout = pathlib.Path({str(count)!r})\n"
             "def got(*_):\n    global n\n    n += 1\n    out.write_text(str(n))\n"
             "signal.signal(signal.SIGTERM, got)\n"
             f"pathlib.Path({str(ready)!r}).write_text(str(os.getpid()))\n"
             "while True:\n    time.sleep(0.05)\n")
    stop, rc = SweepStop(), []
    worker = threading.Thread(target=lambda: rc.append(stop.run([sys.executable, "-c", child], os.environ.copy())))
    worker.start()

    def counted(n: int) -> bool:
        deadline = time.time() + 30
        while not (count.exists() and count.read_text() == str(n)) and time.time() < deadline:
            time.sleep(0.05)
        return count.exists() and count.read_text() == str(n)

    try:
        deadline = time.time() + 60
        while not ready.exists() and time.time() < deadline:
            time.sleep(0.05)
        t = time.monotonic()
        stop.received += [(signal.SIGTERM, t), (signal.SIGTERM, t + REPEAT_S / 5)]  # one stop delivered twice
        assert counted(1)
        stop.received.append((signal.SIGTERM, t + 2 * REPEAT_S))
        assert counted(2)
        stop.received.append((signal.SIGTERM, t + 4 * REPEAT_S))
        worker.join(30)
        assert rc == [-signal.SIGKILL] and count.read_text() == "2"
    finally:
        if worker.is_alive() and ready.exists():
            os.kill(int(ready.read_text()), signal.SIGKILL)


def test_export_keeps_the_results_without_weights_and_a_reuse_of_them_is_refused(sweep, tmp_path):
    """`--export DIR`: every finished run without weights/, the same results table read from DIR; an arm that
    would adopt the exported SFT weights is refused naming the missing output, not adopted half."""
    out, path, _ = sweep
    dest = tmp_path / "kept"
    proc = sand("sweep", str(path), "--export", str(dest))
    assert "exported 5 finished run(s)" in proc.stdout
    assert not list(dest.rglob("weights")) and not list(dest.rglob("run.lock"))
    assert (dest / "sand/seed0/eval").is_dir() and (dest / "sand/seed0/metrics.json").is_file()

    def rows(folder):
        return [{k: v for k, v in r.items() if k != "stats"} | {"stats": r["stats"]}
                for r in json.loads((folder / "results.json").read_text())["rows"]]

    assert rows(dest) == rows(out)
    sand("sweep", str(path), "-o", str(dest), "--table-only")
    assert rows(dest) == rows(out)

    import shutil

    shutil.rmtree(dest / "control" / "seed1")  # to be rerun from the exported SFT start of seed 1
    proc = sand("sweep", str(path), "-o", str(dest), "--arm", "control", "--seed", "1", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    said = " ".join((proc.stdout + proc.stderr).split())
    assert "cannot reuse stage 'train/iter0'" in said and "weights/iter0/final is not there" in said, said
    assert f"sand run --resume {dest / 'sand/seed1'} --rebuild-weights" in said
    assert not (dest / "control/seed1/state.json").is_file() or \
        "train/iter0" not in json.loads((dest / "control/seed1/state.json").read_text())["done"]

    # the way on that the message names: recompute the SFT start in the copy, then the arm runs from it; on one
    # machine the retrained start is the very same weights, so the copy's other runs still pair with it
    from sand_framework.sweep import load_sweep
    from sand_framework.sweep.compare import GameOutcomes

    spec = load_sweep(path)
    recorded = GameOutcomes(spec, dest).start("sand", 1)
    assert recorded == GameOutcomes(spec, out).start("sand", 1) and recorded.startswith("tensors:")
    exported = dest / "sand/seed1/exported_weights.json"
    exported.write_text(json.dumps({"weights/iter0": "tensors:stale"}))  # the weights, once there, count instead
    sand("run", "--resume", str(dest / "sand" / "seed1"), "--redo-from", "train/iter0")
    sand("sweep", str(path), "-o", str(dest), "--arm", "control", "--seed", "1")
    assert (dest / "control/seed1/metrics.json").is_file()
    rebuilt = GameOutcomes(spec, dest)
    assert rebuilt.start("sand", 1) == rebuilt.start("control", 1) == recorded
    assert rebuilt.start("sand", 0) == GameOutcomes(spec, out).start("control", 0)  # the copy kept seed 0's too


def test_rebuild_weights_trains_an_exported_start_again_and_keeps_every_result(sweep, tmp_path):
    """A machine change loses the SFT start's weights: `sand run --resume RUN --rebuild-weights` trains them
    again in the exported run (same tensors on one machine), keeps its results and its record of the original
    weights, and an arm reusing it then runs. Pairing that arm with the start's own row: left out by default
    (the start was computed "on another machine", simulated by its record), paired and named with
    `pair_starts: recipe` when the two `train/iter0` fingerprints agree, left out when they do not."""
    out, path, _ = sweep
    dest = tmp_path / "kept"
    sand("sweep", str(path), "--export", str(dest))
    import shutil

    from sand_framework.app.digests import tensors_digest
    from sand_framework.sweep import load_sweep
    from sand_framework.sweep.compare import GameOutcomes

    shutil.rmtree(dest / "control" / "seed1")
    start = dest / "sand" / "seed1"
    (start / "exported_weights.json").write_text(json.dumps({"weights/iter0": "tensors:another-machine"}))
    kept = {p.relative_to(start): p.read_bytes() for p in [start / "metrics.json", *start.glob("eval/*/*")]}
    done_before = json.loads((start / "state.json").read_text())["done"]

    proc = sand("run", "--resume", str(start), "--rebuild-weights")
    assert "--rebuild-weights: trained train/iter0 again; every result is kept" in proc.stderr + proc.stdout
    assert tensors_digest(start / "weights/iter0/final") == GameOutcomes(load_sweep(path), out).start("sand", 1)
    assert {p.relative_to(start): p.read_bytes() for p in [start / "metrics.json", *start.glob("eval/*/*")]} == kept
    done = json.loads((start / "state.json").read_text())["done"]
    assert done["train/iter0"]["seconds"] == done_before["train/iter0"]["seconds"] and "rebuilt" in done["train/iter0"]
    assert {k: v for k, v in done.items() if k != "train/iter0"} == {k: v for k, v in done_before.items()
                                                                   if k != "train/iter0"}
    assert "nothing to rebuild" in " ".join(sand("run", "--resume", str(start), "--rebuild-weights").stderr.split())
    sand("sweep", str(path), "-o", str(dest), "--arm", "control", "--seed", "1")
    assert (dest / "control/seed1/metrics.json").is_file()

    data = yaml.safe_load(path.read_text())
    data["comparisons"] = [{"question": "Does the control beat its start?", "a": "control/final", "b": "sand/sft"}]
    games = {}
    for how in ("tensors", "recipe"):
        variant = tmp_path / f"{how}.yaml"
        variant.write_text(yaml.safe_dump({**data, "pair_starts": how}))
        said = " ".join(sand("sweep", str(variant), "-o", str(dest), "--compare").stdout.split())
        games[how] = said
    assert "seed pair(s) 1–1 left out" in games["tensors"] and "| 0–0 |" in games["tensors"]
    assert "seed pair(s) 1–1 paired although their SFT starts' tensors differ" in games["recipe"]
    assert "| 0–0, 1–1 |" in games["recipe"]
    state = json.loads((dest / "control/seed1/state.json").read_text())
    state["fingerprints"]["train/iter0"]["inputs"]["expert/expert.sharegpt.json"] = "sha256:other-data"
    (dest / "control/seed1/state.json").write_text(json.dumps(state))
    said = " ".join(sand("sweep", str(tmp_path / "recipe.yaml"), "-o", str(dest), "--compare").stdout.split())
    assert "seed pair(s) 1–1 left out" in said and "paired although" not in said


def test_a_run_stopped_part_way_is_exported_and_continues_on_a_new_machine(sweep, tmp_path):
    """A run longer than a machine's life: exported stopped part way (its finished stages and units, no weights),
    then `sand sweep --rebuild-starts` trains the start it reuses again, copies it back into the run and continues
    it: the stages computed from the first start are kept and said, the rest computed, and the run finishes."""
    out, path, _ = sweep
    import shutil

    work = tmp_path / "machine1"
    shutil.copytree(out, work)
    RunDir(work / "control/seed1").discard(["train/iter1", "eval"])
    dest = tmp_path / "kept"
    proc = sand("sweep", str(path), "-o", str(work), "--export", str(dest))
    assert "exported 4 finished run(s)" in proc.stdout and "1 run(s) stopped part way" in proc.stdout
    run = dest / "control/seed1"
    assert (run / "iter1").is_dir() and not (run / "weights").exists()
    assert "synth/iter1" in json.loads((run / "state.json").read_text())["done"]
    status = sand("sweep", str(path), "-o", str(dest), "--status").stdout
    assert "| control/seed1 | stopped |" in status

    proc = sand("run", "--resume", str(run), check=False)  # before the rebuild: refused, saying what to do
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 3 and f"sand run --resume {run} --rebuild-weights" in said and "--redo-from" not in said
    assert "stage 'train/iter1' reads the SFT start's weights" in said  # iteration 1 continues the start
    proc = sand("sweep", str(path), "-o", str(dest), "--arm", "control", "--seed", "1", check=False)
    assert proc.returncode == 1 and "add `--rebuild-starts`" in " ".join(proc.stderr.split())
    # the start it reuses, trained again by the sweep (once per seed), then copied into the run
    proc = sand("sweep", str(path), "-o", str(dest), "--arm", "control", "--seed", "1", "--rebuild-starts")
    assert f"--rebuild-starts: training the SFT start of {dest / 'sand/seed1'} again first" in \
        " ".join(proc.stderr.split())
    assert (dest / "sand/seed1/weights/iter0/final").is_dir() and "rebuilt" in \
        json.loads((dest / "sand/seed1/state.json").read_text())["done"]["train/iter0"]
    assert (run / "weights/iter0/final").is_dir()  # copied again from the rebuilt start
    assert "weights/iter0" not in json.loads((run / "exported_weights.json").read_text())  # it goes on from it
    said = " ".join((proc.stdout + proc.stderr + (run / "run.log").read_text()).split())
    assert "synth/iter1, train/iter1 were computed or started from the SFT start as first trained" not in said
    assert "synth/iter1 were computed or started from the SFT start as first trained" in said, said[-2000:]
    assert (run / "metrics.json").is_file()
    state = json.loads((run / "state.json").read_text())
    assert "rebuilt_start" in state["fingerprints"]["synth/iter1"]


def test_until_computes_up_to_a_stage_and_a_later_sweep_finishes(sweep, tmp_path):
    """`sand sweep --until synth/iter1` (a seed's SFT start is on this machine only for a while): each run with that
    stage computes up to it and stops, exit 0, said; a run without it (no iterations) runs whole; a later sweep
    without the flag finishes them. A stage the run does not have is refused (exit 2) naming its stages."""
    out, path, _ = sweep
    import shutil

    work = tmp_path / "work"
    shutil.copytree(out, work)
    RunDir(work / "control/seed1").discard(["synth/iter1", "train/iter1", "eval"])
    RunDir(work / "base/seed0").discard(["eval"])
    proc = sand("run", "--resume", str(work / "control/seed1"), "--until", "train/iter9", check=False)
    assert proc.returncode == 2 and "expert, train/iter0, synth/iter1, train/iter1, eval" in proc.stderr
    proc = sand("sweep", str(path), "-o", str(work), "--arm", "control", "--arm", "base", "--until", "synth/iter1")
    said = " ".join(proc.stderr.split())
    assert "computed up to synth/iter1 as asked (--until), not finished: control/seed1" in said
    assert "--until synth/iter1: stopped before train/iter1, as asked" in said
    state = json.loads((work / "control/seed1/state.json").read_text())
    assert list(state["done"]) == ["expert", "train/iter0", "synth/iter1"] and "train/iter1" not in state["fingerprints"]
    assert (work / "base/seed0/metrics.json").is_file()  # no synth/iter1: ran whole
    assert "goes on with the recipe" not in proc.stdout + proc.stderr  # the file still describes them
    # the sweep file edited after the run began: the run goes on with its own recipe, and the sweep says where
    edited = write_sweep(tmp_path, [{**arm, "overrides": [*arm["overrides"], "trainer.threads=2"]}
                                    if arm["name"] == "control" else arm for arm in ARMS])
    proc = sand("sweep", str(edited), "-o", str(work), "--arm", "control", "--seed", "1")
    said = " ".join((proc.stdout + proc.stderr).split())
    assert "arm control seed 1 goes on with the recipe its run directory holds" in said
    assert "trainer.threads: 1 in the run, 2 in the sweep file" in said and "--redo-from STAGE" in said
    assert (work / "control/seed1/metrics.json").is_file()
    assert yaml.safe_load((work / "control/seed1/recipe.yaml").read_text())["trainer"]["threads"] == 1


def test_status_names_the_rebuild_a_start_without_weights_needs(finished_sweep):
    """An exported SFT start that an unfinished arm of its seed reuses: `--status` names the command that makes
    its weights again; a start whose arms have all finished, or whose weights are there, needs nothing."""
    path, out = finished_sweep
    for seed in (1, 2):
        state = json.loads((out / f"sand/seed{seed}/state.json").read_text())
        weights = out / f"sand/seed{seed}/weights/iter0/final"
        state["done"]["train/iter0"] = {"weights": str(weights)}
        (out / f"sand/seed{seed}/state.json").write_text(json.dumps(state))
    (out / "sand/seed2/weights/iter0/final").mkdir(parents=True)
    for seed in (0, 1, 2):
        (out / f"control/seed{seed}/metrics.json").unlink()
    rows = {line.split(" | ")[0].strip("| "): line for line in sand("sweep", str(path), "--status").stdout.splitlines()
            if "/seed" in line}
    assert f"before control can reuse it: `sand run --resume {out / 'sand/seed1'} --rebuild-weights`" \
        in rows["sand/seed1"]
    assert "rebuild" not in rows["sand/seed0"] and "rebuild" not in rows["sand/seed2"]


def test_a_run_another_process_holds_is_left_to_it(finished_sweep):
    """Two sweep processes side by side (`--seed 1` and a second one for other arms): a run another live process
    holds, or whose reused arm it still runs, is reported `busy` and left alone: not failed, not blocking."""
    path, out = finished_sweep
    import shutil

    (out / "control/seed1/metrics.json").unlink()
    shutil.rmtree(out / "control/seed2")
    (out / "sand/seed2/metrics.json").unlink()
    before = (out / "control/seed1/state.json").read_text()
    holders = [RunDir(out / "control/seed1"), RunDir(out / "sand/seed2")]
    for rd in holders:
        rd.lock()
    try:
        proc = sand("sweep", str(path), "--arm", "control", "--seed", "1", "--seed", "2")
    finally:
        for rd in holders:
            rd.unlock()
    assert "left to the process running them: " in proc.stderr and proc.returncode == 0
    assert f"control/seed1 (another process (pid {os.getpid()}) is running it)" in proc.stderr
    assert f"control/seed2 (it reuses arm sand, which another process (pid {os.getpid()}) is still running)" \
        in proc.stderr
    assert "not finished" not in proc.stderr and "failed" not in proc.stderr
    assert (out / "control/seed1/state.json").read_text() == before and not (out / "control/seed2").exists()


def test_status_says_where_every_run_stands(finished_sweep):
    """`--status`: finished, running (a live process holds the lock), stopped part way (its stage in progress with
    its finished units or newest checkpoint), not started; it writes nothing."""
    path, out = finished_sweep
    import shutil

    stopped = out / "control" / "seed1"
    shutil.rmtree(stopped)
    rd = RunDir(stopped)
    rd.path.mkdir(parents=True)
    rd.write_json("state.json", {"done": {"expert": {}}, "fingerprints": {"expert": {}, "train/iter0": {}}})
    for step in (2, 10):
        (stopped / "weights/iter0/checkpoints" / f"checkpoint-{step}").mkdir(parents=True)
    evaluating = out / "control" / "seed2"
    (evaluating / "metrics.json").unlink()
    state = json.loads((evaluating / "state.json").read_text())
    state["done"] = {"expert": {}, "train/iter0": {}}
    state["fingerprints"] = {"eval": {}}
    (evaluating / "state.json").write_text(json.dumps(state))
    held = RunDir(evaluating)
    held.lock()
    try:
        proc = sand("sweep", str(path), "--status")
    finally:
        held.unlock()
    rows = {line.split(" | ")[0].strip("| "): line for line in proc.stdout.splitlines() if "/seed" in line}
    assert "| finished |" in rows["sand/seed0"]
    assert "| stopped | expert | train/iter0 | newest checkpoint: checkpoint-10 |" in rows["control/seed1"]
    assert f"running (pid {os.getpid()})" in rows["control/seed2"] and "12 units in eval/final/unseen" in \
        rows["control/seed2"]
    assert "7 runs: 5 finished, 1 stopped, 1 running" in proc.stdout
    assert not (out / "results.md").exists()


def test_status_reads_only_stage_names_from_a_hand_edited_state(tmp_path):
    """A key that is not a stage (or a state that is not a mapping) is left out, not a crash of `--status`."""
    from sand_framework.sweep.status import run_status

    rd = RunDir(tmp_path / "run")
    rd.path.mkdir()
    rd.write_json("state.json", {"done": {"expert": {}, "my note": 1}, "fingerprints": {"by hand": {}, "7": {},
                                                                                      "train/iter0": {}}})
    row = run_status("a", 0, rd.path)
    assert (row.state, row.done, row.current) == ("stopped", ["expert"], "train/iter0")
    rd.write_json("state.json", ["not", "a", "mapping"])
    assert run_status("a", 0, rd.path).state == "not started"


def test_an_arm_whose_lender_is_not_here_says_how_to_get_it_and_starts_nothing(tmp_path):
    """`--arm control` on a fresh machine: before, the copy of the lender's stages failed with "not a SAND run
    directory (no recipe.yaml)" and left an empty run directory."""
    path = write_sweep(tmp_path, ARMS, seeds=(0,))
    proc = sand("sweep", str(path), "--arm", "control", check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    said = " ".join((proc.stdout + proc.stderr).split())
    assert f"it reuses arm sand, whose run {tmp_path / 'out' / 'sand' / 'seed0'} is not here" in said
    assert "`--arm sand --seed 0`" in said and "--rebuild-starts" in said
    assert not (tmp_path / "out" / "control" / "seed0").exists()


def test_a_lender_that_cannot_be_reused_leaves_no_run_to_resume_without_it(tmp_path):
    """Before, the arm's run directory was created and then the reuse failed: the next sweep resumed that directory
    as a run of its own, which trained an SFT start of its own instead of adopting the seed's."""
    path = write_sweep(tmp_path, ARMS, seeds=(0,))
    lender = tmp_path / "out" / "sand" / "seed0"
    lender.mkdir(parents=True)
    (lender / "recipe.yaml").write_text("")  # damaged
    proc = sand("sweep", str(path), "--arm", "control", check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "recipe.yaml is damaged" in " ".join((proc.stdout + proc.stderr).split())
    assert not (tmp_path / "out" / "control" / "seed0").exists()
