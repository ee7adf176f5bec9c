"""The component kinds are declared once (components/declared.py) and everything else reads that table."""

from __future__ import annotations

import dataclasses

import pytest

from sand_framework.components import KINDS, SLOTS, Detector, NoParams
from sand_framework.components.declared import BY_NAME, SYNTHESIS_SLOTS, kind_named
from sand_framework.config import SLOTS as CONFIG_SLOTS
from sand_framework.engine.synthesis import Components
from sand_framework.errors import PluginLoadError
from sand_framework.registry import Registries


def test_each_kind_is_named_by_its_base_class_and_registered_by_its_hook():
    for k in KINDS:
        assert k.base.kind == k.name and k.hook == f"sand_register_{k.plural}"
    assert CONFIG_SLOTS == SLOTS == tuple(k.name for k in KINDS)
    assert set(Registries().by_kind) == set(SLOTS)


def test_the_synthesis_pass_holds_one_component_per_synthesis_slot():
    fields = {f.name for f in dataclasses.fields(Components)} - {"rollout_cache"}
    assert fields == set(SYNTHESIS_SLOTS) and {"trainer", "evaluator"}.isdisjoint(SYNTHESIS_SLOTS)
    built = Components.of_slots(lambda slot: f"the {slot}")
    assert built.critic == "the critic" and built.rollout_cache is None


def test_a_kind_is_found_by_its_singular_or_plural():
    assert kind_named("detectors") is kind_named("detector") is BY_NAME["detector"]
    assert kind_named("detectorz") is None


class Margin(Detector):
    name = "test_margin"
    Params = NoParams

    def decide(self, sampled, expert):  # pragma: no cover - never called
        raise NotImplementedError


def test_registering_leaves_the_class_as_the_plugin_wrote_it():
    before = dict(vars(Margin))
    regs = Registries()
    regs["detector"].add(Margin, "test")
    assert dict(vars(Margin)) == before and regs["detector"].entries["test_margin"].plugin == "test"


def test_a_class_claiming_another_kind_is_refused():
    class Confused(Margin):
        name = "confused"
        kind = "critic"

    with pytest.raises(PluginLoadError, match="sets kind = 'critic', but it is registered as a detector"):
        Registries()["detector"].add(Confused, "test")
