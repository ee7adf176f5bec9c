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
COST_FIELDS = ("data_env_steps", "data_generated_tokens", "data_prompt_tokens", "data_seconds", "train_seconds")
"""What a row's model cost to make, summed over the stages it comes from (adopted ones included): environment
steps, generated and prompt tokens and wall seconds of building its iterations' training data, and the wall
seconds of its training stages (behavior initialization included)."""
ORACLE_LABEL = " [oracle scorer: UPPER BOUND]"
"""Appended to a row whose evaluation kept samples by the environment's reward (``best_of_n``, scorer oracle)."""
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
    cost; per (arm, model): what the row cost (:func:`row_cost`); the answers to the declared comparisons; plus
    what is missing."""
    games = GameOutcomes(spec, out)
    rows: list[dict[str, Any]] = []
    synth: list[dict[str, Any]] = []
    costs: list[dict[str, Any]] = []
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
                outcomes = games.get(arm.name, model, split)
                n_games, interval = success_interval(outcomes, sorted(found))
                shown = label or arm.name
                if any(r[split].get("oracle") for r in found.values()) and "UPPER BOUND" not in shown.upper():
                    shown += ORACLE_LABEL
                rows.append({"arm": arm.name, "model": model, "label": shown, "split": split,
                             "seeds": sorted(found), "stats": stats, "games": n_games,
                             "success_ci95": list(interval) if interval else None,
                             "solved": {s: [sum(outcomes[s].values()), len(outcomes[s])]
                                        for s in sorted(found) if s in outcomes}})
            costs.append(row_cost(arm.name, model, label or arm.name, metrics, out))
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
    for c in costs:  # a row's label as the results table shows it (the oracle mark included)
        c["label"] = next((r["label"] for r in rows if (r["arm"], r["model"]) == (c["arm"], c["model"])), c["label"])
    costs = [c for c in costs if c["seeds"]]
    return {"name": spec.name, "splits": splits, "rows": rows, "synthesis": synth, "costs": costs,
            "missing": missing, "alpha": spec.alpha, "comparisons": compare(spec, out, splits, games)}


def model_iteration(model: str, metrics: dict[str, Any]) -> int | None:
    """The last iteration a model's weights come from (0: behavior initialization); None for the base model."""
    if model == "base":
        return None
    if model in ("sft", "iter0"):
        return 0
    if model.startswith("iter") and model[4:].isdigit():
        return int(model[4:])
    done = [int(k[4:]) for k in metrics.get("weights", {}) if k.startswith("iter") and k[4:].isdigit()]
    done += [int(k[4:]) for k in metrics.get("synthesis", {})]
    return max(done, default=0)


def run_cost(run_dir: Path, metrics: dict[str, Any], model: str) -> dict[str, float]:
    """What one run's ``model`` cost to make (:data:`COST_FIELDS`), from its ``state.json`` stage results."""
    done = (read_json(run_dir / RunLayout.STATE, {}) or {}).get("done", {})
    last = model_iteration(model, metrics)
    cost = dict.fromkeys(COST_FIELDS, 0.0)
    if last is None:
        return cost
    for k in range(last + 1):
        train = done.get(RunLayout.train_stage(k)) or {}
        cost["train_seconds"] += float(train.get("seconds", 0) or 0)
        if k == 0:
            continue
        synth = done.get(RunLayout.synth_stage(k)) or metrics.get("synthesis", {}).get(f"iter{k}") or {}
        cost["data_env_steps"] += float(synth.get("env_steps", 0) or 0)
        cost["data_generated_tokens"] += float(synth.get("backend_completion_tokens", 0) or 0)
        cost["data_prompt_tokens"] += float(synth.get("backend_prompt_tokens", 0) or 0)
        cost["data_seconds"] += float(synth.get("seconds", 0) or 0)
    return cost


def row_cost(arm: str, model: str, label: str, metrics: dict[int, dict[str, Any]], out: Path) -> dict[str, Any]:
    """One row of the cost table: per seed that evaluated ``model``, its inference tokens per task on each split
    and what making it cost (:func:`run_cost`); stages adopted from another arm count here too, since the
    model needed them (the synthesis-cost table counts each stage once, in the arm that computed it)."""
    seeds = sorted(s for s, m in metrics.items() if model in m.get("eval", {}))
    per_seed = {s: run_cost(run_dir_of(out, arm, s), metrics[s], model) for s in seeds}
    stats = {f: Stat([per_seed[s][f] for s in seeds], seeds) for f in COST_FIELDS}
    for s in seeds:
        for split, m in metrics[s]["eval"][model].items():
            for which in ("prompt", "completion"):
                key = f"{which}_tokens_per_task"
                if key in m:
                    stats.setdefault(f"eval_{which}_tokens/{split}", Stat()).values.append(float(m[key]))
                    stats[f"eval_{which}_tokens/{split}"].seeds.append(s)
    return {"arm": arm, "model": model, "label": label, "seeds": seeds, "stats": stats}


def cost_markdown(data: dict[str, Any]) -> str:
    """The cost table: inference tokens per task per split, and what building each row's training data and
    training it cost (means over seeds)."""
    costs = data.get("costs") or []
    if not costs:
        return ""
    splits = [s for s in data["splits"] if any(f"eval_prompt_tokens/{s}" in c["stats"] for c in costs)]
    header = ["row", "seeds", *[f"inference tokens / task, {s} (prompt + generated)" for s in splits],
              "env steps (training data)", "generated tokens (training data)", "prompt tokens (training data)",
              "data building s", "training s"]
    body = []
    for c in costs:
        st = c["stats"]
        tokens = [f"{st[f'eval_prompt_tokens/{s}'].show(0)} + {st[f'eval_completion_tokens/{s}'].show(0)}"
                  if f"eval_prompt_tokens/{s}" in st else "–" for s in splits]
        body.append([c["label"], len(c["seeds"]), *tokens, st["data_env_steps"].show(0),
                     st["data_generated_tokens"].show(0), st["data_prompt_tokens"].show(0),
                     st["data_seconds"].show(0), st["train_seconds"].show(0)])
    return ("## Cost of each row (per run, mean ± std over seeds)\n\n"
            "Inference: tokens per evaluated task (a Best-of-N row counts all N samples and its judge). Training "
            "data: what building the iterations its weights come from cost (stages adopted from another arm "
            "included, so each row is the full cost of its model; behavior initialization's expert data is the "
            "environment's and costs no model call). Training s: every training stage up to it, the SFT start "
            "included.\n\n" + markdown_table(header, body) + "\n")


def solved_markdown(rows: list[dict[str, Any]]) -> str:
    """Games solved per seed, one column per seed any row ran: the counts behind a mean ± std, which a paired
    question reads game by game (– where a seed's run is not finished)."""
    seeds = sorted({s for r in rows for s in r["solved"]})
    if not seeds:
        return ""
    body = [[r["label"], *(f"{r['solved'][s][0]} / {r['solved'][s][1]}" if s in r["solved"] else "–" for s in seeds)]
            for r in rows]
    return ("Games solved per seed:\n\n" + markdown_table(["arm", *[f"seed {s}" for s in seeds]], body) + "\n")


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
        parts.append(solved_markdown(rows))
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
    if data.get("costs"):
        parts.append(cost_markdown(data))
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
             "costs": [{**c, "stats": {k: v.to_dict() for k, v in c["stats"].items()}} for c in data["costs"]],
             "comparisons": [c.to_dict() for c in data["comparisons"]]}
    atomic_write_json(out / "results.json", plain)
    atomic_write_text(out / "results.md", results_markdown(data))
    return out / "results.md"
