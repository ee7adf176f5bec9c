"""Every name the user-facing docs mention exists: modules, classes, methods, recipe keys, files, links, CLI flags.

A doc that names something the code does not have sends a plugin author
looking for it; these tests read the docs, resolve each name against the code
and list every one that does not resolve. They also hold the tables that say
"required" and "built-in" to the classes and registries they describe.
``test_checker_catches_*`` feed the checker invented names, so it cannot pass
by finding nothing.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from sand_framework import components
from sand_framework.cli.main import main as cli
from sand_framework.config import SECTIONS

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
EXAMPLE = REPO / "plugins" / "examples" / "sand-example-plugin"
CHECKED = ("docs/concepts.md", "docs/writing-plugins.md", "docs/recipes.md", "docs/cli.md", "docs/hooks.md",
           "docs/methods.md", "docs/results.md", "docs/results-v1.md", "docs/experiments.md", "docs/install-plan.md",
           "docs/bad-inputs.md", "docs/reports.md", "docs/components.md", "docs/environments.md", "docs/scaling.md",
           "docs/gpu.md", "plugins/examples/sand-example-plugin/README.md")
ROOTS = ("sand_framework/", "plugins/", "tests/", "benchmarks/", "recipes/", "docs/", "scripts/", "experiments/")
"""A code span starting with one of these is a path in the repository (or in the example package)."""
GLOBAL_OPTIONS = {"--plugins-dir", "--allow-recipe-plugins", "--help", "--version"}
"""Options every command takes (or the group's own), documented once in cli.md's prose."""

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
SPAN = re.compile(r"`([^`\n]+)`")
DOTTED = re.compile(r"\b(?:sand_framework|sand_builtins|sand_example)(?:\.\w+)+")
FROM_IMPORT = re.compile(r"^\s*from\s+((?:sand_framework|sand_builtins|sand_example)[\w.]*)\s+import\s+([\w, ()]+)",
                         re.MULTILINE)
ATTR = re.compile(r"^(\w+)\.(\w+)(?=$|[=(\[/ ])")
FILE_NAME = re.compile(r"[\w.-]+\.(?:json|jsonl|yaml|yml|md|py|png|toml|txt)")
LINK = re.compile(r"\]\(([^)\s]+)\)")
SAND_CMD = re.compile(r"(?:^|(?<=\s)|(?<=\$\())sand((?:\s+[^\s`|#]+)*)")
FLAG = re.compile(r"(?<![\w-])(--?[a-zA-Z][\w-]*)")

if str(EXAMPLE) not in sys.path:  # import-only: the example's names resolve, its entry point stays unregistered
    sys.path.append(str(EXAMPLE))


BASES = {k.name: k.base for k in components.KINDS}
"""Kind -> its base class, from the declared table."""

CLASS_MODULES = ("sand_framework.components", "sand_framework.types", "sand_framework.errors",
                 "sand_framework.plugins", "sand_framework.registry", "sand_framework.chat_format",
                 "sand_framework.hookspecs", "sand_framework.store.rundir", "sand_framework.engine.context")
"""Modules whose public classes a doc may name without the module (``Environment.reset``, ``PluginSet.register``)."""


def _classes() -> dict[str, type]:
    out: dict[str, type] = {}
    for name in CLASS_MODULES:
        try:
            mod = importlib.import_module(name)
        except ImportError:  # moved or gone: the docs naming its classes then fail as unknown classes
            continue
        out.update({k: v for k, v in vars(mod).items() if isinstance(v, type) and not k.startswith("_")})
    return out


def _registries():
    from sand_framework.plugins import PluginSet

    ps = PluginSet()
    ps.load_builtins()
    return ps.registries()


def _has(obj: object, attr: str) -> bool:
    if hasattr(obj, attr):
        return True
    return dataclasses.is_dataclass(obj) and attr in {f.name for f in dataclasses.fields(obj)}


def resolve_dotted(name: str) -> bool:
    """``pkg.module.attr.attr``: import the longest module prefix, then getattr the rest."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not _has(obj, attr):
                return False
            obj = getattr(obj, attr, None)
        return True
    return False


def _help_flags(path: tuple[str, ...]) -> set[str] | None:
    """Flags listed by ``sand PATH --help``; None when there is no such command."""
    res = CliRunner().invoke(cli, [*path, "--help"])
    if res.exit_code != 0:
        return None
    return set(FLAG.findall(res.output.split("Options:", 1)[-1]))


def _commands(group: click.Group = cli, path: tuple[str, ...] = ()):
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, (*path, name))
        else:
            yield (*path, name), cmd


