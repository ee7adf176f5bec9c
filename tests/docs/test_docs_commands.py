"""Every `sand run` / `sand validate` command a doc or a recipe header shows validates as written.

A user copies these lines: a documented override that `sand validate` refuses (a swapped component whose default
budget no longer fits, a misspelt key) is a doc bug. A command is read whole: lines continued with a trailing `\\`
are joined, and every `key=value` word up to the end of the command (a pipe, `&&`, `;`, a redirection, a comment)
is an override that is validated, lists and mappings included. Skipped: placeholders (RECIPE, <stamp>, {tmp},
`...`; an override whose value is one is left out of its command), resumes, commands that load plugin code (their
plugin package is tested by tests/cli/test_example_plugin.py), recipes outside the repository, and a bare word that
names no bundled recipe (prose such as "sand validate checks", or a recipe on the user's SAND_RECIPE_PATH);
docs/bad-inputs.md shows refused commands on purpose.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from sand_framework.config import load_recipe, validate

REPO = Path(__file__).resolve().parents[2]
SOURCES = [REPO / "README.md", *sorted(p for p in (REPO / "docs").glob("*.md") if p.name != "bad-inputs.md"),
           *sorted((REPO / "recipes").rglob("*.yaml"))]
BUNDLED = {p.relative_to(REPO / "recipes").with_suffix("").as_posix() for p in (REPO / "recipes").rglob("*.yaml")}
COMMAND = re.compile(r"sand (?:run|validate|config) ((?:[^`|#\n\\]|\\\n|\\(?!\n))*)")
"""The words after `sand run|validate|config` up to a backtick, a pipe, a comment or the end of the line; a backslash
before the line break continues the command on the next line."""
PLACEHOLDER = re.compile(r"<[^>]*>|\{[A-Za-z_]+\}|^[A-Z][A-Z0-9_]*$|\.\.\.")
"""A word standing for something the reader fills in; `[unseen]` and `{n: 2}` are values, validated."""
END = {"&&", "||", ";", ">", ">>", "2>&1", "(or:"}


def shell_words(text: str) -> list[str]:
    """The words a shell would pass (quotes removed: `"eval.splits=[seen, unseen]"` is one word); prose with an
    unbalanced quote is split on spaces."""
    try:
        return shlex.split(text, comments=False)
    except ValueError:
        return text.split()


def commands_in(text: str) -> list[tuple[str, list[str]]]:
    """``(recipe, overrides)`` of every `sand run|validate|config RECIPE ...` in ``text``, continued lines joined;
    a command whose recipe is a placeholder, an option (`--resume`) or loads plugin code is left out."""
    out = []
    for match in COMMAND.finditer(text):
        words = shell_words(match.group(1).replace("\\\n", " "))
        if not words or words[0].startswith("-") or PLACEHOLDER.search(words[0]) or "[" in words[0]:
            continue
        recipe, rest = words[0], words[1:]
        if {"--plugins-dir", "--allow-recipe-plugins"} & set(rest):
            continue
        overrides = []
        for word in rest:
            if word.startswith((">", "2>")) or word in END:
                break
            if word.startswith("-"):
                continue  # an option (--run-dir DIR: its value has no `=`)
            if "=" in word and not PLACEHOLDER.search(word.split("=", 1)[1]):
                overrides.append(word.rstrip(";"))
            if word.endswith(";"):
                break
        out.append((recipe, overrides))
    return out


def documented_commands() -> list[tuple[str, str, list[str]]]:
    found = {}
    for path in SOURCES:
        for recipe, overrides in commands_in(path.read_text()):
            if "/" not in recipe and not recipe.endswith(".yaml") and recipe not in BUNDLED:
                continue
            if recipe.endswith(".yaml") and not (REPO / recipe).is_file():
                continue  # a user's own recipe (recipes/my_cluster.yaml) or a plugin package's
            if recipe.startswith("plugins/"):
                continue  # needs its plugin package installed: tests/cli/test_example_plugin.py runs these
            found[(recipe, tuple(overrides))] = path.relative_to(REPO).as_posix()
    return [(where, recipe, list(ov)) for (recipe, ov), where in sorted(found.items())]


COMMANDS = documented_commands()


def test_the_docs_show_commands():
    assert len(COMMANDS) > 20  # the extraction itself works (a regex that matches nothing would pass below)


@pytest.mark.parametrize("where, recipe, overrides", COMMANDS, ids=[f"{w}:{r} {' '.join(o)}" for w, r, o in COMMANDS])
def test_documented_command_validates(registries, where, recipe, overrides):
    data, path = load_recipe(str(REPO / recipe) if recipe.endswith(".yaml") else recipe, overrides)
    validate(data, registries, str(path))


def test_a_command_is_read_whole():
    text = ("```bash\nsand run paper/alfworld a.b=1 \\\n    c=2 --run-dir runs/x \"eval.splits=[seen, unseen]\" \\\n"
            "    'd.e={n: 2}' && VAR=1 other\n```\nThen `sand validate quickstart model.base=PATH sampler.n=<n> x.y=3`, "
            "and sand run --resume runs/q-<stamp>\nsand config smoke k=v | less\n")
    assert commands_in(text) == [("paper/alfworld", ["a.b=1", "c=2", "eval.splits=[seen, unseen]", "d.e={n: 2}"]),
                                 ("quickstart", ["x.y=3"]), ("smoke", ["k=v"])]


def test_every_gpu_command_is_validated_with_all_its_overrides():
    """docs/gpu.md's commands are the ones a GPU user copies first (issue 26: the second line of a continued
    command was never read)."""
    text = (REPO / "docs" / "gpu.md").read_text()
    shown = commands_in(text)
    assert len(shown) == len(re.findall(r"sand (?:run|validate|config) (?!--resume)", text))  # none skipped
    tested = {(r, tuple(o)) for _, r, o in COMMANDS}
    assert all((r, tuple(o)) in tested for r, o in shown)
    assert ("paper/alfworld", ["trainer.launch.num_processes=8", "trainer.launch.config=fsdp",
                               "executor=process_pool", "executor.workers=32"]) in shown
