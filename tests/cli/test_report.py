"""`sand report` and `sand eval`: synthetic run directories with hand-written unit logs, and a real smoke run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from sand_cli import sand

from sand_framework.report import build_report, load_run
from sand_framework.store import RunDir

PNGS = ("results.png", "deliberation_by_difficulty.png", "reward_by_step.png")


DELIB = 'If I "move east" I reach the kitchen; if I "move west" I go back. I will "move east".'


def _unit(task: str, reward: float, thoughts: list[str], tokens: tuple[int, int] = (100, 20)) -> dict:
    steps = [{"thought": t, "action": "look around", "observation": "ok", "deliberated": t.count('"') >= 4}
             for t in thoughts]
    traj = {"task_id": task, "env": "toy", "instruction": "", "task": "", "steps": steps, "reward": reward,
            "success": reward == 1.0, "meta": {"invalid_actions": 0}}
    return {"trajectory": traj, "prompt_tokens": tokens[0], "completion_tokens": tokens[1]}


def make_run(path: Path, name: str, sand_delib: int = 2) -> Path:
    """A finished-looking run: base/sft/final evaluated on seen+unseen, one synthesis iteration."""
    rd = RunDir(path)
    rd.write_text("recipe.yaml", yaml.safe_dump({"run": {"name": name, "iterations": 1},
                                                "model": {"base": "tiny-random"},
                                                "sampler": {"name": "self_consistency"},
                                                "critic": {"name": "rollout_critic"}}))
    base_rewards = [0.0, 0.0, 0.3, 0.5, 0.8, 1.0]
    for split in ("seen", "unseen"):
        for model in ("base", "sft", "final"):
            log = rd.units("eval", model, f"{split}.units.jsonl")
            for i, r in enumerate(base_rewards):
                n_steps = 2 + i % 3
                if model == "base":
                    reward, thoughts = r, ["go"] * n_steps
                elif model == "sft":
                    reward, thoughts = min(1.0, r + 0.1), ["go"] * n_steps
                else:
                    reward = min(1.0, r + 0.2)
                    thoughts = [DELIB if j < sand_delib and i < 3 else "go" for j in range(n_steps)]
                log.append(f"{split}-{i}", _unit(f"{split}-{i}", reward, thoughts,
                                                 (100, 40 if model == "final" else 20)))
    syn = rd.units("iter1", "synthesis.units.jsonl")
    syn.append("t0", {"trajectory": {}, "records": [], "stats": {"steps": 4, "deliberated": 2, "candidates": 5,
                                                                 "rollouts": 5, "rollout_steps": 9, "fallbacks": 1,
                                                                 "retries": 0, "samples_total": 12,
                                                                 "samples_valid": 10}})
    rd.mark_done("expert", {"trajectories": 1})
    rd.mark_done("synth/iter1", {"steps": 4, "deliberated": 2, "candidates": 5, "rollouts": 5, "rollout_steps": 9,
                                 "fallbacks": 1, "retries": 0, "samples_total": 12, "samples_valid": 10,
                                 "trajectories": 1, "deliberation_rate": 0.5})
    return path


def _check_pngs(out: Path, pngs: tuple[str, ...] = PNGS) -> None:
    for png in pngs:
        p = out / png
        assert p.exists(), png
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        assert 2_000 < len(data) < 150_000, (png, len(data))


def test_load_run_bands_from_base(tmp_path):
    run = load_run(make_run(tmp_path / "a", "full"))
    assert run.models == ["base", "sft", "final"] and run.splits == ["seen", "unseen"]
    assert run.reference == "base"
    # base rewards 0,0,.3,.5,.8,1 on both splits -> 12 tasks, 4 at 0.0 (mid-rank 2/12: hard), 1.0 is easy
    assert run.bands[("seen", "seen-0")] == "hard" and run.bands[("unseen", "unseen-5")] == "easy"
    assert run.synthesis[1]["deliberated"] == 2


def test_an_unfinished_synthesis_is_totalled_from_its_units(tmp_path):
    """A synthesis stage not yet marked done: the report sums its recorded units (the method kind's totals)."""
    path = make_run(tmp_path / "a", "partial")
    state = json.loads((path / "state.json").read_text())
    del state["done"]["synth/iter1"]
    (path / "state.json").write_text(json.dumps(state))
    summary = load_run(path).synthesis[1]
    assert summary["partial"] is True and summary["trajectories"] == 1
    assert summary["deliberated"] == 2 and summary["deliberation_rate"] == 0.5


def test_report_on_synthetic_run(tmp_path):
    out = tmp_path / "report"
    md = build_report([make_run(tmp_path / "a", "full")], out).read_text()
    for heading in ("## Results", "## Deliberation", "## Tokens per task", "## Difficulty bands", "## Synthesis"):
        assert heading in md
    # results: base/sft/final rows with seen and unseen columns
    assert "| run | model | seen reward | seen success % | unseen reward | unseen success % | mean reward |" in md
    assert "| full | base | 43.3 (n=6) |" in md
    # tokens: final generates 40 per task vs SFT's 20 -> 2.00x
    assert "| full | final | seen | 40.0 | 2.00× |" in md
    assert "bands from **base** rewards over 12 tasks" in md
    # synthesis: 5 candidates over 2 deliberated steps, one fallback
    assert "| full | 1 | 1 | 4 | 2 | 50.0% | 2.50 | 5 | 9 | – | 1 | 0 | – | 10/12 |" in md  # no failed/cut counts: an older run
    for png in PNGS:
        assert f"({png})" in md
    _check_pngs(out)


def test_report_compares_runs_side_by_side(tmp_path):
    a = make_run(tmp_path / "a", "full")
    b = make_run(tmp_path / "b", "wo-sas", sand_delib=0)
    c = make_run(tmp_path / "c", "wo-sas")
    md = build_report([a, b, c], tmp_path / "out").read_text()
    assert "| full | final |" in md
    # repeated run names fall back to folder names
    assert "| b | final |" in md and "| c | final |" in md and "wo-sas" not in md.split("## Runs")[0]
    _check_pngs(tmp_path / "out")


def test_no_deliberation_leaves_the_difficulty_figure_out(tmp_path):
    md = build_report([make_run(tmp_path / "a", "wo-delib", sand_delib=0)], tmp_path / "out").read_text()
    assert "deliberation_by_difficulty.png" not in md and "No evaluated episode deliberated" in md
    assert not (tmp_path / "out" / "deliberation_by_difficulty.png").exists()
    _check_pngs(tmp_path / "out", ("results.png", "reward_by_step.png"))


def test_run_paths_are_relative_to_the_working_directory(tmp_path, monkeypatch):
    inside = make_run(tmp_path / "runs" / "a", "full")
    outside = make_run(tmp_path / "elsewhere" / "b", "other")
    monkeypatch.chdir(tmp_path / "runs")
    md = build_report([inside.resolve(), outside.resolve()], tmp_path / "out").read_text()
    assert "| full | `a` |" in md and f"| other | `{outside.resolve()}` |" in md
    assert str(inside.resolve()) not in md


def test_bands_from_another_evaluation(tmp_path):
    import shutil

    a = make_run(tmp_path / "a", "full")
    b = make_run(tmp_path / "b", "nobase")
    shutil.rmtree(b / "eval" / "base")
    assert load_run(b).reference == "sft"
    md = build_report([b], tmp_path / "out", bands_from=f"{a}:base").read_text()
    assert "nobase: bands from **base (full)** rewards over 12 tasks (hard 4, medium 4, easy 4)" in md
    with pytest.raises(Exception, match="no evaluation of 'nope'"):
        build_report([b], tmp_path / "out2", bands_from=f"{a}:nope")


def test_report_cli_rejects_a_folder_without_runs(tmp_path):
    proc = sand("report", str(tmp_path), check=False)
    assert proc.returncode == 3 and "neither a SAND run directory" in proc.stderr


def test_adapter_base_falls_back_to_the_recipe(tmp_path):
    from sand_framework.app.model_eval import resolve_model_ref

    adapter = tmp_path / "runx" / "final"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "/gone/model"}))
    ref = resolve_model_ref(str(adapter), "tiny-random")
    assert ref.base == "tiny-random" and ref.weights == str(adapter.resolve()) and ref.label == "runx-final"
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(tmp_path)}))
    assert resolve_model_ref(str(adapter), "tiny-random").base == str(tmp_path)
    assert resolve_model_ref("org/model-x", None).label == "org_model-x"


