"""A sweep file: the arms of an experiment (recipes), the seeds, and which arms share their SFT start.

Example (``experiments/miniature.yaml``)::

    name: miniature
    output_dir: runs/miniature
    seeds: [0, 1, 2]
    arms:
      - name: sand
        recipe: ../recipes/repro/sand.yaml
        report: {sft: SFT, final: SAND iter 1}
      - name: wo-eac
        recipe: ../recipes/repro/wo-eac.yaml
        reuse: sand                 # same seed's expert data + SFT weights
        report: {final: SAND w/o EAC}

Every arm is an ordinary recipe run (``run.seed`` set per seed) in
``OUTPUT_DIR/<arm>/seed<k>``, so each can be inspected, reported and resumed
on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sand_framework.config.typecheck import build, check_fields
from sand_framework.errors import RecipeError


@dataclass
class ArmSpec:
    name: str
    recipe: str
    """Recipe path (relative to the sweep file) or bundled recipe name."""
    overrides: list[str] = field(default_factory=list)
    """``key=value`` overrides on top of the recipe (``run.seed`` is set by the sweep)."""
    reuse: str | None = None
    """An earlier arm whose run of the same seed provides this arm's ``reuse_stages``."""
    reuse_stages: list[str] = field(default_factory=lambda: ["expert", "train/iter0"])
    seeds: list[int] | None = None
    """Seeds for this arm (default: the sweep's); e.g. ``[0]`` for a deterministic arm like greedy base eval."""
    report: dict[str, str] = field(default_factory=lambda: {"final": ""})
    """Evaluated models to tabulate, each with its row label (empty: the arm's name)."""


@dataclass
class SweepSpec:
    name: str
    arms: list[ArmSpec]
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    output_dir: str = "runs"
    """Relative to the working directory, like a recipe's ``run.output_dir``."""
    splits: list[str] | None = None
    """Eval splits to tabulate (default: every split the arms evaluated)."""
    description: str = ""
    path: Path = field(default=Path("."), repr=False)
    """The sweep file (recipes are resolved relative to its folder)."""

    def arm(self, name: str) -> ArmSpec:
        return next(a for a in self.arms if a.name == name)

    def seeds_of(self, arm: ArmSpec) -> list[int]:
        return list(arm.seeds) if arm.seeds is not None else list(self.seeds)

    def recipe_path(self, arm: ArmSpec) -> str:
        local = self.path.parent / arm.recipe
        return str(local) if local.is_file() else arm.recipe


def load_sweep(path: str | Path) -> SweepSpec:
    """Read and check a sweep file; every problem is reported at once (exit 2)."""
    path = Path(path)
    if not path.is_file():
        raise RecipeError([f"sweep file {str(path)!r} not found"])
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise RecipeError([f"invalid YAML: {exc}"], str(path)) from exc
    if not isinstance(data, dict):
        raise RecipeError(["a sweep file must be a mapping at the top level"], str(path))
    top = {k: v for k, v in data.items() if k != "arms"}
    problems = check_fields(top, SweepSpec, "sweep", ignore=("path",))
    arms_data = data.get("arms")
    if not isinstance(arms_data, list) or not arms_data:
        problems.append("arms: expected a non-empty list of {name, recipe, ...}")
        arms_data = []
    arms: list[ArmSpec] = []
    for i, node in enumerate(arms_data):
        where = f"arms[{i}]"
        if not isinstance(node, dict):
            problems.append(f"{where}: expected a mapping, got {node!r}")
            continue
        found = check_fields(node, ArmSpec, where)
        found += [f"{where}.{k}: required" for k in ("name", "recipe") if k not in node]
        problems += found
        if not found:
            arms.append(build(ArmSpec, node))
    names = [n.get("name") if isinstance(n, dict) else None for n in arms_data]
    for i, node in enumerate(arms_data):
        if not isinstance(node, dict):
            continue
        name, reuse = node.get("name"), node.get("reuse")
        if name is not None and names.count(name) > 1 and names.index(name) == i:
            problems.append(f"arms: name {name!r} is used more than once")
        if reuse is not None and reuse not in names[:i]:
            earlier = [str(n) for n in names[:i] if n is not None]
            problems.append(f"arms.{name}.reuse: {reuse!r} must name an arm listed before it "
                            f"(earlier arms: {', '.join(earlier) or 'none'})")
    if problems:
        raise RecipeError(problems, str(path))
    spec = build(SweepSpec, {**top, "arms": []})
    spec.arms, spec.path = arms, path.resolve()
    for arm in spec.arms:
        if arm.reuse is not None:
            missing = set(spec.seeds_of(arm)) - set(spec.seeds_of(spec.arm(arm.reuse)))
            if missing:
                problems.append(f"arms.{arm.name}: seeds {sorted(missing)} are not run by arm {arm.reuse!r} it reuses")
    if problems:
        raise RecipeError(problems, str(path))
    return spec


def arm_overrides(arm: ArmSpec, seed: int) -> list[str]:
    return [*arm.overrides, f"run.seed={seed}"]


def describe(spec: SweepSpec) -> list[dict[str, Any]]:
    """One row per (arm, seed) run the sweep makes, in order."""
    seeds = sorted({s for arm in spec.arms for s in spec.seeds_of(arm)})
    return [{"arm": arm.name, "seed": s, "recipe": spec.recipe_path(arm), "overrides": arm_overrides(arm, s),
             "reuse": arm.reuse}
            for s in seeds for arm in spec.arms if s in spec.seeds_of(arm)]
