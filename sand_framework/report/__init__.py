"""Run reports: results and token tables, difficulty and per-step figures, synthesis statistics.

``build_report(["runs/a", "runs/b"], "report/")`` writes ``report.md`` and its
PNGs; ``sand report`` is the command-line face of it. Metric definitions live
in :mod:`sand_framework.metrics`; see ``docs/reports.md``.
"""

from __future__ import annotations

from pathlib import Path

from sand_framework.report.data import RunData, load_run, load_runs
from sand_framework.report import figures, tables

__all__ = ["RunData", "build_report", "load_run", "load_runs"]


def build_report(run_dirs: list[str | Path], out_dir: str | Path, bands_from: str | None = None) -> Path:
    """Write ``out_dir/report.md`` (and its figures) comparing ``run_dirs`` side by side.

    ``bands_from`` (``PATH[:MODEL]``) takes the difficulty bands of every run from that evaluation
    instead of each run's own base (else SFT) model.
    """
    from sand_framework.store import RunLayout, atomic_write_text

    runs = load_runs(list(run_dirs), bands_from)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    title = " vs ".join(r.label for r in runs)
    md = [f"# SAND report: {title}", "",
          "Greedy evaluation (temperature 0, one action per step). Metric definitions: `docs/reports.md` "
          "and `sand_framework/metrics.py`.", "", "## Runs", "", tables.components_table(runs), ""]
    evaluated = any(r.evals for r in runs)
    if evaluated:
        md += ["## Results", "", "Average reward ×100 (n = tasks) and success rate per split.", "",
               tables.results_table(runs), ""]
        fig = figures.results_figure(runs, out / "results.png")
        if fig:
            md += ["![average reward per split](results.png)", ""]
        md += ["## Deliberation", "", tables.deliberation_table(runs), ""]
        md += ["## Tokens per task", "",
               "Mean tokens per task; ratios are to the same run's SFT agent on the same split.", "",
               tables.tokens_table(runs), ""]
        md += ["## Difficulty bands", "", tables.band_reference_note(runs), "", tables.bands_table(runs), ""]
        if figures.deliberation_violin(runs, out / "deliberation_by_difficulty.png"):
            md += ["![deliberation rate by difficulty](deliberation_by_difficulty.png)", "",
                   "Each violin: the per-trajectory deliberation rates of one model's episodes in that band "
                   "(dots: episodes; a flat bar: all equal).", ""]
        else:
            md += ["No evaluated episode deliberated, so there is no figure of deliberation by difficulty.", ""]
        md += ["## Reward and deliberation by step", ""]
        if figures.step_reward_figure(runs, out / "reward_by_step.png"):
            md += ["![reward and deliberation by step](reward_by_step.png)", "",
                   "Bars: average reward ×100 of the episodes that ended at step t (label: how many). "
                   "Line: share of the episodes still running at step t whose step-t thought deliberated.", ""]
    else:
        md += ["No evaluation recorded yet (no `eval/<model>/<split>.units.jsonl`).", ""]
    if any(r.synthesis for r in runs):
        md += ["## Synthesis", "", "Per SAND iteration: expert steps examined by the detector, steps deliberated, "
               "distinct candidates per deliberated step, rollouts executed, synthesizer fallbacks.", "",
               tables.synthesis_table(runs), ""]
    if any(r.engine for r in runs):
        md += ["## Engine time", "", tables.ENGINE_TIME_NOTE, "", tables.engine_time_table(runs), ""]
    weights = RunLayout.WEIGHTS
    tb = [r for r in runs if (r.path / weights).is_dir() and any((r.path / weights).glob("iter*/logs"))]
    if tb:
        md += ["## Training curves", "", "Training logs are TensorBoard event files: `tensorboard --logdir "
               + " ".join(f"{r.shown_path}/weights" for r in tb) + "`.", ""]
    md += ["## Browse", "", "Every synthesized step (samples, detector, rollouts, critiques, the deliberation and the "
           "training target) and every evaluated episode side by side, as an offline site: "
           + ", ".join(f"`sand view {r.shown_path}`" for r in runs) + " (writes `RUN/view/index.html`)."]
    views = [r for r in runs if (r.path / "view" / "index.html").is_file()]
    if views:
        import os

        md += ["", "Built already: " + ", ".join(
            f"[{r.label}]({os.path.relpath(r.path / 'view' / 'index.html', out)})" for r in views) + "."]
    md.append("")
    path = out / "report.md"
    atomic_write_text(path, "\n".join(md))
    path.chmod(0o644)
    return path
