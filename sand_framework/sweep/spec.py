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
on its own. ``comparisons`` name the experiment's questions as pairs of table
rows (``arm/model``); :mod:`sand_framework.sweep.compare` answers them with
paired tests over the same games.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import annotated_types as at
import yaml

from sand_framework.config.schema import NAMED_MODELS, is_model_name
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
class ComparisonSpec:
    """One question of the experiment: is row ``a`` better than row ``b`` on the same games?

    ``a`` and ``b`` are ``arm/model`` (a model the arm lists in ``report``), i.e. rows of the results table.
    """

    question: str
    a: str
    b: str

    def side(self, which: str) -> tuple[str, str]:
        """(arm, model) of side ``a`` or ``b``."""
        arm, _, model = getattr(self, which).partition("/")
        return arm, model


@dataclass
class SweepSpec:
    name: str
    arms: list[ArmSpec]
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    output_dir: str = "runs"
    """Relative to the working directory, like a recipe's ``run.output_dir``."""
    splits: list[str] | None = None
    """Eval splits to tabulate (default: every split the arms evaluated)."""
    comparisons: list[ComparisonSpec] = field(default_factory=list)
    """Paired questions between table rows, answered in results.md (``sweep.compare``)."""
    alpha: Annotated[float, at.Interval(gt=0, lt=1)] = 0.05
    """Significance level of the comparisons' verdicts (two-sided; per question unless ``correction`` says)."""
    correction: Literal["none", "bonferroni", "holm"] = "none"
    """How the verdicts account for asking several questions: ``none`` (each sign-test p against ``alpha``),
    ``bonferroni`` (p times the number of questions) or ``holm`` (Holm's step-down, never less powerful than
    Bonferroni). Either correction keeps the chance of any false "better" among all the questions below ``alpha``;
    the number of questions is the declared comparisons times the splits tabulated (declare ``splits`` to fix it
    before any run finishes)."""
    pair_starts: Literal["tensors", "recipe"] = "tensors"
    """When two runs of one seed count as having the same SFT start, and are paired: ``tensors`` (their
    ``weights/iter0`` tensors are the same) or ``recipe`` (also when the tensors differ but the start was
    computed by the same recipe, data, seed and plugin versions: its ``train/iter0`` fingerprints are equal,
    as when a start lost with a machine is trained again on another CPU; such pairs are named in the table)."""
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
        found += report_problems(node.get("report"), where)
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
    seeds = top.get("seeds", SweepSpec.__dataclass_fields__["seeds"].default_factory())
    problems += comparison_problems(data.get("comparisons"), arms, [n for n in names if n is not None],
                                    seeds if isinstance(seeds, list) else [])
    if problems:
        raise RecipeError(problems, str(path))
    spec = build(SweepSpec, {**top, "arms": [], "comparisons": []})
    spec.arms, spec.path = arms, path.resolve()
    spec.comparisons = [build(ComparisonSpec, c) for c in data.get("comparisons") or []]
    for arm in spec.arms:
        if arm.reuse is not None:
            missing = set(spec.seeds_of(arm)) - set(spec.seeds_of(spec.arm(arm.reuse)))
            if missing:
                problems.append(f"arms.{arm.name}: seeds {sorted(missing)} are not run by arm {arm.reuse!r} it reuses")
    if problems:
        raise RecipeError(problems, str(path))
    return spec


def report_problems(report: Any, where: str) -> list[str]:
    """An arm's ``report`` maps evaluated models to row labels; a label left empty by YAML is refused.

    ``{final: upper bound, not SAND}`` is a YAML flow mapping with two keys, ``final`` and ``not SAND``
    (with no value): the label is cut at the comma and a bogus model appears. Caught here instead of as a
    wrong row label in the table.
    """
    if not isinstance(report, dict):
        return []  # a wrong type is reported by the field check
    problems = []
    for model, label in report.items():
        if not is_model_name(model):
            hint = (" (a label with a comma inside {...} is cut there: quote the label)" if label is None else "")
            problems.append(f"{where}.report: {model!r} is not a model a run evaluates "
                            f"({', '.join(NAMED_MODELS)}, iter<k>){hint}")
        elif label is not None and not isinstance(label, str):
            problems.append(f"{where}.report.{model}: the row label must be text, got {label!r}")
    return problems


def comparison_problems(raw: Any, arms: list[ArmSpec], names: list[str], seeds: list[int]) -> list[str]:
    """Each comparison's sides must be rows of the table (an arm and a model it reports) that share games.

    Two arms pair seed by seed, unless one of them runs a single seed (a deterministic arm), which is paired
    with every seed of the other; so two multi-seed arms need a seed in common. Checked on the raw file
    (``arms`` are the arms that are valid themselves) so that these problems are reported with the others.
    """
    if not isinstance(raw, list):
        return []  # its type problem is reported by the field check
    problems = []
    valid = {a.name: a for a in arms}
    for i, node in enumerate(raw):
        where = f"comparisons[{i}]"
        if not isinstance(node, dict):
            continue
        missing = [k for k in ("question", "a", "b") if k not in node]
        problems += [f"{where}.{k}: required" for k in missing]
        if missing or not all(isinstance(node[k], str) for k in ("a", "b")):
            continue
        sides = {}
        for which in ("a", "b"):
            ref = node[which]
            arm_name, _, model = ref.partition("/")
            if not arm_name or not model:
                problems.append(f"{where}.{which}: {ref!r} must be ARM/MODEL, e.g. 'sand/final'")
            elif arm_name not in names:
                problems.append(f"{where}.{which}: no arm {arm_name!r} (arms: {', '.join(names)})")
            elif arm_name not in valid:
                continue  # the arm's own problems are reported
            elif model not in valid[arm_name].report:
                problems.append(f"{where}.{which}: arm {arm_name!r} does not report model {model!r} "
                                f"(its report: {', '.join(valid[arm_name].report) or 'none'}); "
                                f"add it to arms.{arm_name}.report to compare it")
            else:
                sides[which] = list(valid[arm_name].seeds) if valid[arm_name].seeds is not None else seeds
        if node["a"] == node["b"]:
            problems.append(f"{where}: a and b are the same row {node['a']!r}")
        elif len(sides) == 2 and not seed_pairs(sides["a"], sides["b"]):
            problems.append(f"{where}: {node['a']!r} (seeds {sides['a']}) and {node['b']!r} "
                            f"(seeds {sides['b']}) share no seed to pair")
    return problems


def seed_pairs(seeds_a: list[int], seeds_b: list[int]) -> list[tuple[int, int]]:
    """Which seed of ``a`` is compared with which seed of ``b``.

    Seed k against seed k; an arm declared with a single seed (e.g. greedy evaluation of the untrained base
    model, the same for every seed) stands against every seed of the other arm.
    """
    if len(seeds_b) == 1:
        return [(s, seeds_b[0]) for s in seeds_a]
    if len(seeds_a) == 1:
        return [(seeds_a[0], s) for s in seeds_b]
    return [(s, s) for s in seeds_a if s in seeds_b]


def arm_overrides(arm: ArmSpec, seed: int) -> list[str]:
    return [*arm.overrides, f"run.seed={seed}"]


def describe(spec: SweepSpec) -> list[dict[str, Any]]:
    """One row per (arm, seed) run the sweep makes, in order."""
    seeds = sorted({s for arm in spec.arms for s in spec.seeds_of(arm)})
    return [{"arm": arm.name, "seed": s, "recipe": spec.recipe_path(arm), "overrides": arm_overrides(arm, s),
             "reuse": arm.reuse}
            for s in seeds for arm in spec.arms if s in spec.seeds_of(arm)]
