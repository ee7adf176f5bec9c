"""Every `sand run` / `sand validate` command a doc or a recipe header shows validates as written.

A user copies these lines: a documented override that `sand validate` refuses (a swapped component whose default
budget no longer fits, a misspelt key) is a doc bug. Skipped: placeholders (RECIPE, <stamp>, {tmp}), resumes,
commands that load plugin code (their plugin package is tested by tests/test_example_plugin.py), recipes outside the
repository, and a bare word that names no bundled recipe (prose such as "sand validate checks", or a recipe on the
user's SAND_RECIPE_PATH); docs/bad-inputs.md shows refused commands on purpose. Continued lines are joined.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sand_framework.config import load_recipe, validate

REPO = Path(__file__).resolve().parent.parent
SOURCES = [REPO / "README.md", *sorted(p for p in (REPO / "docs").glob("*.md") if p.name != "bad-inputs.md"),
           *sorted((REPO / "recipes").rglob("*.yaml"))]
BUNDLED = {p.relative_to(REPO / "recipes").with_suffix("").as_posix() for p in (REPO / "recipes").rglob("*.yaml")}
COMMAND = re.compile(r"sand (?:run|validate) ([^`|#\n]*(?:\\\n[^`|#\n]*)*)")
PLACEHOLDER = re.compile(r"[<>{}\[\]]|^[A-Z_]+$|\.\.\.")


def documented_commands() -> list[tuple[str, str, list[str]]]:
    found = {}
    for path in SOURCES:
        for match in COMMAND.finditer(path.read_text()):
            words = match.group(1).replace("\\\n", " ").split()
            if not words or words[0].startswith("-") or PLACEHOLDER.search(words[0]):
                continue
            recipe, rest = words[0], words[1:]
            if {"--plugins-dir", "--allow-recipe-plugins"} & set(rest):
                continue
            if "/" not in recipe and not recipe.endswith(".yaml") and recipe not in BUNDLED:
                continue
            if recipe.endswith(".yaml") and not (REPO / recipe).is_file():
                continue  # a user's own recipe (recipes/my_cluster.yaml) or a plugin package's
            if recipe.startswith("plugins/"):
                continue  # needs its plugin package installed: tests/test_example_plugin.py runs these
            overrides = []
            for word in rest:
                if word.startswith("-") or word == "(or:":
                    break
                if "=" in word and not PLACEHOLDER.search(word.split("=", 1)[1]):
                    overrides.append(word)
            found[(recipe, tuple(overrides))] = path.relative_to(REPO).as_posix()
    return [(where, recipe, list(ov)) for (recipe, ov), where in sorted(found.items())]


COMMANDS = documented_commands()


def test_the_docs_show_commands():
    assert len(COMMANDS) > 20  # the extraction itself works (a regex that matches nothing would pass below)


@pytest.mark.parametrize("where, recipe, overrides", COMMANDS, ids=[f"{w}:{r} {' '.join(o)}" for w, r, o in COMMANDS])
def test_documented_command_validates(registries, where, recipe, overrides):
    data, path = load_recipe(str(REPO / recipe) if recipe.endswith(".yaml") else recipe, overrides)
    validate(data, registries, str(path))
