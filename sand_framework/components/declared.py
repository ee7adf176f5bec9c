"""The component kinds, declared once: recipe slot, base class, registration hook and role in the loop.

Config (the recipe's slots), the registries, plugin loading, ``sand
components``, stage reuse and the synthesis pass all read this table, so a
kind added or renamed here is added or renamed everywhere. The slot name is
the base class's own ``kind``, not a second spelling of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sand_framework.components.base import Component
from sand_framework.components.kinds import (
    Critic,
    Detector,
    Environment,
    Evaluator,
    Executor,
    Policy,
    Sampler,
    Synthesizer,
    PreferenceTrainer,
    Trainer,
)
from sand_framework.components.method import Method


@dataclass(frozen=True)
class Kind:
    """One component kind."""

    base: type[Component]
    """The class every component of this kind subclasses (``sand_framework.components``)."""
    plural: str
    """The kind in the plural: the registration hook's suffix; ``sand components`` accepts it too."""
    synthesis: bool
    """Used by a synthesis pass (steps 2-4 of the method), so it shapes a SAND iteration's data: a stage
    made with it can be reused by another run only when this slot is equal there."""
    default: str | None = None
    """The component a recipe that leaves this slot out gets (recipes written before the slot existed keep
    their meaning); None: the slot is required."""

    @property
    def name(self) -> str:
        """The recipe slot (``environment: {name: ...}``) and the value of ``Component.kind``."""
        return self.base.kind

    @property
    def hook(self) -> str:
        """The registration hook plugins implement for this kind (see :mod:`sand_framework.hookspecs`)."""
        return f"sand_register_{self.plural}"


KINDS: tuple[Kind, ...] = (
    Kind(Environment, "environments", synthesis=True),
    Kind(Policy, "policies", synthesis=True),
    Kind(Detector, "detectors", synthesis=True),
    Kind(Sampler, "samplers", synthesis=True),
    Kind(Executor, "executors", synthesis=True),
    Kind(Critic, "critics", synthesis=True),
    Kind(Synthesizer, "synthesizers", synthesis=True),
    Kind(Method, "methods", synthesis=False, default="sand"),
    Kind(Trainer, "trainers", synthesis=False),
    Kind(PreferenceTrainer, "preference_trainers", synthesis=False, default="trl_dpo"),
    Kind(Evaluator, "evaluators", synthesis=False),
)
"""Every kind, in recipe order."""

BY_NAME: dict[str, Kind] = {k.name: k for k in KINDS}
"""Kind by slot name; ``BY_NAME[k].base`` is what a component registered as ``k`` must subclass."""

SLOTS: tuple[str, ...] = tuple(BY_NAME)
"""The recipe's component slots: environment, policy, detector, sampler, ..."""

SYNTHESIS_SLOTS: tuple[str, ...] = tuple(k.name for k in KINDS if k.synthesis)
"""The slots a synthesis pass uses (:class:`sand_framework.engine.synthesis.Components` holds one of each)."""


def kind_named(word: str) -> Kind | None:
    """The kind a user typed, singular or plural (``detector``, ``detectors``); None if neither."""
    return BY_NAME.get(word) or next((k for k in KINDS if k.plural == word), None)
