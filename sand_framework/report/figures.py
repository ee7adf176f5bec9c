"""Figures for ``sand report`` and ``sand sweep`` (matplotlib, Agg backend, small PNGs at ~100 dpi)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from sand_framework.metrics import BANDS, aggregate_results, by_band, step_profile, trajectory_deliberation_rates
from sand_framework.report.data import RunData
from sand_framework.report.tables import all_splits

DPI = 100


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 9, "axes.titlesize": 10, "legend.fontsize": 8, "axes.spines.top": False})
    return plt


def series(runs: list[RunData]) -> list[tuple[RunData, str, str]]:
    """(run, model, display name) for every evaluated model; the run label is kept only when comparing runs."""
    many = len(runs) > 1
    return [(r, m, f"{r.label}: {m}" if many else m) for r in runs for m in r.models]


def _colors(n: int) -> list:
    plt = _plt()
    cmap = plt.get_cmap("tab10")
    return [cmap(i % 10) for i in range(n)]


def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    _plt().close(fig)
    return path


def results_figure(runs: list[RunData], path: Path) -> Path | None:
    """Grouped bars: average reward x100 per split, one bar per run/model."""
    ser = series(runs)
    splits = all_splits(runs)
    if not ser or not splits:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(4.5, 1.2 + 0.45 * len(ser) * len(splits)), 3.2))
    width = 0.8 / len(ser)
    for i, ((run, model, name), color) in enumerate(zip(ser, _colors(len(ser)))):
        xs, ys = [], []
        for j, s in enumerate(splits):
            res = run.evals[model].get(s)
            if res:
                xs.append(j - 0.4 + width * (i + 0.5))
                ys.append(aggregate_results(res)["avg_reward"])
        bars = ax.bar(xs, ys, width * 0.95, label=name, color=color)
        ax.bar_label(bars, fmt="%.1f", fontsize=7, padding=1)
    ax.set_xticks(range(len(splits)), splits)
    ax.set_xlabel("split")
    ax.set_ylabel("average reward ×100")
    ax.set_ylim(0, 105)
    ax.set_title("Greedy evaluation: average reward per split")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return _save(fig, path)


def deliberation_violin(runs: list[RunData], path: Path) -> Path | None:
    """Violins of per-trajectory deliberation rate in each difficulty band, one per run/model.

    None (no figure) when no evaluated episode deliberated at all: every violin would be a flat line at 0.
    """
    ser = series(runs)
    if not any(rate > 0 for run, model, _ in ser for rate in trajectory_deliberation_rates(run.all_results(model))):
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(5.0, 1.5 + 0.5 * len(ser) * len(BANDS)), 3.4))
    width = 0.8 / len(ser)
    rng = random.Random(0)
    handles = []
    for i, ((run, model, name), color) in enumerate(zip(ser, _colors(len(ser)))):
        groups = by_band(run.keyed(model), run.bands)
        for j, band in enumerate(BANDS):
            data = trajectory_deliberation_rates(groups[band])
            x = j - 0.4 + width * (i + 0.5)
            if not data:
                continue
            if len(set(data)) > 1:
                parts = ax.violinplot([data], positions=[x], widths=width * 0.9, showmedians=True,
                                      showextrema=False)
                for body in parts["bodies"]:
                    body.set_facecolor(color)
                    body.set_edgecolor(color)
                    body.set_alpha(0.45)
                parts["cmedians"].set_color(color)
            else:  # a violin needs spread; a flat line marks a constant rate
                ax.hlines(data[0], x - width * 0.4, x + width * 0.4, color=color, lw=2.5)
            ax.scatter([x + rng.uniform(-0.12, 0.12) * width for _ in data], data, s=7, color=color, alpha=0.8,
                       zorder=3, linewidths=0)
            ax.text(x, -0.13, f"n={len(data)}", ha="center", va="top", fontsize=6, color="0.35")
        handles.append(plt.Rectangle((0, 0), 1, 1, color=color, alpha=0.6, label=name))
    refs = sorted({r.reference for r in runs if r.reference})
    ax.set_xticks(range(len(BANDS)), BANDS)
    ax.set_xlim(-0.55, len(BANDS) - 0.45)
    ax.set_ylim(-0.2, 1.05)
    ax.set_xlabel(f"task difficulty (terciles of the {'/'.join(refs) or 'reference'} model's reward per task)")
    ax.set_ylabel("deliberation rate per trajectory")
    ax.set_title("Deliberation rate by task difficulty")
    ax.axhline(0, color="0.85", lw=0.6, zorder=0)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return _save(fig, path)


def step_reward_figure(runs: list[RunData], path: Path) -> Path | None:
    """Per model: bars = mean reward of episodes that ended at step t; line = deliberation rate at step t."""
    ser = [(r, m, n) for r, m, n in series(runs) if r.all_results(m)]
    if not ser:
        return None
    plt = _plt()
    ncols = min(3, len(ser))
    nrows = (len(ser) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols, 2.7 * nrows), squeeze=False)
    for ax in axes.flat[len(ser):]:
        ax.set_visible(False)
    for idx, ((run, model, name), color) in enumerate(zip(ser, _colors(len(ser)))):
        ax = axes.flat[idx]
        prof = step_profile(run.all_results(model))
        steps = [p["step"] for p in prof]
        ended = [(p["step"], p["avg_reward"]) for p in prof if p["avg_reward"] is not None]
        ax.bar([s for s, _ in ended], [r for _, r in ended], color=color, alpha=0.55, label="reward ×100 (ended at t)")
        for p in prof:
            if p["ended"]:
                ax.text(p["step"], (p["avg_reward"] or 0) + 2, str(p["ended"]), ha="center", fontsize=6, color="0.3")
        ax.set_ylim(0, 110)
        ax.set_xlabel("step t")
        if idx % ncols == 0:
            ax.set_ylabel("avg reward ×100")
        ax.set_title(name)
        twin = ax.twinx()
        twin.plot(steps, [p["deliberation_rate"] for p in prof], color="black", marker="o", ms=3, lw=1.2,
                  label="deliberation rate at t")
        twin.set_ylim(0, 1.05)
        if idx % ncols == ncols - 1 or idx == len(ser) - 1:
            twin.set_ylabel("deliberation rate")
        twin.spines["top"].set_visible(False)
        if steps:
            ax.set_xlim(0.4, max(steps) + 0.6)
            ax.set_xticks(steps if len(steps) <= 15 else steps[::max(1, len(steps) // 10)])
        if idx == 0:
            h1, l1 = ax.get_legend_handles_labels()
            h2, l2 = twin.get_legend_handles_labels()
            ax.legend(h1 + h2, l1 + l2, loc="upper left", frameon=False, fontsize=7)
    fig.suptitle("Reward by episode length (bars; numbers = episodes) and deliberation rate per step", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


@dataclass
class SeedRow:
    """One row of a sweep's results table for :func:`success_by_seed`: every seed's value and an interval."""

    label: str
    split: str
    per_seed: dict[int, float]
    """seed -> success %, every seed the table counts for this row."""
    interval: tuple[float, float] | None = None
    """95% interval of the success %, or None when the per-game outcomes are missing."""
    games: int = 0
    """How many distinct games the interval rests on."""


SEED_GID = "seeds:"
"""Prefix of the ``gid`` of each row's per-seed scatter (``seeds:<split>:<label>``), so tests can read the points."""