def test_evaluate_tasks_resumes_per_task(twx, registries, tmp_path):
    """The eval loop shared by the pipeline and `sand eval`: only missing tasks run; a finished one loads nothing."""
    from scripted import ScriptedPolicy

    from sand_framework.engine.evaluation import evaluate_tasks
    from sand_framework.engine.units import StageUnits
    from sand_framework.store import UnitLog

    evaluator = registries.build("evaluator", "greedy", {"max_steps": 3})
    policy = ScriptedPolicy()
    loads = []

    def agent():
        loads.append(1)
        return policy

    tasks = twx.tasks("seen")
    log = UnitLog(tmp_path / "eval" / "m" / "seen.units.jsonl")
    first = evaluate_tasks(StageUnits.open("eval", log, tasks[:2], "resume"), evaluator, twx, agent, batch_size=2)
    calls = len(policy.calls)
    assert [r.trajectory.task_id for r in first] == tasks[:2] and len(loads) == 1
    assert all(0 < len(r.trajectory.steps) <= 3 and r.prompt_tokens > 0 for r in first)
    again = evaluate_tasks(StageUnits.open("eval", UnitLog(log.path), tasks[:3], "resume"), evaluator, twx, agent,
                           batch_size=2)
    assert [r.trajectory.to_dict() for r in again[:2]] == [r.trajectory.to_dict() for r in first]
    assert len(UnitLog(log.path)) == 3 and len(loads) == 2 and len(policy.calls) > calls
    done = evaluate_tasks(StageUnits.open("eval", UnitLog(log.path), tasks[:3], "resume"), evaluator, twx, agent,
                          batch_size=2)
    assert len(done) == 3 and len(loads) == 2  # nothing to do: the policy is never built
    evaluator.close()


