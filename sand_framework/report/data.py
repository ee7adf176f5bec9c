"""Loading what reports need from run directories (``sand run``) and evaluation folders (``sand eval``).

Everything is read from the durable artifacts (``eval/<model>/<split>.units.jsonl``,
``state.json``, ``iterK/synthesis.units.jsonl``, ``recipe.yaml``), so a report
can be made of an unfinished run too: it shows whatever has been recorded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sand_framework.components import TaskResult
from sand_framework.components.method import unit_totals
from sand_framework.errors import RunDirError
from sand_framework.metrics import difficulty_bands, engine_time, task_results_from_units
from sand_framework.store import RunLayout, UnitLog, read_json

Key = tuple[str, str]
"""(split, task_id): identifies an evaluated task."""

REFERENCE_ORDER = ("base", "sft", "iter0")
"""Which evaluated model defines the difficulty bands: the first of these that was evaluated."""


def model_order(name: str) -> tuple[int, int, str]:
    """base, sft, iter0, iter1, ..., final, then anything else by name."""
    if name == "base":
        return (0, 0, name)
    if name in ("sft", "iter0"):
        return (1, 0, name)
    m = re.fullmatch(r"iter(\d+)", name)
    if m:
        return (2, int(m.group(1)), name)
    if name == "final":
        return (3, 0, name)
    return (4, 0, name)


def split_order(name: str) -> tuple[int, str]:
    order = {"seen": 0, "dev": 0, "valid_seen": 0, "unseen": 1, "valid_unseen": 1, "test": 2}
    return (order.get(name, 9), name)


@dataclass
class RunData:
    """One run directory (or ``sand eval`` folder) as the report sees it."""

    path: Path
    label: str
    name: str
    recipe: dict[str, Any] = field(default_factory=dict)
    evals: dict[str, dict[str, list[TaskResult]]] = field(default_factory=dict)
    """model -> split -> per-task results, in evaluation order."""
    synthesis: dict[int, dict[str, Any]] = field(default_factory=dict)
    """iteration -> synthesis totals (steps examined, deliberated, candidates, rollouts, fallbacks, ...)."""
    engine: dict[int, dict[str, Any]] = field(default_factory=dict)
    """iteration -> the data-building stage's engine time per role (:func:`sand_framework.metrics.engine_time`)."""
    reference: str | None = None
    bands: dict[Key, str] = field(default_factory=dict)

    @property
    def models(self) -> list[str]:
        return sorted(self.evals, key=model_order)

    @property
    def splits(self) -> list[str]:
        return sorted({s for per in self.evals.values() for s in per}, key=split_order)

    def keyed(self, model: str, split: str | None = None) -> list[tuple[Key, TaskResult]]:
        """(key, result) pairs of a model, on one split or all of them."""
        return [((s, r.trajectory.task_id), r) for s, rs in sorted(self.evals.get(model, {}).items())
                if split is None or s == split for r in rs]

    def all_results(self, model: str) -> list[TaskResult]:
        return [r for s in self.splits for r in self.evals.get(model, {}).get(s, [])]

    @property
    def shown_path(self) -> str:
        """The run's path for the report: relative to the working directory when inside it, so that a report
        shared with others (or committed, as docs/example-report) carries no machine's absolute paths."""
        try:
            return str(self.path.resolve().relative_to(Path.cwd().resolve()))
        except ValueError:
            return str(self.path)

    def component(self, kind: str) -> str:
        node = self.recipe.get(kind)
        return node.get("name", "?") if isinstance(node, dict) else str(node or "-")