def success_by_seed(rows: list[SeedRow]):
    """One panel per split: each row's per-seed success % as dots (labelled by seed), its mean and interval.

    Rows run down the panel with success % across it, so the long row labels a sweep gives its arms read
    horizontally instead of crowding a rotated x-axis. Every seed is drawn, so a figure can never show one seed
    where the table averages several. Returns the matplotlib figure (None without rows);
    :func:`success_by_seed_figure` saves it.
    """
    if not rows:
        return None
    plt = _plt()
    splits = list(dict.fromkeys(r.split for r in rows))
    every_label = list(dict.fromkeys(r.label for r in rows))
    colors = dict(zip(every_label, _colors(len(every_label))))  # a row keeps its colour in every panel
    counts = [sum(r.split == split for r in rows) for split in splits]
    # one panel per split, stacked, each with only the rows evaluated on it (an experiment whose arms evaluate
    # different splits would otherwise draw every panel with empty slots); each panel as tall as its rows
    longest = max(len(label) for label in every_label)  # the row labels take the figure's left part
    size = (max(6.0, 5.0 + 0.06 * longest), 1.1 * len(splits) + 0.5 * sum(counts))
    fig, axes = plt.subplots(len(splits), 1, figsize=size,
                             squeeze=False, sharex=True, gridspec_kw={"height_ratios": counts})
    for ax, split in zip(axes.flat, splits):
        labels = list(dict.fromkeys(r.label for r in rows if r.split == split))
        ticks = []
        for row in (r for r in rows if r.split == split):
            y, color = labels.index(row.label), colors[row.label]
            seeds = sorted(row.per_seed)
            ys = [y - 0.35 + 0.4 * (i + 0.5) / len(seeds) for i in range(len(seeds))]
            xs = [row.per_seed[s] for s in seeds]
            dots = ax.scatter(xs, ys, s=18, color=color, zorder=3, linewidths=0)
            dots.set_gid(f"{SEED_GID}{split}:{row.label}")
            for xi, yi, s in zip(xs, ys, seeds):
                ax.annotate(f"s{s}", (xi, yi), xytext=(4, 0), textcoords="offset points",
                            ha="left", va="center", fontsize=5.5, color="0.35")
            if xs:
                mean = sum(xs) / len(xs)
                if row.interval is not None:
                    lo, hi = row.interval
                    ax.errorbar([mean], [y + 0.22], xerr=[[max(0.0, mean - lo)], [max(0.0, hi - mean)]],
                                fmt="D", ms=4, color=color, ecolor=color, elinewidth=1.2, capsize=3, zorder=4)
                else:
                    ax.scatter([mean], [y + 0.22], marker="D", s=16, color=color, zorder=4)
            note = f"{len(seeds)} seed{'s' * (len(seeds) != 1)}" + (f", {row.games} games" if row.games else "")
            ticks.append((y, row.label, note))
        ax.set_yticks([y for y, _, _ in ticks], [label for _, label, _ in ticks], fontsize=8)
        for y, _, note in ticks:  # the evidence each row rests on, at the right edge
            ax.text(1.01, y, note, transform=ax.get_yaxis_transform(), ha="left", va="center", fontsize=6,
                    color="0.35")
        ax.set_ylim(len(labels) - 0.5, -0.5)  # the table's first row on top
        ax.set_xlim(-3, 103)
        for x in (0, 25, 50, 75, 100):
            ax.axvline(x, color="0.9", lw=0.6, zorder=0)
        ax.set_title(f"split {split}", fontsize=9)
    axes.flat[-1].set_xlabel("success %")
    fig.suptitle("Success per seed (dots), mean over seeds (◆) and 95% Wilson interval over games", fontsize=10)
    fig.tight_layout()
    return fig


def success_by_seed_figure(rows: list[SeedRow], path: Path) -> Path | None:
    """Save :func:`success_by_seed` as a PNG (``sand sweep``: ``OUTPUT_DIR/success_by_arm.png``)."""
    fig = success_by_seed(rows)
    return _save(fig, path) if fig is not None else None
