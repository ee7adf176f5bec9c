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
