"""``sand eval``: any model (a run's weights, an adapter, a model folder, a hub id) with one recipe's
environment, policy and evaluator, resumable per task."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sand_framework.app.runner import prepare, stopped_because
from sand_framework.config.load import load_recipe, merge, parse_overrides
from sand_framework.engine.context import RunContext, cache_dir
from sand_framework.engine.evaluation import evaluate_tasks
from sand_framework.engine.units import StageUnits
from sand_framework.errors import RecipeError, RunDirError
from sand_framework.logs import run_log
from sand_framework.store import RunDir, RunLayout, read_json


@dataclass
class ModelRef:
    """What ``sand eval`` evaluates: the base model to load and the agent weights on top (None: the base)."""

    label: str
    base: str
    """Alias, local path or hub id, resolved through the plugins' ``sand_resolve_model``."""
    weights: str | None = None
    """A LoRA adapter or full model directory for ``role="agent"``; None evaluates ``base`` itself."""
    source: str = ""


_GENERIC_DIRNAMES = {"final", "adapter", "model", RunLayout.WEIGHTS}


def _dir_label(path: Path) -> str:
    path = path.resolve()
    if path.name in _GENERIC_DIRNAMES or path.name.startswith("checkpoint-"):
        return f"{path.parent.name}-{path.name}"
    return path.name


def run_weights(run: Path, name: str) -> tuple[str | None, str]:
    """The weights a run directory trained under ``name`` (base, sft, iterN, final) and its base model."""
    rd = RunDir.open_existing(run)
    raw = yaml.safe_load((rd.path / RunLayout.RECIPE).read_text()) or {}
    base = (raw.get("model") or {}).get("base", "smollm2-135m")
    if name == "base":
        return None, base
    known = dict((rd.read_json(RunLayout.METRICS, {}) or {}).get("weights") or {})
    done = (rd.read_json(RunLayout.STATE, {"done": {}}) or {"done": {}})["done"]
    for stage, result in done.items():
        parsed = RunLayout.parse_stage(stage)
        if parsed and parsed[0] == "train" and isinstance(result, dict) and result.get("weights"):
            known[f"iter{parsed[1]}"] = result["weights"]
    if "iter0" in known:
        known.setdefault("sft", known["iter0"])
    iterations = int((raw.get("run") or {}).get("iterations", 1))
    if f"iter{iterations}" in known:
        known.setdefault("final", known[f"iter{iterations}"])
    if not known.get(name):
        have = ", ".join(["base", *sorted(k for k, v in known.items() if v)])
        raise RunDirError(f"{run} has no trained weights named {name!r} (yet); it has: {have}")
    return _locate(Path(known[name]), rd.path), base


def _locate(weights: Path, run: Path) -> str:
    """Recorded weights paths are relative to where the run was started; find them inside the run if moved."""
    if not weights.exists() and RunLayout.WEIGHTS in weights.parts:
        parts = weights.parts
        inside = run.joinpath(*parts[len(parts) - 1 - parts[::-1].index(RunLayout.WEIGHTS):])
        if inside.exists():
            return str(inside.resolve())
    return str(weights.resolve()) if weights.exists() else str(weights)


def resolve_model_ref(ref: str, recipe_base: str | None) -> ModelRef:
    """``RUN[:name]``, an adapter dir, a full model dir, an alias or a hub id -> :class:`ModelRef`."""
    run, _, name = ref.rpartition(":")
    if run and (Path(run) / RunLayout.RECIPE).exists():
        weights, base = run_weights(Path(run), name)
        return ModelRef(label=name, base=base, weights=weights, source=f"run {run} ({name})")
    path = Path(ref)
    if (path / RunLayout.RECIPE).exists():
        weights, base = run_weights(path, "final")
        return ModelRef(label="final", base=base, weights=weights, source=f"run {ref} (final)")
    if (path / "adapter_config.json").exists():
        declared = json.loads((path / "adapter_config.json").read_text()).get("base_model_name_or_path")
        if declared and Path(declared).exists():
            base = declared
        elif recipe_base:
            base = recipe_base
        elif declared:
            base = declared
        else:
            raise RunDirError(f"{ref}: adapter_config.json names no base model; give --recipe with model.base")
        return ModelRef(label=_dir_label(path), base=base, weights=str(path.resolve()), source=f"adapter {ref}")
    if (path / "config.json").exists():
        return ModelRef(label=_dir_label(path), base=str(path.resolve()), source=f"model dir {ref}")
    return ModelRef(label=ref.strip().replace("/", "_"), base=ref, source=f"model {ref}")


