"""The recipe's shape: engine sections (typed and range-checked here) and one component slot per kind.

A slot is ``<kind>: {name: <component>, <param>: <value>, ...}``; its params are
checked against that component's own ``Params`` dataclass.

A setting that cannot change what a stage computes carries a
:class:`~sand_framework.config.paramdoc.SpeedOnly` marker, as a component's
``Params`` field does: stage fingerprints leave it out.

Every range below exists because a value outside it validated before and then
failed mid-run, ran forever, or "succeeded" having done nothing (see
docs/bad-inputs.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from annotated_types import Ge, Interval, MinLen

from sand_framework.components.declared import SLOTS  # noqa: F401 - the slots are the declared kinds
from sand_framework.config.paramdoc import SpeedOnly

RUN_NAME = re.compile(r"[^./\\\x00-\x1f\x7f][^/\\\x00-\x1f\x7f]{0,99}")
"""A run name becomes a folder name under ``run.output_dir``: no path separators, no control characters,
no leading dot (so neither ``..`` nor a hidden folder), at most 100 characters."""

MAX_BATCH = 4096
"""Largest ``run.synthesis_batch`` and ``eval.batch_size``: more items per batched call is a typo, not a setting."""

MAX_IN_FLIGHT = 64
"""Largest ``run.batches_in_flight``: each batch in flight holds its trajectories, samples and rollouts in memory."""

MAX_SEED = 2**31 - 1
"""Seeds go to numpy and torch (which take up to 2**32 - 1) after adding the iteration number."""


@dataclass
class RunSection:
    name: str = "sand"
    """Prefix of the run directory name (a folder name: it cannot hold a path)."""
    output_dir: Annotated[str, MinLen(1)] = "runs"
    """Where run directories are created."""
    seed: Annotated[int, Interval(ge=0, le=MAX_SEED)] = 0
    iterations: Annotated[int, Interval(ge=0, le=100)] = 1
    """SAND iterations after behavior initialization (paper: 3; 0 = behavior initialization only)."""
    epochs: Annotated[list[Annotated[float, Interval(gt=0, le=1000)]], MinLen(1)] = field(
        default_factory=lambda: [3.0, 1.0])
    """Epochs per training stage: [behavior-init SFT, iteration 1, iteration 2, ...]; the last repeats."""
    train_from: Literal["previous", "base"] = "previous"
    """Each iteration continues from the previous weights, or restarts from the base model."""
    synthesis_batch: Annotated[int, Interval(ge=1, le=MAX_BATCH)] = 4
    """Expert trajectories synthesized together (their model calls are batched); at most 4096."""
    batches_in_flight: Annotated[int, Interval(ge=1, le=MAX_IN_FLIGHT), SpeedOnly(
        "every batch keeps its own seed and its calls, and units are stored in input order, so a streamed build "
        "computes the chunked build's units (tests/engine/test_streaming.py compares them byte for byte)")] = 1
    """Batches of ``run.synthesis_batch`` trajectories a method may have in progress at once (1: one after
    another). Above 1, SAND streams its phases: the agent engine samples and rolls out the next batch while the
    base engine critiques and synthesizes this one; IPR's agent takes over in the next batch while this one's
    Monte Carlo rollouts play (iteration 1). A method without its own ``build_stream`` ignores it."""

    def validate(self) -> list[str]:
        if not RUN_NAME.fullmatch(self.name):
            return [f"run.name: {self.name[:120]!r} is not a folder name: no / or \\, no control characters, "
                    "not starting with '.', at most 100 characters; the run directory is run.output_dir/NAME-STAMP, "
                    "so a name cannot hold a path"]
        return []


@dataclass
class ModelSection:
    base: Annotated[str, MinLen(1)] = "smollm2-135m"
    """The base model: an alias a plugin resolves (smollm2-135m, tiny-random), a local path or a hub id."""


@dataclass
class DataSection:
    source: Literal["env", "sharegpt", "messages"] = "env"
    """Expert trajectories from the environment's own expert, or from a file."""
    path: Annotated[str, MinLen(1)] | None = None
    """File for source sharegpt/messages (ignored with source env, so a recipe can switch an inherited file off)."""
    split: Annotated[str, MinLen(1)] = "train"
    limit: Annotated[int, Ge(1)] | None = 32
    """At most this many expert trajectories (null = all)."""

    def validate(self) -> list[str]:
        if self.source != "env" and self.path is None:
            return [f"data.path: required with data.source={self.source}: the {self.source} file of expert "
                    "trajectories (make one with `sand data import-eto` or `sand data expert`)"]
        return []


NAMED_MODELS = ("base", "sft", "final")
"""Weights every run has (``eval.models``, a sweep arm's ``report``); besides them ``iter<k>`` for each iteration."""


def evaluable_models(iterations: int) -> list[str]:
    """The models a run with ``iterations`` SAND iterations can evaluate."""
    return [*NAMED_MODELS, *(f"iter{k}" for k in range(iterations + 1))]


def is_model_name(name: Any) -> bool:
    """A name :func:`evaluable_models` gives for some number of iterations."""
    return isinstance(name, str) and (name in NAMED_MODELS or re.fullmatch(r"iter[0-9]+", name) is not None)


@dataclass
class EvalSection:
    splits: Annotated[list[Annotated[str, MinLen(1)]], MinLen(1)] = field(default_factory=lambda: ["seen", "unseen"])
    limit: Annotated[int, Ge(1)] | None = 20
    """Tasks per split (null = the whole split)."""
    models: Annotated[list[str], MinLen(1)] = field(default_factory=lambda: ["sft", "final"])
    """Which weights to evaluate: base, sft (behavior init), iterN, final."""
    batch_size: Annotated[int, Interval(ge=1, le=MAX_BATCH), SpeedOnly(
        "an evaluator's results may not depend on which tasks share a batch (Evaluator.evaluate: a resume "
        "evaluates the remaining tasks in other batches); only a batched forward's float rounding can differ")] = 8
    """Episodes advanced together in lock-step (one batched model call per step); at most 4096."""

    def validate(self) -> list[str]:
        problems = []
        for key in ("splits", "models"):
            values = getattr(self, key)
            dup = sorted({v for v in values if values.count(v) > 1})
            if dup:
                problems.append(f"eval.{key}: {', '.join(dup)} listed more than once; list each once")
        return problems


@dataclass
class PluginsSection:
    modules: list[Annotated[str, MinLen(1)]] = field(default_factory=list)
    """Extra plugin modules to import by name (after built-ins and entry points); loaded only with
    ``--allow-recipe-plugins``."""
    dirs: list[Annotated[str, MinLen(1)]] = field(default_factory=list)
    """Folders whose ``*.py`` files / packages are loaded as plugins; only with ``--allow-recipe-plugins``."""


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
    classes: dict[str, type] = field(default_factory=dict)
    """Slot -> the registered component class that fills it (stage fingerprints read a method's
    :attr:`~sand_framework.components.Method.uses` from it); empty for a Recipe not made by ``validate``."""
    notes: list[str] = field(default_factory=list)
    """What loading decided that the recipe does not say in so many words: the settings a swapped component
    kept from the slot and the ones it dropped (shown by ``sand validate``, ``sand config`` and ``sand run``)."""
