"""The recipe's shape: engine sections (typed here) and one component slot per kind.

A slot is ``<kind>: {name: <component>, <param>: <value>, ...}``; its params are
checked against that component's own ``Params`` dataclass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from sand_framework.hookspecs import KINDS

SLOTS: tuple[str, ...] = tuple(KINDS)
"""Component slots, named by kind: environment, policy, detector, sampler, ..."""


@dataclass
class RunSection:
    name: str = "sand"
    """Prefix of the run directory name."""
    output_dir: str = "runs"
    """Where run directories are created."""
    seed: int = 0
    iterations: int = 1
    """SAND iterations after behavior initialization (paper: 3)."""
    epochs: list[float] = field(default_factory=lambda: [3.0, 1.0])
    """Epochs per training stage: [behavior-init SFT, iteration 1, iteration 2, ...]; the last repeats."""
    train_from: Literal["previous", "base"] = "previous"
    """Each iteration continues from the previous weights, or restarts from the base model."""
    synthesis_batch: int = 4
    """Expert trajectories synthesized together (their model calls are batched)."""


@dataclass
class ModelSection:
    base: str = "smollm2-135m"
    """The base model: an alias a plugin resolves (smollm2-135m, tiny-random), a local path or a hub id."""


@dataclass
class DataSection:
    source: Literal["env", "sharegpt", "messages"] = "env"
    """Expert trajectories from the environment's own expert, or from a file."""
    path: str | None = None
    """File for source sharegpt/messages."""
    split: str = "train"
    limit: int | None = 32
    """At most this many expert trajectories (null = all)."""


@dataclass
class EvalSection:
    splits: list[str] = field(default_factory=lambda: ["seen", "unseen"])
    limit: int | None = 20
    """Tasks per split (null = the whole split)."""
    models: list[str] = field(default_factory=lambda: ["sft", "final"])
    """Which weights to evaluate: base, sft (behavior init), iterN, final."""
    batch_size: int = 8
    """Episodes advanced together in lock-step (one batched model call per step)."""


@dataclass
class PluginsSection:
    modules: list[str] = field(default_factory=list)
    """Extra plugin modules to import by name (after built-ins and entry points)."""
    dirs: list[str] = field(default_factory=list)
    """Folders whose ``*.py`` files / packages are loaded as plugins."""


SECTIONS: dict[str, type] = {
    "run": RunSection,
    "model": ModelSection,
    "data": DataSection,
    "eval": EvalSection,
    "plugins": PluginsSection,
}

META_KEYS = ("extends", "description")


@dataclass
class Recipe:
    """A validated recipe: sections as dataclasses, slots as (name, Params instance)."""

    run: RunSection
    model: ModelSection
    data: DataSection
    eval: EvalSection
    plugins: PluginsSection
    slots: dict[str, tuple[str, Any]]
    raw: dict[str, Any]
    """The resolved plain mapping (what ``sand config`` prints and the run dir stores)."""
