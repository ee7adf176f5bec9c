"""What docs/concepts.md says a stage fingerprint leaves out is what the code leaves out.

The section "Run directories and resume" names the settings the built-ins mark speed only, the ones it says stay
fingerprinted, each built-in method's ``uses`` and the fingerprint format; each statement is checked here against
the ``SpeedOnly`` markers, ``method_slots`` and ``fingerprint.VERSION``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sand_framework.app.fingerprint import VERSION
from sand_framework.components.declared import ALWAYS_GIVEN, SYNTHESIS_SLOTS, method_slots
from sand_framework.config.paramdoc import speed_only_fields
from sand_framework.config.schema import SECTIONS
from sand_framework.plugins import load_plugins

DOC = Path(__file__).resolve().parents[2] / "docs" / "concepts.md"


@pytest.fixture(scope="module")
def section() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("**What a fingerprint leaves out.**")
    return " ".join(text[start:text.index("`--redo-from STAGE` discards", start)].split())


@pytest.fixture(scope="module")
def registries():
    return load_plugins().registries()


def marked(key: str, registries) -> bool:
    """``kind.param`` (or ``section.key``) is marked speed only in some built-in component of that kind."""
    kind, name = key.split(".", 1)
    if kind in SECTIONS:
        return name in speed_only_fields(SECTIONS[kind])
    return any(name in speed_only_fields(registries[kind].entries[c].cls.Params) for c in registries[kind].names())


def keys(text: str) -> list[str]:
    return re.findall(r"`([a-z_]+\.[a-z_]+)`", text)


def test_the_settings_it_names_speed_only_are_marked(section, registries):
    named = keys(section.split("A thread count")[0])
    assert len(named) >= 15, named
    assert [k for k in named if not marked(k, registries)] == []


def test_the_settings_it_says_stay_fingerprinted_are_not_marked(section, registries):
    kept = keys(section.split("stay fingerprinted")[1].split(")")[0])
    assert kept == ["run.synthesis_batch", "policy.batch_size"]
    assert [k for k in kept if marked(k, registries)] == []


def test_the_uses_it_states_are_the_built_in_methods(section, registries):
    said = re.search(r"\(`sand`: (.*?); `rft`, `eto`, `ipr`: `executor`; `pairs_file`: none\)", section)
    assert said, "the uses of the built-in methods are stated"
    assert method_slots(registries["method"].get("sand")) == SYNTHESIS_SLOTS
    assert set(re.findall(r"`(\w+)`", said.group(1))) == set(SYNTHESIS_SLOTS) - set(ALWAYS_GIVEN)
    for name in ("rft", "eto", "ipr"):
        assert method_slots(registries["method"].get(name)) == (*ALWAYS_GIVEN, "executor"), name
    assert method_slots(registries["method"].get("pairs_file")) == ALWAYS_GIVEN
    assert "`environment`, `policy` and the slots its `Method.uses` declares" in section


def test_the_format_it_states_is_the_one_recorded(section):
    assert f'format `"v": {VERSION}`' in section and VERSION == 2
    assert "format 1" in section and "a result-affecting edit since is still refused" in section
