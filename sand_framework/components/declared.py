"""The component kinds, declared once: recipe slot, base class, registration hook and role in the loop.

Config (the recipe's slots), the registries, plugin loading, ``sand
components``, stage reuse and the synthesis pass all read this table, so a
kind added or renamed here is added or renamed everywhere. The slot name is
the base class's own ``kind``, not a second spelling of it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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
    class_problems: Callable[[type], list[str]] | None = None
    """What is wrong with a class registered as this kind, beyond its base and name (the registry refuses the
    first problem, naming the plugin); None: nothing more to check."""

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
    Kind(Method, "methods", synthesis=False, default="sand", class_problems=lambda cls: uses_problems(cls)),
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


ALWAYS_GIVEN: tuple[str, ...] = ("environment", "policy")
"""The synthesis slots every method is given (``MethodTools.env`` and ``policy``), whatever its ``uses``."""


def method_slots(method: type[Method] | None) -> tuple[str, ...]:
    """The synthesis slots a method's stages depend on, in recipe order: :data:`ALWAYS_GIVEN` and its declared
    :attr:`Method.uses`; every synthesis slot for a method that declares none (``uses = None``) or for an
    unknown one (``None``). The one reading of ``uses``: stage fingerprints and ``MethodTools.component``
    both go through it."""
    uses = getattr(method, "uses", None)
    if uses is None:
        return SYNTHESIS_SLOTS
    wanted = set(ALWAYS_GIVEN) | set(uses)
    return tuple(s for s in SYNTHESIS_SLOTS if s in wanted)


EVERY_RUN: tuple[str, ...] = ("environment", "policy", "method", "trainer", "preference_trainer", "evaluator")
"""The slots every run has, whatever its method: the environment and the policy every method is given, the method,
the SFT trainer of the behavior initialization, the preference trainer (a default fills it; only a preference
method's iterations build it) and the evaluator."""


def required_slots(method: type[Method] | None, iterations: int | None = None) -> tuple[str, ...]:
    """The slots a recipe of ``method`` must fill, in recipe order: :data:`EVERY_RUN` and the synthesis slots it
    uses (:func:`method_slots`); with ``iterations`` 0 (the method never runs: an SFT agent evaluated, e.g. by
    Best-of-N) only :data:`ALWAYS_GIVEN` of them. Validation requires these, builds and keeps only these (a
    recipe's other slots are checked, then left out with a note), so fingerprints, the pipeline and ``sand view``
    see the same set. An unknown method (``None``) or one that declares no ``uses`` requires every slot."""
    wanted = set(EVERY_RUN) | set(ALWAYS_GIVEN if iterations == 0 else method_slots(method))
    return tuple(s for s in SLOTS if s in wanted)


def uses_problems(method: type[Method]) -> list[str]:
    """What is wrong with a method's declared ``uses`` (not a tuple of synthesis slot names); empty = fine."""
    uses = getattr(method, "uses", None)
    if uses is None:
        return []
    if isinstance(uses, str) or not isinstance(uses, (tuple, list, frozenset, set)):
        return [f"`uses` must be a tuple of slot names (e.g. ('executor',)) or None, got {uses!r}"]
    bad = [u for u in uses if u not in SYNTHESIS_SLOTS]
    if bad:
        return [f"`uses` names {', '.join(map(repr, bad))}, not synthesis slot(s); they are "
                f"{', '.join(SYNTHESIS_SLOTS)}"]
    return []


def method_component(method: Method, component: Callable[[str], Any]) -> Callable[[str], Any]:
    """``component`` (slot -> the run's component) as ``MethodTools.component`` gives it to ``method``: a
    synthesis slot outside :func:`method_slots` is refused (``ComponentError``), since the stage's
    fingerprint does not cover it and a resume or reuse could not see it change."""
    from sand_framework.errors import ComponentError

    allowed = method_slots(type(method))

    def get(slot: str) -> Any:
        if slot in SYNTHESIS_SLOTS and slot not in allowed:
            raise ComponentError(
                f"method {method.name!r} asked for the {slot!r} component, but its `uses` "
                f"({', '.join(type(method).uses or ()) or 'none'}) does not declare that slot: a stage's fingerprint "
                f"covers only the declared slots, so a change to {slot!r} would go unseen by --resume and sweep "
                f"reuse. Add {slot!r} to {type(method).__qualname__}.uses")
        return component(slot)

    return get
