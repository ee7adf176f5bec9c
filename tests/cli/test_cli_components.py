"""``sand components`` lists whole names whatever the width, and takes kinds singular or plural."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from sand_framework.cli.main import main
from sand_framework.components import SLOTS


def components(*args: str, columns: int = 80):
    return CliRunner(env={"COLUMNS": str(columns)}).invoke(main, ["components", *args])


def test_piped_listing_keeps_every_name_and_plugin_whole():
    rows = json.loads(components("--json").output)
    res = components(columns=40)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert "\x1b" not in res.output and "…" not in res.output
    for kind in SLOTS:
        assert kind in lines
    for r in rows:
        assert any(line.split()[:1] == [r["name"]] for line in lines), r["name"]
        assert any(line.strip() == f"plugin: {r['plugin']}" for line in lines), r["plugin"]
    assert components(columns=300).output == res.output, "the layout does not depend on the terminal width"


@pytest.mark.parametrize("singular,plural", [("environment", "environments"), ("policy", "policies"),
                                             ("detector", "detectors")])
def test_plural_kinds_are_accepted(singular, plural):
    one, many = components(singular), components(plural)
    assert one.exit_code == many.exit_code == 0, many.output
    assert many.output == one.output and many.output.splitlines()[0] == singular
    assert components(plural, "--json").output == components(singular, "--json").output
    assert {r["kind"] for r in json.loads(components(plural, "--json").output)} == {singular}


@pytest.mark.parametrize("typed,suggested", [("detectr", "detector"), ("enviroments", "environments")])
def test_unknown_kind_suggests_the_closest(typed, suggested):
    res = components(typed)
    assert res.exit_code == 2
    assert f"did you mean {suggested!r}" in res.output and "kinds: environment, policy" in res.output


def test_every_built_in_parameter_shows_its_help_range_and_choices():
    """Each parameter's declaration (tests/core/test_config.py holds that every built-in one has help) reaches the
    listing: the text shows `name=default  (range)  one of: ...  help`, --json the same fields."""
    from sand_framework.cli.components import param_line

    rows = json.loads(components("--json").output)
    text = components().output
    lines = {line.strip() for line in text.splitlines()}
    for r in rows:
        if not r["plugin"].startswith("sand_builtins"):
            continue
        for p in r["params"]:
            assert p.get("help"), f"{r['kind']} {r['name']}: {p['name']} has no help"
            assert param_line(p) in lines, f"{r['kind']} {r['name']}: {p['name']} not listed with its help"
    sampler = next(r for r in rows if r["name"] == "self_consistency")
    n = next(p for p in sampler["params"] if p["name"] == "n")
    assert n["range"] == ">= 1, <= 100" and "at most 100" in n["help"]
    dtype = next(p for r in rows if r["name"] == "trl_sft" for p in r["params"] if p["name"] == "dtype")
    assert dtype["choices"] == ["auto", "float32", "bfloat16", "float16"]
    assert "  one of: 'auto', 'float32', 'bfloat16', 'float16'  Weights dtype" in text
    assert any(p["name"] == "launch.num_processes" for r in rows if r["name"] == "trl_sft" for p in r["params"])


def test_writing_plugins_parameter_example_is_what_validation_and_the_listing_read(tmp_path, monkeypatch):
    """docs/writing-plugins.md's `Quorum` example, run: every field's type, default, range or choices and help
    come from its one declaration, its validate() runs, and `self.params` is its Params."""
    import importlib.util
    import re
    import sys
    from pathlib import Path

    from sand_framework.cli.components import params_doc
    from sand_framework.config.validate import component_params
    from sand_framework.plugins import load_plugins

    doc = (Path(__file__).resolve().parents[2] / "docs" / "writing-plugins.md").read_text(encoding="utf-8")
    code = next(b for b in re.findall(r"```python\n(.*?)```", doc, re.DOTALL) if "class Quorum(" in b)
    path = tmp_path / "quorum_example.py"  # a real file: the help is read from the class's source
    path.write_text(code.replace("        ...\n", "        return Decision(deliberate=p.share > 1)\n"))
    spec = importlib.util.spec_from_file_location("quorum_example", path)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "quorum_example", mod)
    spec.loader.exec_module(mod)
    quorum = mod.Quorum
    rows = {p["name"]: p for p in params_doc(quorum.Params)}
    assert rows["share"]["range"] == "> 0, <= 1" and "(0, 1]" in rows["share"]["help"]
    assert rows["min_samples"]["range"] == ">= 1, <= 100" and rows["count"]["choices"] == ["valid", "all"]
    assert all(r.get("help") for r in rows.values()) and quorum().params == quorum.Params()
    regs = load_plugins().registries()
    regs["detector"].add(quorum, "test")
    for values, needle in [({"share": 0}, "detector[quorum].share: must be > 0"),
                           ({"min_samples": 1000}, "min_samples: must be <= 100"),
                           ({"count": "some"}, "count: must be one of 'valid' | 'all'"),
                           ({"ignore": "look,,inventory"}, "detector[quorum]: ignore: an empty name")]:
        built, problems = component_params(regs, "detector", "quorum", values)
        assert built is None and any(needle in p for p in problems), (needle, problems)
    assert component_params(regs, "detector", "quorum", {"ignore": "look, inventory"})[0] is not None


def test_components_md_is_the_params_declarations():
    """docs/components.md is generated from the built-ins' Params: a parameter added, renamed or re-documented
    there shows here once `scripts/components_doc.py` is run."""
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "components_doc.py"
    spec = importlib.util.spec_from_file_location("components_doc", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.OUT.read_text(encoding="utf-8") == mod.render(), \
        "docs/components.md is out of date: run .venv/bin/python scripts/components_doc.py"