def evaluate_model(ref: str, recipe_ref: str | None, out_dir: str | os.PathLike, splits: list[str] | None = None,
                   limit: int | None = None, overrides: list[str] = (), plugin_dirs: list[str] = (),
                   label: str | None = None, console: Any = None) -> dict[str, Any]:
    """Evaluate one model with a recipe's environment, policy and evaluator; resumable per task.

    Results go to ``out_dir/eval/<label>/<split>.units.jsonl`` and
    ``out_dir/metrics.json`` (``{"eval": {label: {split: metrics}}, "models": {label: ...}}``;
    several labels may share one ``out_dir`` and are compared by ``sand report``).
    """
    run_part = ref.rpartition(":")[0]
    run_dir = Path(run_part) if run_part and (Path(run_part) / RunLayout.RECIPE).exists() else (
        Path(ref) if (Path(ref) / RunLayout.RECIPE).exists() else None)
    if recipe_ref is not None:
        data, source = load_recipe(recipe_ref, list(overrides))
        dirs = list(plugin_dirs)
    elif run_dir is not None:
        source = run_dir / RunLayout.RECIPE
        data = merge(yaml.safe_load(source.read_text()) or {}, parse_overrides(list(overrides)))
        dirs = list(plugin_dirs) or (read_json(run_dir / RunLayout.PLUGINS, {}) or {}).get("plugin_dirs", [])
    else:
        raise RunDirError(f"{ref} is not a run directory; say which recipe's environment and evaluator to use "
                          "with --recipe (e.g. --recipe quickstart)")
    recipe, plugins, registries = prepare(data, dirs, str(source))
    model = resolve_model_ref(ref, recipe.model.base)
    if label:
        model.label = label
    splits = list(splits) if splits else list(recipe.eval.splits)
    limit = recipe.eval.limit if limit is None else limit

    rd = RunDir(Path(out_dir))
    rd.path.mkdir(parents=True, exist_ok=True)
    identity = {"model": ref, "base_model": model.base, "weights": model.weights, "recipe": str(source),
                "environment": _slot(recipe, "environment"), "evaluator": _slot(recipe, "evaluator")}
    rd.lock()
    try:
        with run_log(rd.path / RunLayout.LOG):  # as a run's: records, warnings, why it stopped
            spec = rd.read_json(RunLayout.EVAL_SPEC, {"models": {}})
            old = spec["models"].get(model.label)
            same = ("base_model", "weights", "environment", "evaluator")  # not how the model or recipe was named
            if old is not None and {k: old.get(k) for k in same} != {k: identity[k] for k in same}:
                raise RunDirError(f"{rd.path} already holds an evaluation labelled {model.label!r} of a different "
                                  f"model or setup ({old.get('model')}); use another -o or --label")
            spec["models"][model.label] = identity
            rd.write_json(RunLayout.EVAL_SPEC, spec)
            ctx = RunContext(recipe=recipe, run_dir=rd, plugins=plugins, registries=registries)
            if console is not None:
                ctx.console = console
            ctx.base_model_path = plugins.resolve_model(model.base, cache_dir())
            ctx.console.print(f"[bold]eval[/] {model.label}: {model.source}; base {ctx.base_model_path}"
                              + (f", agent weights {model.weights}" if model.weights else ""))
            try:
                env, evaluator = ctx.component("environment"), ctx.component("evaluator")

                def agent():
                    policy = ctx.policy()
                    policy.set_agent_weights(model.weights)
                    return policy

                results = {}
                known = env.splits()
                if unknown := [s for s in splits if s not in known]:
                    raise RecipeError([f"--split {s!r}: {env.name} has no such split; choose from {', '.join(known)}"
                                       for s in unknown])
                for split in splits:
                    units = StageUnits.open(f"eval {model.label}/{split}",
                                            rd.units(RunLayout.eval_units(model.label, split)),
                                            env.tasks(split)[:limit], f"the same `sand eval` with -o {rd.path}",
                                            ctx.console)
                    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                        TimeElapsedColumn(), console=ctx.console,
                                        disable=os.environ.get("SAND_NO_PROGRESS") == "1")
                    task_results = evaluate_tasks(units, evaluator, env, agent, recipe.eval.batch_size,
                                                  progress, f"eval {model.label}/{split}")
                    results[split] = evaluator.aggregate(task_results)
            except Exception as exc:
                again = shlex.join(["sand", "eval", ref, *(["--recipe", str(recipe_ref)] if recipe_ref else []),
                                    *[a for split in splits for a in ("--split", split)], "--limit", str(limit),
                                    *overrides, "-o", str(rd.path), "--label", model.label])
                if (known := stopped_because(exc, rd.path, again)) is not None:
                    raise known from exc
                raise
            finally:
                ctx.close()
            metrics = rd.read_json(RunLayout.METRICS, {}) or {}
            metrics.setdefault("eval", {})[model.label] = results
            metrics.setdefault("models", {})[model.label] = identity
            metrics["recipe"] = recipe.run.name
            rd.write_json(RunLayout.METRICS, metrics)
    finally:
        rd.unlock()
    return metrics


def _slot(recipe: Any, kind: str) -> dict[str, Any]:
    name, params = recipe.slots[kind]
    return {"name": name, **dataclasses.asdict(params)}
