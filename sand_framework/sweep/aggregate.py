"""Mean ± std over seeds for every arm of a sweep: the experiment's results table, questions and figure.

Standard deviations are sample standard deviations (n-1) over seeds; a row
with one seed shows no spread. Rows read each run's ``metrics.json`` and
``state.json``; the declared comparisons, each row's interval and the figure
also read the per-game eval unit logs (:mod:`sand_framework.sweep.compare`).
Only finished runs count, so all of it can be rebuilt at any time, including
while some runs are unfinished (they are listed as missing).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sand_framework.report.figures import SeedRow, success_by_seed_figure
from sand_framework.report.tables import markdown_table
from sand_framework.store import RunLayout
from sand_framework.store.files import atomic_write_json, atomic_write_text, read_json
from sand_framework.sweep.compare import GameOutcomes, comparisons_markdown, compare, success_interval
from sand_framework.sweep.runner import finished, run_dir_of, wall_seconds
from sand_framework.sweep.spec import SweepSpec

EVAL_FIELDS = ("avg_reward", "success_rate", "deliberation_rate_step", "invalid_actions_per_task",
               "total_tokens_per_task", "avg_steps")
FIGURE = "success_by_arm.png"
"""The sweep's figure, next to results.md: every row's success per seed, mean and interval."""
SYNTH_FIELDS = ("seconds", "steps", "deliberated", "candidates", "rollouts", "rollout_steps", "fallbacks",
                "backend_calls", "backend_prompt_tokens", "backend_completion_tokens")


@dataclass
class Stat:
    values: list[float] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    """The seed of each value, where known (eval rows), so results.json says which run gave which number."""

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None

    @property
    def std(self) -> float | None:
        return statistics.stdev(self.values) if len(self.values) > 1 else None

    def show(self, digits: int = 1) -> str:
        if not self.values:
            return "–"
        spread = f" ± {self.std:.{digits}f}" if self.std is not None else ""
        return f"{self.mean:.{digits}f}{spread}"

    def to_dict(self) -> dict[str, Any]:
        return {"mean": self.mean, "std": self.std, "n": len(self.values), "values": self.values,
                "seeds": self.seeds}


def collect(spec: SweepSpec, out: Path) -> dict[str, Any]:
    """Per (arm, model, split): stats over seeds and a 95% interval over games; per (arm, iteration): synthesis
    cost; the answers to the declared comparisons; plus what is missing."""
    games = GameOutcomes(spec, out)
    rows: list[dict[str, Any]] = []
    synth: list[dict[str, Any]] = []
    missing: list[str] = []
    splits = list(spec.splits or [])
    for arm in spec.arms:
        metrics = {}
        for seed in spec.seeds_of(arm):
            path = run_dir_of(out, arm.name, seed)
            if finished(path):
                metrics[seed] = read_json(path / RunLayout.METRICS)
            else:
                missing.append(f"{arm.name}/seed{seed}")
        for model, label in arm.report.items():
            found = {s: m["eval"][model] for s, m in metrics.items() if model in m.get("eval", {})}
            for split in sorted({sp for r in found.values() for sp in r}):
                if spec.splits and split not in spec.splits:
                    continue
                if split not in splits:
                    splits.append(split)
                stats = {f: Stat([float(r[split][f]) for r in found.values() if f in r[split]],
                                 [s for s, r in found.items() if f in r[split]]) for f in EVAL_FIELDS}
                n_games, interval = success_interval(games.get(arm.name, model, split), sorted(found))
                rows.append({"arm": arm.name, "model": model, "label": label or arm.name, "split": split,
                             "seeds": sorted(found), "stats": stats, "games": n_games,
                             "success_ci95": list(interval) if interval else None})
        walls = [wall_seconds(run_dir_of(out, arm.name, s)) for s in metrics]
        iterations = sorted({int(k[4:]) for m in metrics.values() for k in m.get("synthesis", {})})
        for k in iterations:
            # a stage adopted from another arm is that arm's cost, tabulated there
            runs = {s: r for s, m in metrics.items()
                    if (r := m["synthesis"].get(f"iter{k}")) and "reused_from" not in r}
            if runs:
                stats = {f: Stat([float(r.get(f, 0)) for r in runs.values()]) for f in SYNTH_FIELDS}
                stats["wall_seconds"] = Stat([w for w in walls if w is not None])
                synth.append({"arm": arm.name, "iteration": k, "seeds": sorted(runs), "stats": stats})
    return {"name": spec.name, "splits": splits, "rows": rows, "synthesis": synth, "missing": missing,
            "alpha": spec.alpha, "comparisons": compare(spec, out, splits, games)}


def results_markdown(data: dict[str, Any]) -> str:
    parts = [f"# {data['name']}: mean ± std over seeds\n"]
    for split in data["splits"]:
        rows = [r for r in data["rows"] if r["split"] == split]
        parts.append(f"## split `{split}`\n")
        parts.append(markdown_table(
            ["arm", "seeds", "avg reward", "success %", "deliberation rate (steps)", "invalid actions / task",
             "tokens / task", "steps / task"],
            [[r["label"], len(r["seeds"]), r["stats"]["avg_reward"].show(), r["stats"]["success_rate"].show(),
              r["stats"]["deliberation_rate_step"].show(3), r["stats"]["invalid_actions_per_task"].show(2),
              r["stats"]["total_tokens_per_task"].show(0), r["stats"]["avg_steps"].show(2)] for r in rows]))
        parts.append("")
    if data["synthesis"]:
        parts.append("## Synthesis cost (per run; an iteration reused from another arm is counted there)\n")
        parts.append(markdown_table(
            ["arm", "iteration", "seeds", "wall s (whole run)", "synthesis s", "steps", "deliberated", "rollouts", "env steps",
             "backend calls", "backend tokens (prompt + completion)", "fallbacks"],
            [[s["arm"], s["iteration"], len(s["seeds"]), s["stats"]["wall_seconds"].show(0), s["stats"]["seconds"].show(0),
              s["stats"]["steps"].show(0), s["stats"]["deliberated"].show(1), s["stats"]["rollouts"].show(1),
              s["stats"]["rollout_steps"].show(1), s["stats"]["backend_calls"].show(0),
              f"{s['stats']['backend_prompt_tokens'].show(0)} + {s['stats']['backend_completion_tokens'].show(0)}",
              s["stats"]["fallbacks"].show(1)] for s in data["synthesis"]]))
        parts.append("")
    if data.get("figure"):
        parts.append(f"![success per seed]({data['figure']})\n")
        parts.append("Every row of the tables above: success % of each seed (dots, labelled s<k>), the mean over "
                     "seeds (◆) and a 95% Wilson interval over the distinct games (each game's success averaged "
                     "over the seeds; seeds replaying the same games add no new games).\n")
    comparisons = comparisons_markdown(data.get("comparisons", []), data.get("alpha", 0.05))
    if comparisons:
        parts.append(comparisons)
    if data["missing"]:
        parts.append("Unfinished runs (not in the table): " + ", ".join(data["missing"]) + "\n")
    return "\n".join(parts)


def figure_rows(data: dict[str, Any]) -> list[SeedRow]:
    """The figure's input: every table row with every seed the table averages (its success % per seed)."""
    rows = []
    for r in data["rows"]:
        success = r["stats"]["success_rate"]
        rows.append(SeedRow(r["label"], r["split"], dict(zip(success.seeds, success.values)),
                            tuple(r["success_ci95"]) if r["success_ci95"] else None, r["games"]))
    return rows


def write_results(spec: SweepSpec, out: Path) -> Path:
    """``OUT/results.json`` (every value per seed), ``OUT/results.md`` (the tables and the answers to the
    comparisons) and ``OUT/success_by_arm.png`` (every seed of every row)."""
    data = collect(spec, out)
    out.mkdir(parents=True, exist_ok=True)
    data["figure"] = FIGURE if success_by_seed_figure(figure_rows(data), out / FIGURE) else None
    plain = {**data,
             "rows": [{**r, "stats": {k: v.to_dict() for k, v in r["stats"].items()}} for r in data["rows"]],
             "synthesis": [{**s, "stats": {k: v.to_dict() for k, v in s["stats"].items()}}
                           for s in data["synthesis"]],
             "comparisons": [c.to_dict() for c in data["comparisons"]]}
    atomic_write_json(out / "results.json", plain)
    atomic_write_text(out / "results.md", results_markdown(data))
    return out / "results.md"
