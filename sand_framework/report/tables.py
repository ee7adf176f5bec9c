"""Markdown tables for ``sand report``: results, deliberation, tokens, difficulty bands, synthesis."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sand_framework.components.declared import SLOTS
from sand_framework.metrics import (
    BANDS,
    aggregate_results,
    by_band,
    token_ratio,
    tokens_per_task,
)
from sand_framework.report.data import RunData, split_order
from sand_framework.rollout.metered import ROLES


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]], align: str | None = None) -> str:
    """A GitHub-flavoured markdown table; ``align`` has one ``l``/``r`` per column (default: first left)."""
    align = align or "l" + "r" * (len(header) - 1)
    sep = ["---" if a == "l" else "--:" for a in align]
    lines = ["| " + " | ".join(map(str, header)) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _cell(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v).replace("|", "\\|")


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f}%"


def _ratio(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}×"


def _sft_of(run: RunData) -> str | None:
    return next((m for m in ("sft", "iter0") if m in run.evals), None)


def all_splits(runs: list[RunData]) -> list[str]:
    return sorted({s for r in runs for s in r.splits}, key=split_order)


def results_table(runs: list[RunData]) -> str:
    """Average reward x100 and success rate per split, one row per run and model (base/SFT rows first)."""
    splits = all_splits(runs)
    header = ["run", "model"] + [f"{s} {col}" for s in splits for col in ("reward", "success %")]
    if len(splits) > 1:
        header.append("mean reward")
    rows = []
    for run in runs:
        for model in run.models:
            row: list[Any] = [run.label, model]
            rewards = []
            for s in splits:
                res = run.evals[model].get(s)
                if res:
                    agg = aggregate_results(res)
                    row += [f"{agg['avg_reward']:.1f} (n={agg['tasks']})", f"{agg['success_rate']:.1f}"]
                    rewards.append(agg["avg_reward"])
                else:
                    row += [None, None]
            if len(splits) > 1:
                row.append(f"{sum(rewards) / len(rewards):.1f}" if len(rewards) == len(splits) else None)
            rows.append(row)
    return markdown_table(header, rows, "ll" + "r" * (len(header) - 2))


def deliberation_table(runs: list[RunData]) -> str:
    """Steps, invalid actions and deliberation rates per step and per trajectory, per split."""
    header = ["run", "model", "split", "tasks", "avg steps", "invalid / task", "delib. rate / step",
              "delib. rate / traj."]
    rows = []
    for run in runs:
        for model in run.models:
            for s in sorted(run.evals[model], key=split_order):
                agg = aggregate_results(run.evals[model][s])
                rows.append([run.label, model, s, agg["tasks"], agg["avg_steps"], agg["invalid_actions_per_task"],
                             _pct(agg["deliberation_rate_step"]), _pct(agg["deliberation_rate_traj"])])
    return markdown_table(header, rows, "lll" + "r" * 5)


def tokens_table(runs: list[RunData]) -> str:
    """Tokens per task (generated, and prompt + generated) with ratios to the same run's SFT agent."""
    header = ["run", "model", "split", "generated tok / task", "× SFT", "prompt+generated tok / task", "× SFT"]
    rows = []
    for run in runs:
        sft = _sft_of(run)
        for model in run.models:
            for s in sorted(run.evals[model], key=split_order):
                res = run.evals[model][s]
                ref = run.evals.get(sft, {}).get(s) if sft else None
                gen, tot = tokens_per_task(res, "completion"), tokens_per_task(res, "total")
                rows.append([run.label, model, s, f"{gen:.1f}",
                             _ratio(token_ratio(gen, tokens_per_task(ref, "completion") if ref else None)),
                             f"{tot:.1f}", _ratio(token_ratio(tot, tokens_per_task(ref, "total") if ref else None))])
    return markdown_table(header, rows, "lll" + "r" * 4)