def _command_path(words: list[str]) -> tuple[tuple[str, ...], list[str]] | None:
    """Split ``sand WORDS`` into the command path and its remaining words; None when not a command."""
    if not words or words[0] not in cli.commands:
        return None
    cmd = cli.commands[words[0]]
    if isinstance(cmd, click.Group):
        if len(words) < 2 or words[1] not in cmd.commands:
            return None
        return (words[0], words[1]), words[2:]
    return (words[0],), words[1:]


def _anchors(doc: Path) -> set[str]:
    slugs = set()
    for m in re.finditer(r"^#{1,6}\s+(.+?)\s*$", FENCE.sub("", doc.read_text(encoding="utf-8")), re.MULTILINE):
        text = re.sub(r"[`*]", "", m.group(1)).lower()
        slugs.add(re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text)))
    return slugs


def cli_problems(text: str) -> list[str]:
    """Every ``sand CMD ... --flag`` in code spans and code blocks names a command and flags it has."""
    problems = []
    chunks = [m.group(1) for m in SPAN.finditer(FENCE.sub("", text))]
    chunks += [line.split(" #", 1)[0] for m in FENCE.finditer(text) if m.group(1) in ("bash", "sh", "")
               for line in m.group(2).replace("\\\n", " ").splitlines()]
    for chunk in chunks:
        for m in SAND_CMD.finditer(chunk):
            words = m.group(1).split()
            if not words or not re.fullmatch(r"[a-z][\w-]*", words[0]):
                continue  # "sand" as a word in prose, or `sand --version`
            found = _command_path(words)
            if found is None:
                problems.append(f"`sand {' '.join(words[:2])}`: no such command")
                continue
            path, rest = found
            known = _help_flags(path) | GLOBAL_OPTIONS
            for flag in FLAG.findall(" ".join(rest)):
                if flag not in known:
                    problems.append(f"`sand {' '.join(path)} {flag}`: not in `sand {' '.join(path)} --help`")
    return problems


def name_problems(text: str, where: Path = DOCS / "x.md") -> list[str]:
    """Names in ``text`` (a Markdown doc at ``where``) that do not resolve."""
    problems: list[str] = []
    classes, sections, regs = _classes(), SECTIONS, _registries()
    prose = FENCE.sub("", text)
    spans = [m.group(1) for m in SPAN.finditer(prose)]
    code = "\n".join(m.group(2) for m in FENCE.finditer(text))
    for name in sorted(set(DOTTED.findall(" ".join(spans)) + DOTTED.findall(code))):
        if not resolve_dotted(name.rstrip(".")):
            problems.append(f"`{name}`: does not import")
    for m in FROM_IMPORT.finditer(code):
        for attr in re.findall(r"\w+", m.group(2)):
            if not resolve_dotted(f"{m.group(1)}.{attr}"):
                problems.append(f"`from {m.group(1)} import {attr}`: no such name")
    for span in spans:
        m = ATTR.match(span)
        if m and not FILE_NAME.fullmatch(span):
            head, attr = m.groups()
            if head in classes and not _has(classes[head], attr):
                problems.append(f"`{span}`: {head} has no {attr!r}")
            elif head not in classes and re.fullmatch(r"[A-Z][a-z]+(?:[A-Z][a-z]+)*", head):
                problems.append(f"`{span}`: no class {head!r} in {', '.join(CLASS_MODULES)}")
            elif head in sections and not _has(sections[head], attr):
                problems.append(f"`{span}`: the recipe's {head} section has no key {attr!r}")
            elif head in BASES and not any(
                    _has(e.cls.Params, attr) for e in regs[head].entries.values()):
                problems.append(f"`{span}`: no built-in {head} has a parameter {attr!r}")
        if span.startswith(ROOTS) and re.fullmatch(r"[\w./-]+", span) and "/" in span:
            if not any((base / span.rstrip("/")).exists() for base in (REPO, EXAMPLE)):
                problems.append(f"`{span}`: no such file or folder")
    for target in LINK.findall(prose):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        doc = (where.parent / path).resolve() if path else where
        if not doc.exists():
            problems.append(f"link ({target}): {path} does not exist")
        elif anchor and doc.suffix == ".md" and anchor not in _anchors(doc):
            problems.append(f"link ({target}): {doc.name} has no heading #{anchor}")
    return problems + cli_problems(text)