# -- a real smoke run -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("runs") / "smoke"
    sand("run", "smoke", "--run-dir", str(run_dir))
    return run_dir


def test_report_on_a_smoke_run(smoke_run, tmp_path):
    out = tmp_path / "report"
    proc = sand("report", str(smoke_run), "-o", str(out))
    assert str(out / "report.md") in proc.stdout
    md = (out / "report.md").read_text()
    assert "| smoke | sft |" in md and "| smoke | final |" in md
    assert "bands from **sft** rewards" in md  # the smoke recipe does not evaluate the base model
    assert "| smoke | 1 | 3 |" in md  # synthesis over the 3 expert trajectories
    _check_pngs(out, ("results.png", "reward_by_step.png"))  # the difficulty figure only if an episode deliberated


def test_eval_a_run_resumes_per_task_and_reports(smoke_run, tmp_path):
    out = tmp_path / "ev"
    proc = sand("eval", f"{smoke_run}:final", "--split", "seen", "--limit", "1", "-o", str(out))
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["eval"]["final"]["seen"]["tasks"] == 1 and "metrics:" in proc.stdout
    log = out / "eval" / "final" / "seen.units.jsonl"
    assert len(log.read_text().splitlines()) == 1
    unit = json.loads(log.read_text())["data"]
    assert unit["prompt_tokens"] > 0 and all("deliberated" in s for s in unit["trajectory"]["steps"])
    # same tasks as the pipeline's own evaluation of the same weights
    ran = json.loads((smoke_run / "eval" / "final" / "seen.units.jsonl").read_text().splitlines()[0])
    assert ran["unit"] == json.loads(log.read_text())["unit"]

    # one more task: only the new one is evaluated
    sand("eval", f"{smoke_run}:final", "--split", "seen", "--limit", "2", "-o", str(out))
    lines = log.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[0])["data"] == unit

    # a model alias with the smoke recipe, under another label in the same folder
    sand("eval", "tiny-random", "--recipe", "smoke", "--split", "seen", "--limit", "1", "-o", str(out),
         "--label", "base")
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["eval"]) == {"final", "base"}
    assert json.loads((out / "eval.json").read_text())["models"]["base"]["weights"] is None

    # the same label for different weights is refused
    proc = sand("eval", f"{smoke_run}:sft", "--split", "seen", "--limit", "1", "-o", str(out), "--label", "final",
                check=False)
    assert proc.returncode == 3 and "different" in proc.stderr

    sand("report", str(smoke_run), str(out), "-o", str(tmp_path / "both"))
    md = (tmp_path / "both" / "report.md").read_text()
    assert "| smoke | final |" in md and "| ev | base |" in md


def test_eval_needs_a_recipe_for_a_bare_model(tmp_path):
    proc = sand("eval", "tiny-random", "-o", str(tmp_path / "x"), check=False)
    assert proc.returncode == 3 and "--recipe" in proc.stderr