def load_run(path: str | Path) -> RunData:
    path = Path(path)
    has_eval = (path / RunLayout.EVAL).is_dir()
    if not (path / RunLayout.RECIPE).exists() and not (path / RunLayout.METRICS).exists() and not has_eval:
        raise RunDirError(f"{path} is neither a SAND run directory (recipe.yaml) nor a `sand eval` folder "
                          "(metrics.json, eval/)")
    recipe = {}
    if (path / RunLayout.RECIPE).exists():
        recipe = yaml.safe_load((path / RunLayout.RECIPE).read_text()) or {}
    metrics = read_json(path / RunLayout.METRICS, {}) or {}
    name = (recipe.get("run") or {}).get("name") or path.name
    run = RunData(path=path, label=name, name=name, recipe=recipe)
    if has_eval:
        for model_dir in sorted(p for p in (path / RunLayout.EVAL).iterdir() if p.is_dir()):
            for log_path in sorted(model_dir.glob(f"*{RunLayout.UNITS}")):
                results = task_results_from_units(UnitLog(log_path).values())
                if results:
                    run.evals.setdefault(model_dir.name, {})[log_path.name[: -len(RunLayout.UNITS)]] = results
    run.synthesis = load_synthesis(path, metrics)
    run.engine = load_engine_time(path)
    run.reference = next((m for m in REFERENCE_ORDER if m in run.evals), run.models[0] if run.models else None)
    if run.reference is not None:
        run.bands = difficulty_bands({k: r.trajectory.reward for k, r in run.keyed(run.reference)})
    return run


def load_synthesis(path: Path, metrics: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Synthesis totals per iteration: from state.json when the stage finished, else from its unit log."""
    done = (read_json(path / RunLayout.STATE, {"done": {}}) or {"done": {}}).get("done", {})
    out: dict[int, dict[str, Any]] = {}
    for k in RunLayout.iterations_in(path):
        d = path / RunLayout.synthesis_units(k)
        if not d.is_file():
            continue
        summary = done.get(RunLayout.synth_stage(k)) or (metrics.get("synthesis") or {}).get(f"iter{k}")
        if not summary:
            units = list(UnitLog(d).values())
            summary = {**unit_totals(units), "partial": True} if units else None
        if summary:
            out[k] = dict(summary)
    return out


def load_engine_time(path: Path) -> dict[int, dict[str, Any]]:
    """Engine time per role of each data-building stage, from its units' batch costs (so partial stages show)."""
    done = (read_json(path / RunLayout.STATE, {"done": {}}) or {"done": {}}).get("done", {})
    out: dict[int, dict[str, Any]] = {}
    for k in RunLayout.iterations_in(path):
        log = path / RunLayout.synthesis_units(k)
        units = list(UnitLog(log).values()) if log.is_file() else []
        if units:
            out[k] = {**engine_time(units), "partial": RunLayout.synth_stage(k) not in done}
    return out


def set_reference(runs: list[RunData], ref: str) -> None:
    """Band every run's tasks by one reference: ``PATH[:MODEL]``, a run or `sand eval` folder and its model.

    Useful when the runs did not evaluate their base model (``sand eval RUN:base -o DIR --label base``)
    and to give ablations the same bands.
    """
    path, _, model = ref.rpartition(":") if ":" in ref and not Path(ref).exists() else (ref, "", "")
    src = load_run(path)
    model = model or src.reference
    if model not in src.evals:
        raise RunDirError(f"--bands-from {ref}: {path} has no evaluation of {model!r} "
                          f"(it has: {', '.join(src.models) or 'none'})")
    bands = difficulty_bands({k: r.trajectory.reward for k, r in src.keyed(model)})
    for run in runs:
        run.reference, run.bands = f"{model} ({src.label})", bands


def load_runs(paths: list[str | Path], bands_from: str | None = None) -> list[RunData]:
    """Load runs and give each a unique label: its run name, or the folder name where names repeat."""
    runs = [load_run(p) for p in paths]
    if bands_from:
        set_reference(runs, bands_from)
    names = [r.name for r in runs]
    for r in runs:
        if names.count(r.name) > 1:
            r.label = r.path.resolve().name
    labels = [r.label for r in runs]
    for r in runs:  # sweep layout OUT/<arm>/seed<k>: the arm tells them apart
        if labels.count(r.label) > 1:
            r.label = f"{r.path.resolve().parent.name}/{r.path.resolve().name}"
    labels = [r.label for r in runs]
    for i, r in enumerate(runs):
        if labels.count(r.label) > 1:
            r.label = f"{r.label}#{i + 1}"
    return runs