# ---------------------------------------------------------------------------- the docs


@pytest.mark.parametrize("doc", CHECKED)
def test_every_name_a_doc_mentions_exists(doc):
    path = REPO / doc
    problems = name_problems(path.read_text(encoding="utf-8"), path)
    assert not problems, f"{doc} names things the code does not have:\n" + "\n".join(problems)


def test_cli_md_documents_every_command_and_flag():
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| `sand ")]
    missing = []
    for path, cmd in _commands():
        prefix = f"| `sand {' '.join(path)}"
        mine = [r for r in rows if r.startswith((prefix + " ", prefix + "`"))]
        if not mine:
            missing.append(f"sand {' '.join(path)}: no row in the command table")
            continue
        said = set(FLAG.findall(" ".join(mine))) | GLOBAL_OPTIONS
        for opt in cmd.params:
            if isinstance(opt, click.Option) and not opt.hidden and not set(opt.opts) & said:
                missing.append(f"sand {' '.join(path)} {'/'.join(opt.opts)}: undocumented")
    for flag in GLOBAL_OPTIONS - {"--help", "--version"}:
        if flag not in text:
            missing.append(f"{flag}: undocumented")
    for opt in cli.params:  # the group's own options (sand --OPTION COMMAND)
        if isinstance(opt, click.Option) and not opt.hidden and not set(opt.opts) & (set(FLAG.findall(text)) |
                                                                                     GLOBAL_OPTIONS):
            missing.append(f"sand {'/'.join(opt.opts)}: undocumented")
    assert not missing, "docs/cli.md is missing:\n" + "\n".join(missing)