def bands_table(runs: list[RunData]) -> str:
    """Per difficulty band (all splits pooled): tasks, reward and deliberation rates of each model."""
    header = ["run", "model", "band", "tasks", "avg reward", "success %", "delib. rate / step", "delib. rate / traj."]
    rows = []
    for run in runs:
        for model in run.models:
            groups = by_band(run.keyed(model), run.bands)
            for band in BANDS:
                res = groups[band]
                if not res:
                    rows.append([run.label, model, band, 0, None, None, None, None])
                    continue
                agg = aggregate_results(res)
                rows.append([run.label, model, band, agg["tasks"], f"{agg['avg_reward']:.1f}",
                             f"{agg['success_rate']:.1f}", _pct(agg["deliberation_rate_step"]),
                             _pct(agg["deliberation_rate_traj"])])
    return markdown_table(header, rows, "lll" + "r" * 5)


def band_reference_note(runs: list[RunData]) -> str:
    parts = []
    for run in runs:
        if run.reference is None:
            parts.append(f"{run.label}: no evaluated model")
            continue
        counts = {b: sum(v == b for v in run.bands.values()) for b in BANDS}
        parts.append(f"{run.label}: bands from **{run.reference}** rewards over {len(run.bands)} tasks "
                     f"(hard {counts['hard']}, medium {counts['medium']}, easy {counts['easy']})")
    return "; ".join(parts) + "."


def synthesis_table(runs: list[RunData]) -> str:
    """What each SAND iteration's synthesis examined and produced."""
    header = ["run", "iter", "trajectories", "steps examined", "deliberated", "rate", "candidates / delib. step",
              "rollouts", "rollout steps", "synth. failed", "synth. fallbacks", "synth. retries",
              "critiques cut", "valid samples"]
    rows = []
    for run in runs:
        for k, s in sorted(run.synthesis.items()):
            steps, delib = s.get("steps", 0), s.get("deliberated", 0)
            valid = (f"{s['samples_valid']}/{s['samples_total']}" if s.get("samples_total") else None)
            rows.append([run.label, f"{k}{' (partial)' if s.get('partial') else ''}", s.get("trajectories"), steps,
                         delib, _pct(delib / steps if steps else None),
                         f"{s.get('candidates', 0) / delib:.2f}" if delib else None, s.get("rollouts"),
                         s.get("rollout_steps"), s.get("synthesis_failed"), s.get("fallbacks"), s.get("retries"),
                         _of(s.get("critiques_truncated"), s.get("critiques")), valid])
    return markdown_table(header, rows, "ll" + "r" * 12)


ENGINE_TIME_NOTE = ("Per data-building stage: its wall seconds and the seconds each engine role (the agent: "
                    "samples, rollouts, explorations; the base model: critiques, syntheses) had at least one "
                    "request outstanding, with their share of the wall. On one in-process model the roles take "
                    "turns; on an engine per role, both shares near 100% mean neither waits for the other.")


def engine_time_table(runs: list[RunData]) -> str:
    """Per data-building stage: its wall seconds and each engine role's busy seconds and share of them."""
    header = ["run", "iter", "wall s", *[f"{role} engine busy s (share)" for role in ROLES]]
    rows = []
    for run in runs:
        for k, e in sorted(run.engine.items()):
            cells = []
            for role in ROLES:
                r = e.get(role)
                cells.append(f"{r['busy_seconds']:.1f} ({_pct(r['utilization'])})" if isinstance(r, dict) else None)
            rows.append([run.label, f"{k}{' (partial)' if e.get('partial') else ''}", f"{e['wall_seconds']:.1f}",
                         *cells])
    return markdown_table(header, rows, "ll" + "r" * (1 + len(ROLES)))


def _of(part: Any, whole: Any) -> str | None:
    """``part/whole``, or None where a run (written before they were counted) lacks them."""
    return f"{part}/{whole}" if isinstance(part, int) and isinstance(whole, int) else None


def components_table(runs: list[RunData]) -> str:
    """Which run is which: path, base model and each run's components (the kinds declared once, in
    :mod:`sand_framework.components.declared`), less those every run of the table shares with the others."""
    present = [k for k in SLOTS if any(run.component(k) != "-" for run in runs)]
    kinds = [k for k in present if len({run.component(k) for run in runs}) > 1] if len(runs) > 1 else present
    header = ["run", "path", "base model", "iterations", *kinds]
    rows = []
    for run in runs:
        rows.append([run.label, f"`{run.shown_path}`", (run.recipe.get("model") or {}).get("base", "–"),
                     (run.recipe.get("run") or {}).get("iterations", "–"), *[run.component(k) for k in kinds]])
    return markdown_table(header, rows, "l" * len(header))
