"""Property-based: `sand validate` on random recipe trees and overrides exits 0 or 2, never with a traceback,
and quickly.

Recipes are generated from the real vocabulary (section and slot names, every registered component's name and
parameters) mixed with junk keys and hostile values (NaN, huge and negative numbers, path escapes,
interpolations, non-string keys, lists where mappings belong), so most examples get deep into validation.
The command runs in-process through click (about 0.1 s per example).
"""

from __future__ import annotations

import dataclasses
import os
import time

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sand_framework.cli.main import main
from sand_framework.config.schema import SECTIONS, SLOTS
from sand_framework.plugins import load_plugins

_REGS = load_plugins().registries()
COMPONENTS = sorted({n for k in SLOTS for n in _REGS[k].names()})
FIELDS = sorted({f.name for cls in SECTIONS.values() for f in dataclasses.fields(cls)}
                | {f.name for k in SLOTS for n in _REGS[k].names() for f in dataclasses.fields(_REGS[k].get(n).Params)})
TOP = [*SECTIONS, *SLOTS, "description"]

words = st.sampled_from([*TOP, *FIELDS, *COMPONENTS, "name", "extends", "smoke", "train", "seen", "unseen", "sft",
                         "final", "iter1", "../../x", "${run.name}", "${oc.env:HOME}", "${oc.env:SECRET}", "${nope}",
                         "\\${x}", "/", "", " ", "~", ".", "env", "sharegpt", "messages", "previous", "base"])
scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                    st.floats(allow_nan=True, allow_infinity=True), words, st.text(max_size=12))
keys = st.one_of(words, words, words, words, st.text(max_size=8), st.integers(-3, 3))  # mostly real names
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(keys, inner, max_size=5)), max_leaves=12)
slot_node = st.one_of(st.sampled_from(COMPONENTS),
                      st.fixed_dictionaries({"name": st.one_of(st.sampled_from(COMPONENTS), scalars)})
                      .flatmap(lambda d: st.dictionaries(st.sampled_from(FIELDS), values, max_size=3)
                               .map(lambda extra: {**extra, **d})),
                      values)
section_node = st.one_of(st.dictionaries(st.sampled_from(FIELDS), values, max_size=4), values)
recipes = st.fixed_dictionaries(
    {"extends": st.one_of(*[st.just("smoke")] * 6, st.sampled_from(["quickstart", "nope"]), values)}, optional={
                  **{s: section_node for s in SECTIONS}, **{s: slot_node for s in SLOTS},
                  "junk": values})
override_keys = st.one_of(st.sampled_from([*TOP, *(f"{t}.{f}" for t in TOP for f in ("name", "n", "limit", "splits",
                                                                                       "max_steps", "temperature"))]),
                          st.text(max_size=10))
override_values = st.one_of(st.sampled_from(["-1", "0", "[nosuch]", "[]", ".nan", "{a: 1}", "[1, [2]]", "null",
                                             "entropy", "../../x", "${oc.env:SECRET}", "1e400", "'", "&a [*a]"]),
                            st.text(max_size=10))
overrides = st.lists(st.tuples(override_keys, override_values).map(lambda kv: f"{kv[0]}={kv[1]}"), max_size=3)


@pytest.fixture(autouse=True)
def _no_opt_ins(monkeypatch):
    monkeypatch.delenv("SAND_ALLOW_RECIPE_PLUGINS", raising=False)
    monkeypatch.delenv("SAND_RECIPE_ENV", raising=False)
    monkeypatch.setenv("SECRET", "hunter2")


@settings(max_examples=int(os.environ.get("SAND_FUZZ_EXAMPLES", 60)), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])
@given(recipe=recipes, extra=overrides)
def test_validate_exits_0_or_2_without_a_traceback(tmp_path, recipe, extra):
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(recipe, allow_unicode=True))
    t0 = time.monotonic()
    result = CliRunner().invoke(main, ["validate", str(path), *extra])
    elapsed = time.monotonic() - t0
    output = result.output + (result.stderr if result.stderr_bytes is not None else "")
    assert result.exit_code in (0, 2), f"exit {result.exit_code}:\n{output[-3000:]}\n{result.exception!r}"
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in output
    assert "hunter2" not in output  # an environment variable off the allowlist is never resolved
    assert elapsed < 10, f"validate took {elapsed:.1f}s"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.one_of(st.binary(max_size=300), st.text(max_size=300)))
def test_validate_survives_any_file_content(tmp_path, raw):
    path = tmp_path / "r.yaml"
    path.write_bytes(raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogatepass"))
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code in (0, 2), f"{result.output[-2000:]}\n{result.exception!r}"
    assert "Traceback" not in result.output