def table_problems(concepts: str, writing_plugins: str) -> list[str]:
    """concepts.md's kinds table and writing-plugins.md's environment table against the base classes.

    Required methods (before the ``;``) are exactly the abstract ones; provided ones (after it) exist with
    a default.
    """
    problems = []
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(\w+)` \| `\w+`: (.*?) \|", concepts, re.MULTILINE)}
    if set(rows) != set(BASES):
        problems.append(f"concepts.md: the kinds table has rows {sorted(rows)}")
    for kind, cell in rows.items():
        base = BASES.get(kind)
        required, _, provided = cell.partition(";")
        said = set(re.findall(r"(\w+)\(", required)) | set(re.findall(r"`(\w+)`", required))
        if base is not None and said != set(base.__abstractmethods__):
            problems.append(f"concepts.md, {kind}: required {sorted(said)}, "
                            f"abstract {sorted(base.__abstractmethods__)}")
        for name in re.findall(r"`(\w+)`", provided):
            if base is not None and (not hasattr(base, name) or name in base.__abstractmethods__):
                problems.append(f"concepts.md, {kind}: {name!r} is not a provided member of {base.__name__}")
    rows = re.findall(r"^\| `(\w+)\([^`]*\)` \| (required|provided[^|]*) \|", writing_plugins, re.MULTILINE)
    abstract = set(components.Environment.__abstractmethods__)
    for name, how in rows:
        if (how == "required") != (name in abstract):
            problems.append(f"writing-plugins.md: `{name}` is {how}, but it is {'' if name in abstract else 'not '}"
                            "abstract in Environment")
    if not abstract <= {name for name, _ in rows}:
        problems.append(f"writing-plugins.md: the environment table lacks {sorted(abstract - {n for n, _ in rows})}")
    return problems


def builtin_problems(concepts: str, hooks: str) -> list[str]:
    """The built-ins listed per kind in concepts.md's table and hooks.md's sections are the registered ones."""
    regs, problems = _registries(), []
    for kind in BASES:
        row = re.search(rf"^\| `{kind}` \|.*\| (.*?) \|$", concepts, re.MULTILINE)
        listed = set(re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", row.group(1)))) if row else set()
        if listed != set(regs[kind].entries):
            problems.append(f"concepts.md, {kind}: lists {sorted(listed)}, registered {sorted(regs[kind].entries)}")
    for kind, hook in ((k.name, k.hook) for k in components.KINDS):
        section = hooks.split(f"### {hook}(", 1)[-1].split("\n### ", 1)[0]
        m = re.search(r"Built-ins?:\s+(.*?)(?:;|\.\s|\.$)", section, re.DOTALL)
        listed = set(re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", m.group(1)))) if m else set()
        if listed != set(regs[kind].entries):
            problems.append(f"hooks.md, {hook}: lists {sorted(listed)}, registered {sorted(regs[kind].entries)}")
    return problems


def _doc(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def test_required_and_provided_methods_match_the_base_classes():
    assert table_problems(_doc("concepts.md"), _doc("writing-plugins.md")) == []


def test_built_in_lists_match_the_registries():
    assert builtin_problems(_doc("concepts.md"), _doc("hooks.md")) == []


def test_table_checks_catch_a_wrong_table():
    concepts = _doc("concepts.md").replace("`max_steps(task_id)`; *`expert_actions`", "`max_steps(task_id)`, "
                                           "`expert_actions(task_id)`; *`teleport`")
    writing = _doc("writing-plugins.md").replace("| `max_steps(task_id)` | required |", "| `max_steps(task_id)` | "
                                                 "provided |")
    problems = table_problems(concepts, writing)
    assert len(problems) == 3 and "expert_actions" in problems[0] and "'teleport'" in problems[1], problems
    assert "`max_steps` is provided" in problems[2], problems
    concepts = _doc("concepts.md").replace(", `webshop` ([environments]", " ([environments]")
    hooks = _doc("hooks.md").replace("`in_process`, `process_pool`, `ray`", "`in_process`, `warp_drive`")
    problems = builtin_problems(concepts, hooks)
    assert len(problems) == 2 and "webshop" in problems[0] and "warp_drive" in problems[1], problems


def test_methods_md_documents_every_built_in_method_and_its_parameters():
    """docs/methods.md has a section per built-in method and names each of its parameters (`method.<param>`), and
    the best_of_n evaluator's (`evaluator.<param>`)."""
    text, regs = _doc("methods.md"), _registries()
    missing = [f"## `{name}`" for name in regs["method"].entries if f"`{name}`" not in text]
    for kind, names in (("method", list(regs["method"].entries)), ("evaluator", ["best_of_n"])):
        for name in names:
            params = regs[kind].entries[name].cls.Params
            missing += [f"`{kind}.{f.name}`" for f in dataclasses.fields(params) if f"`{kind}.{f.name}`" not in text]
    assert not missing, "docs/methods.md lacks: " + ", ".join(missing)


def test_recipe_examples_validate():
    from sand_framework.config import load_recipe, validate

    text = (DOCS / "recipes.md").read_text(encoding="utf-8")
    blocks = [b for lang, b in FENCE.findall(text) if lang == "yaml" and re.search(r"^extends:", b, re.MULTILINE)]
    assert len(blocks) >= 2
    for block in blocks:
        path = REPO / ".docs_recipe_check.yaml"
        try:
            path.write_text(block, encoding="utf-8")
            data, _ = load_recipe(str(path), [])
            validate(data, _registries())
        finally:
            path.unlink(missing_ok=True)


# ---------------------------------------------------------------------------- the checker itself


def test_checker_catches_names_that_do_not_exist():
    doc = """
Use `sand_framework.components.Environment` and `sand_framework.components.NoSuchBase`.
`Environment.reset()` exists; `Environment.teleport()` does not. `Decision.score`, `Decision.confidence`,
`Teleporter.run()`.
`run.seed=1` and `run.colour=red`; `sampler.n` and `sampler.no_such_param`.
See `sand_framework/store/rundir.py` and `sand_framework/store/nowhere.py`, [a](cli.md), [b](nowhere.md),
[c](cli.md#exit-codes-that-are-not-there).

```python
from sand_framework.testing.conformance import assert_conforms, assert_perfect
```

```bash
sand run smoke --resume x --fast
sand teleport now
```
"""
    problems = name_problems(doc, DOCS / "x.md")
    expected = ["NoSuchBase", "teleport", "confidence", "Teleporter", "colour", "no_such_param", "nowhere.py",
                "nowhere.md", "#exit-codes-that-are-not-there", "assert_perfect", "--fast", "sand teleport"]
    for needle in expected:
        assert any(needle in p for p in problems), (needle, problems)
    assert len(problems) == len(expected), problems  # and nothing that exists was reported


def test_checker_catches_a_flag_in_a_table_row():
    assert cli_problems("| `sand components [KIND] [--yaml]` | ... |") == [
        "`sand components --yaml`: not in `sand components --help`"]
    assert cli_problems("| `sand components [KIND] [--json]` | ... |") == []
